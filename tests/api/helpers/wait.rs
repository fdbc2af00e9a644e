//! Waiting on a condition, not on the clock: a test polls what it means
//! ("the row is written", "the process has exited") until a deadline, and
//! fails with what it waited for if the deadline passes. A busy machine
//! then makes a test slower, never wrong.

use std::future::Future;
use std::time::Duration;

/// How long a test waits for something the proxy does in the background:
/// far longer than it takes on an idle machine, so only a real hang fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(20);

/// Waits until `condition` holds; panics naming `what` once `deadline`
/// has passed.
pub async fn wait_until<F, Fut>(deadline: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for_some(deadline, what, || {
        let holds = condition();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// Waits until `probe` gives a value and returns it; panics naming `what`
/// once `deadline` has passed.
pub async fn wait_for_some<T, F, Fut>(deadline: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "waited {deadline:?} for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// [`wait_until`] for code off the runtime (process and socket checks in
/// synchronous helpers).
pub fn wait_until_blocking(deadline: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + deadline;
    while !condition() {
        assert!(
            std::time::Instant::now() < until,
            "waited {deadline:?} for {what}"
        );
        std::thread::sleep(POLL);
    }
}
