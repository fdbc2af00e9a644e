//! Step 5, forward: pooled HTTP clients for every upstream.

pub mod headers;
pub mod relay;
pub mod routes;
pub mod socket;

use crate::config::Timeouts;
use crate::error::{caused_by, ProxyError};
use axum::response::Response;
use http::{HeaderMap, Method};
use routes::{Route, Upstream};
use std::sync::Arc;

/// The HTTP clients of every upstream: one connection pool for each
/// connection thread (`http::threads`), so that a request's upstream
/// socket is driven by the thread serving the request, and one for calls
/// made anywhere else (a compaction that outlived its client's hang-up on
/// the main runtime, the CLI).
#[derive(Clone)]
pub struct UpstreamClient {
    pools: Arc<[reqwest::Client]>,
    timeouts: Timeouts,
    body_limit: usize,
}

impl UpstreamClient {
    pub fn new(
        timeouts: &Timeouts,
        body_limit: usize,
        connection_threads: usize,
    ) -> anyhow::Result<Self> {
        let pools = (0..=connection_threads)
            .map(|_| http_client(timeouts))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            pools,
            timeouts: timeouts.clone(),
            body_limit,
        })
    }

    /// The pool of the thread the caller runs on.
    fn http(&self) -> &reqwest::Client {
        let index = crate::threads::current().map_or(0, |thread| thread + 1);
        self.pools.get(index).unwrap_or(&self.pools[0])
    }

    pub fn idle_timeout(&self) -> std::time::Duration {
        self.timeouts.idle
    }

    /// What a request over an upstream socket waits for, as over HTTP.
    pub fn socket_waits(&self) -> socket::Waits {
        socket::Waits {
            connect: self.timeouts.connect,
            first_frame: self.timeouts.first_byte,
            idle: self.timeouts.pool_idle,
        }
    }

    /// Forwards a request Condenser does not handle, byte for byte, and
    /// relays the answer as it streams: the one forwarding path of the
    /// untouched routes and of bodies Condenser cannot parse.
    pub async fn forward(
        &self,
        route: &Route,
        method: Method,
        client_headers: &HeaderMap,
        body: reqwest::Body,
    ) -> Response {
        let outgoing = headers::request_headers(client_headers);
        match self
            .send(&route.upstream, method, &route.url, outgoing, body)
            .await
        {
            Ok(response) => relay::relay(response, self.idle_timeout()),
            Err(error) => error.into_response_for(route.upstream.protocol),
        }
    }

    /// Sends a request and waits for the response headers, at most the
    /// first-byte timeout. When spans are exported, the request carries
    /// the `traceparent` of the span it is sent in.
    pub async fn send(
        &self,
        upstream: &Upstream,
        method: Method,
        url: &reqwest::Url,
        mut headers: HeaderMap,
        body: reqwest::Body,
    ) -> Result<reqwest::Response, ProxyError> {
        crate::telemetry::server::inject(&mut headers);
        let mut request = self
            .http()
            .request(method, url.clone())
            .headers(headers)
            .body(body)
            .build()
            .map_err(|error| classify(upstream, error, self.body_limit))?;
        if let Some(signer) = upstream.protocol.provider().signer() {
            signer.sign(&mut request).map_err(|error| {
                tracing::error!(%error, upstream = %upstream.name, "the request could not be signed");
                ProxyError::Internal
            })?;
        }
        let timeout = self.timeouts.first_byte;
        let started = std::time::Instant::now();
        let sent = tokio::time::timeout(timeout, self.http().execute(request)).await;
        let upstream_label = upstream.protocol.as_str();
        metrics::histogram!("condenser_upstream_response_seconds", "protocol" => upstream_label)
            .record(started.elapsed().as_secs_f64());
        match sent {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(classify(upstream, error, self.body_limit)),
            Err(_) => Err(ProxyError::UpstreamTimeout {
                upstream: upstream.name.clone(),
                timeout,
            }),
        }
    }
}

fn http_client(timeouts: &Timeouts) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        // A redirect would send the caller's credential somewhere the
        // operator did not configure: relay it to the client instead.
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(timeouts.pool_idle)
        .tcp_nodelay(true)
        .build()
}

/// Maps a transport error to the proxy's own error. URLs are stripped: a
/// query string may carry a key (some APIs take `?key=`).
fn classify(upstream: &Upstream, error: reqwest::Error, body_limit: usize) -> ProxyError {
    if caused_by::<http_body_util::LengthLimitError>(&error) {
        return ProxyError::BodyTooLarge { limit: body_limit };
    }
    if caused_by::<tower_http::timeout::TimeoutError>(&error) {
        return ProxyError::BodyTimeout;
    }
    let reason = if error.is_timeout() {
        "connection timed out".to_string()
    } else {
        innermost_cause(&error).unwrap_or_else(|| error.without_url().to_string())
    };
    ProxyError::UpstreamUnreachable {
        upstream: upstream.name.clone(),
        reason,
    }
}

fn innermost_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = error.source()?;
    while let Some(next) = current.source() {
        current = next;
    }
    Some(current.to_string())
}
