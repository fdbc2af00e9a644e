//! Step 1, accept: request bodies read within their limits.
//!
//! A body is bounded three ways: its size (`max_body_bytes`, a 413), its
//! silences (`server.body_read_timeout`, a layer in `app.rs`), and its
//! whole duration (`server.body_total_timeout`): a client that sends a
//! byte a second is never silent long enough for the second bound, yet
//! would hold its connection, and a chat body's lease of the memory
//! budget, for as long as it likes. Each is a 4xx in the protocol's shape.

use super::budget::{BodyBudget, Lease};
use super::weight::{most, weigh_bytes, Scale};
use crate::error::{caused_by, ProxyError};
use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use http_body_util::{BodyExt, Limited};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// What bounds one request's body.
#[derive(Clone, Copy)]
pub struct Bounds {
    pub max_bytes: usize,
    pub deadline: Instant,
    pub total: Duration,
}

/// How long a client refused for the budget is asked to wait: leases are
/// given back as answers start, within a second or so on a busy instance.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Reads a chat body whole within `bounds`, holding a lease of `budget`
/// for its weight (`http/weight.rs`): the most it can weigh, up front,
/// when it is `declared` and the budget is quiet; else its bytes' up
/// front when `declared`, the rest as they come (all of it for an
/// undeclared body). Each chunk goes to `each_chunk` as it is read.
pub async fn read_chat_body(
    body: &mut Body,
    declared: Option<usize>,
    bounds: Bounds,
    budget: &Arc<BodyBudget>,
    each_chunk: impl FnMut(&[u8]),
) -> Result<(Bytes, Lease), ProxyError> {
    if declared.is_some_and(|length| length > bounds.max_bytes) {
        return Err(ProxyError::BodyTooLarge {
            limit: bounds.max_bytes,
        });
    }
    let unweighed = declared.and_then(|length| budget.lease_unweighed(most(length)));
    let (mut lease, scale) = match unweighed {
        Some(lease) => (lease, None),
        None => {
            let weight = weigh_bytes(declared.unwrap_or(0));
            match budget.lease(weight) {
                Some(lease) => (lease, Some(Scale::default())),
                None => return Err(refusal(budget.fits_alone(weight))),
            }
        }
    };
    let reading = collect(
        body,
        declared,
        bounds.max_bytes,
        (&mut lease, scale),
        each_chunk,
    );
    match tokio::time::timeout_at(bounds.deadline, reading).await {
        Ok(Ok(bytes)) => Ok((bytes, lease)),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(ProxyError::BodyDeadline {
            limit: bounds.total,
        }),
    }
}

/// How long the rest of a refused body is read, at most, before its
/// connection closes (and never past the body's own deadline: a body
/// refused for its slowness is not waited for). nginx's `lingering_time`
/// is 30 s; a client sending a body many times the limit over a slow link
/// gets its refusal reset past this, as with nginx past its own.
const LINGER: Duration = Duration::from_secs(10);

/// `response`, a refusal answered before `body` was read to its end. On
/// HTTP/1.1 the rest of the body would be read as the next request, so
/// the connection closes after the answer and says so (lest the client
/// reuse it and lose its next request), but only once the rest is read
/// and dropped: a socket closed with bytes unread is reset, and the
/// reset destroys the answer in the client's buffers before a client that
/// sends its whole body first has read it (nginx's lingering close).
pub fn refused_unread(
    version: http::Version,
    body: Body,
    bounds: Bounds,
    mut response: Response,
) -> Response {
    if version <= http::Version::HTTP_11 {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    tokio::spawn(async move {
        let mut body = body;
        let drain = async { while let Some(Ok(_)) = body.frame().await {} };
        let until = bounds.deadline.min(Instant::now() + LINGER);
        let _ = tokio::time::timeout_at(until, drain).await;
    });
    response
}

/// Why a body's weight was not leased: the budget is busy now (a 503 with
/// `Retry-After`), or the body would not fit even alone (a 413: a retry
/// would be refused the same way, forever).
pub(crate) fn refusal(fits_alone: bool) -> ProxyError {
    if !fits_alone {
        return ProxyError::BodyTooHeavy;
    }
    metrics::counter!("condenser_inflight_body_refused_total").increment(1);
    ProxyError::Overloaded {
        retry_after: RETRY_AFTER,
    }
}

/// The body's bytes in one buffer, sized up front when its length is
/// declared (its lease already covers the bytes); with a `scale`, the
/// lease grows chunk by chunk with what the chunk's values and strings
/// weigh, and its bytes' when undeclared. Each chunk goes to `each_chunk`
/// once copied, while it is still in the cache.
async fn collect(
    body: &mut Body,
    declared: Option<usize>,
    limit: usize,
    (lease, mut scale): (&mut Lease, Option<Scale>),
    mut each_chunk: impl FnMut(&[u8]),
) -> Result<Bytes, ProxyError> {
    let mut body = Limited::new(body, limit);
    let mut buffer = BytesMut::with_capacity(declared.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| read_error(error, limit))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let bytes = if declared.is_some() { 0 } else { data.len() };
        let values = scale.as_mut().map_or(0, |scale| scale.add(&data));
        let weight = weigh_bytes(bytes) + values;
        if !lease.grow(weight) {
            return Err(refusal(lease.fits_alone(weight)));
        }
        buffer.extend_from_slice(&data);
        each_chunk(&data);
    }
    Ok(buffer.freeze())
}

fn read_error(error: Box<dyn std::error::Error + Send + Sync>, limit: usize) -> ProxyError {
    if error.is::<http_body_util::LengthLimitError>() {
        return ProxyError::BodyTooLarge { limit };
    }
    if caused_by::<tower_http::timeout::TimeoutError>(error.as_ref()) {
        return ProxyError::BodyTimeout;
    }
    ProxyError::BodyRead(error.to_string())
}

/// A streamed body cut off at its deadline: past it, the stream ends in an
/// error (the upstream request fails) and [`Expired`] says why.
pub struct WithDeadline<S> {
    inner: S,
    sleep: Pin<Box<Sleep>>,
    expired: Expired,
}

/// Set once a streamed body passed its deadline.
#[derive(Clone, Default)]
pub struct Expired(Arc<AtomicBool>);

impl Expired {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl<S> WithDeadline<S> {
    pub fn new(inner: S, deadline: Instant) -> (Self, Expired) {
        let expired = Expired::default();
        let stream = Self {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            expired: expired.clone(),
        };
        (stream, expired)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the request body passed its deadline (server.body_total_timeout)")]
struct DeadlinePassed;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, E> Stream for WithDeadline<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: Into<BoxError>,
{
    type Item = Result<Bytes, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.expired.is_set() {
            return Poll::Ready(None);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.expired.0.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(Box::new(DeadlinePassed))));
        }
        Pin::new(&mut self.inner)
            .poll_next(cx)
            .map(|item| item.map(|chunk| chunk.map_err(Into::into)))
    }
}
