//! Step 5, forward: work that outlives a hang-up.
//!
//! A request's work runs in its handler's task, not a task of its own: on
//! the hot path a hand-off between tasks (and the wake-up of a parked
//! worker thread it often takes) costs more than the rest of Condenser's
//! own logic. Only when the client hangs up mid-compaction does the work
//! move to a background task, so the summary its retry will reuse is
//! finished and stored.

use super::respond::Report;
use axum::response::Response;
use futures_util::FutureExt;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// What the work ended with: its answer, or the panic that ended it.
pub type Finished = Result<(Response, Report), Box<dyn Any + Send>>;

type Running = Pin<Box<dyn Future<Output = Finished> + Send>>;

/// The work of one request, polled by whoever holds it.
pub struct Work {
    running: Option<Running>,
    compacting: watch::Receiver<bool>,
    background: TaskTracker,
}

impl Work {
    pub fn new(
        work: impl Future<Output = (Response, Report)> + Send + 'static,
        compacting: watch::Receiver<bool>,
        background: TaskTracker,
    ) -> Self {
        // A panic answers this request with a 500, as a task's would.
        let running = Box::pin(AssertUnwindSafe(work).catch_unwind());
        Self {
            running: Some(running),
            compacting,
            background,
        }
    }
}

impl Work {
    /// Where work that outlives its handler runs, so shutdown waits for it.
    pub fn background(&self) -> &TaskTracker {
        &self.background
    }
}

impl Future for Work {
    type Output = Finished;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Finished> {
        let Some(running) = self.running.as_mut() else {
            return Poll::Pending;
        };
        let finished = ready!(running.as_mut().poll(cx));
        self.running = None;
        Poll::Ready(finished)
    }
}

impl Drop for Work {
    /// Until a compaction starts, the work only waits on the upstream for
    /// this client: it ends, and its upstream socket closes. A compaction
    /// is kept going, and so is the retry after it, bounded by the
    /// upstream timeouts.
    fn drop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        if !*self.compacting.borrow() {
            return;
        }
        // No runtime: the process is stopping, and the work with it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.background.spawn_on(
                async move {
                    let _ = running.await;
                },
                &runtime,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A work, polled once, that waits for `go` and then marks `finished`.
    struct Waiting {
        go: tokio::sync::oneshot::Sender<()>,
        finished: Arc<AtomicBool>,
        background: TaskTracker,
    }

    /// Starts a work, then drops it as a handler does when its client
    /// hangs up.
    fn dropped_while_waiting(compacting: bool) -> Waiting {
        let (go, wait) = tokio::sync::oneshot::channel();
        let (finished, background) = (Arc::new(AtomicBool::new(false)), TaskTracker::new());
        let (_, compacting) = watch::channel(compacting);
        let marks = finished.clone();
        let mut work = Work::new(
            async move {
                let _ = wait.await;
                marks.store(true, Ordering::SeqCst);
                (Response::default(), Report::default())
            },
            compacting,
            background.clone(),
        );
        assert!((&mut work).now_or_never().is_none());
        drop(work);
        Waiting {
            go,
            finished,
            background,
        }
    }

    #[tokio::test]
    async fn a_work_dropped_mid_compaction_finishes_in_the_background() {
        let waiting = dropped_while_waiting(true);
        waiting.go.send(()).expect("the work waits");
        waiting.background.close();
        waiting.background.wait().await;
        assert!(waiting.finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_work_dropped_before_compacting_ends_with_its_client() {
        let waiting = dropped_while_waiting(false);
        assert!(waiting.go.send(()).is_err(), "the work still waits");
        assert!(waiting.background.is_empty());
        assert!(!waiting.finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panicking_work_finishes_with_the_panic() {
        let (_, compacting) = watch::channel(false);
        let work = Work::new(
            async { panic!("upstream answer malformed") },
            compacting,
            TaskTracker::new(),
        );
        let Err(panic) = work.await else {
            panic!("the work answered")
        };
        assert_eq!(
            panic.downcast_ref::<&str>(),
            Some(&"upstream answer malformed")
        );
    }
}
