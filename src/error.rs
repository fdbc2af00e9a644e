//! Beside the flow, errors: what the proxy itself answers.
//!
//! Errors the proxy itself raises, rendered in the error shape of the
//! protocol the client speaks, so SDKs parse them like upstream errors.

use crate::protocol::{ErrorClass, ErrorInfo, Protocol};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("upstream {upstream} is unreachable: {reason}")]
    UpstreamUnreachable { upstream: String, reason: String },
    #[error("upstream {upstream} did not answer within {}s", timeout.as_secs_f64())]
    UpstreamTimeout { upstream: String, timeout: Duration },
    #[error("upstream {upstream} stopped sending for {}s", timeout.as_secs_f64())]
    UpstreamIdle { upstream: String, timeout: Duration },
    #[error("request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("could not read the request body: {0}")]
    BodyRead(String),
    #[error("the request body stopped arriving (server.body_read_timeout)")]
    BodyTimeout,
    #[error("the request body took longer than {}s to arrive (server.body_total_timeout)", limit.as_secs_f64())]
    BodyDeadline { limit: Duration },
    /// A body that would not fit the budget even alone: denser than any
    /// chat body (see `http/budget.rs`).
    #[error("the request body has too many JSON values for its size to parse within server.max_inflight_body_bytes: send fewer, larger values or split the request")]
    BodyTooHeavy,
    #[error("too many request bytes are being read at once (server.max_inflight_body_bytes): retry after {}s", retry_after.as_secs())]
    Overloaded { retry_after: Duration },
    #[error("{0} is not supported: Condenser forwards API requests, not tunnels")]
    MethodNotAllowed(&'static str),
    #[error("request target not forwarded: {0}")]
    BadTarget(&'static str),
    /// A WebSocket upgrade: Condenser's pipeline speaks HTTP, and a 426
    /// makes clients that offer both (Codex) fall back to HTTPS at once.
    #[error("WebSocket mode is not served here: send the request over HTTPS")]
    UpgradeRequired,
    /// One credential holds as many WebSockets as it may: answered like
    /// [`Self::UpgradeRequired`], so the client carries on over HTTPS.
    #[error("too many WebSockets open with this credential (server.websocket_connections_per_tenant): send the request over HTTPS")]
    WebsocketLimit,
    /// A WebSocket frame that is not a request of the mode.
    #[error("invalid WebSocket frame: {0}")]
    BadFrame(String),
    /// A `response.create` while the socket's previous one is answered:
    /// the mode serves one response at a time per connection.
    #[error("a response is already in progress on this WebSocket: send the next response.create after its response.completed")]
    ResponseInProgress,
    /// A compaction item that claims to be Condenser's but does not open
    /// (altered, or made with another key or credential).
    #[error("invalid compaction item: {0}")]
    ForgedItem(String),
    /// A compaction the client asked for in its provider's own form could
    /// not be made.
    #[error("condenser could not compact the conversation: {0}")]
    CompactionFailed(&'static str),
    /// A compaction asked again with nothing new from the client since the
    /// last one, where no deeper compaction brings the request below where
    /// it stood: a client error, so the client ends its turn instead of
    /// asking again (`compaction::progress`).
    #[error("{}", loop_message(*asked_tokens, *fixed_tokens))]
    CompactionLoop {
        /// The request's size when the compaction was asked.
        asked_tokens: u64,
        /// What no compaction shrinks, where it was measured.
        fixed_tokens: Option<u64>,
    },
    /// The client signed its request (AWS SigV4, which covers the body),
    /// and answering it needs a body Condenser would change.
    #[error("condenser: this request is signed by the client (AWS SigV4), and answering it needs a compaction, which would change the body the signature covers; send it with a Bedrock API key (Authorization: Bearer), or without credentials so that Condenser signs it (CLAUDE_CODE_SKIP_BEDROCK_AUTH=1 and AWS credentials in Condenser's environment)")]
    SignedByClient,
    /// The request's own work ended without an answer (a stream already
    /// committed by keep-alives can only report it in-band).
    #[error("condenser: the request failed")]
    Internal,
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::UpstreamUnreachable { .. } => StatusCode::BAD_GATEWAY,
            Self::UpstreamTimeout { .. } | Self::UpstreamIdle { .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::BodyTooLarge { .. } | Self::BodyTooHeavy => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyRead(_) | Self::BadTarget(_) => StatusCode::BAD_REQUEST,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::BodyTimeout | Self::BodyDeadline { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::UpgradeRequired | Self::WebsocketLimit => StatusCode::UPGRADE_REQUIRED,
            Self::BadFrame(_) => StatusCode::BAD_REQUEST,
            Self::ResponseInProgress => StatusCode::CONFLICT,
            Self::ForgedItem(_) => StatusCode::BAD_REQUEST,
            Self::CompactionFailed(_) => StatusCode::BAD_GATEWAY,
            Self::CompactionLoop { .. } => StatusCode::BAD_REQUEST,
            Self::SignedByClient => StatusCode::BAD_REQUEST,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Low-cardinality name for metric labels and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::UpstreamUnreachable { .. } => "upstream_unreachable",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::UpstreamIdle { .. } => "upstream_idle",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::BodyTooHeavy => "body_too_heavy",
            Self::BodyRead(_) => "body_read",
            Self::BodyTimeout | Self::BodyDeadline { .. } => "body_timeout",
            Self::Overloaded { .. } => "overloaded",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::BadTarget(_) => "bad_request_target",
            Self::UpgradeRequired => "websocket_not_served",
            Self::WebsocketLimit => "websocket_connection_limit",
            Self::BadFrame(_) => "invalid_frame",
            Self::ResponseInProgress => "response_in_progress",
            Self::ForgedItem(_) => "invalid_compaction_item",
            Self::CompactionFailed(_) => "compaction_failed",
            Self::CompactionLoop { .. } => "compaction_loop",
            Self::SignedByClient => "signed_by_client",
            Self::Internal => "internal",
        }
    }

    /// The error's JSON body in `protocol`'s own shape.
    pub fn body(&self, protocol: Protocol) -> serde_json::Value {
        let message = self.to_string();
        protocol.provider().error_body(&ErrorInfo {
            status: self.status().as_u16(),
            kind: self.kind(),
            message: &message,
            class: self.class(),
        })
    }

    /// What kind of failure this is, in the terms error shapes tell apart.
    fn class(&self) -> ErrorClass {
        match self {
            Self::BodyTooLarge { .. } | Self::BodyTooHeavy => ErrorClass::TooLarge,
            Self::BodyRead(_)
            | Self::MethodNotAllowed(_)
            | Self::BadTarget(_)
            | Self::UpgradeRequired
            | Self::WebsocketLimit
            | Self::BadFrame(_)
            | Self::ResponseInProgress
            | Self::ForgedItem(_)
            | Self::CompactionLoop { .. }
            | Self::SignedByClient => ErrorClass::InvalidRequest,
            Self::BodyTimeout | Self::BodyDeadline { .. } => ErrorClass::ClientTimeout,
            Self::UpstreamTimeout { .. } | Self::UpstreamIdle { .. } => ErrorClass::UpstreamTimeout,
            Self::Overloaded { .. } => ErrorClass::Overloaded,
            Self::UpstreamUnreachable { .. } | Self::Internal | Self::CompactionFailed(_) => {
                ErrorClass::Server
            }
        }
    }

    /// When the client may try again, for errors that pass.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Overloaded { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    pub fn into_response_for(self, protocol: Protocol) -> Response {
        ProtocolError {
            error: self,
            protocol,
        }
        .into_response()
    }
}

/// Why a compaction loop was ended, and what the client's user can change.
fn loop_message(asked_tokens: u64, fixed_tokens: Option<u64>) -> String {
    let cause = match fixed_tokens {
        Some(fixed) => format!(
            "what no compaction shrinks (instructions, tools and the messages the client keeps: about {fixed} tokens) already fills most of the {asked_tokens}-token request it was asked at"
        ),
        None => format!(
            "the client asked again at about {asked_tokens} tokens with nothing new since the last compaction, whose summary it already has"
        ),
    };
    format!(
        "condenser: compaction cannot make progress: {cause}. Raise the client's compaction threshold (Codex: model_auto_compact_token_limit) or its context window (model_context_window), or shorten its fixed prompt; a new message lets Condenser compact again"
    )
}

/// Whether `E` is anywhere in `error`'s chain of causes.
pub fn caused_by<E: std::error::Error + 'static>(
    error: &(dyn std::error::Error + 'static),
) -> bool {
    let mut current = Some(error);
    while let Some(inner) = current {
        if inner.is::<E>() {
            return true;
        }
        current = inner.source();
    }
    false
}

/// A [`ProxyError`] paired with the dialect to render it in. The error rides
/// along in the response extensions so one middleware logs it.
pub struct ProtocolError {
    pub error: ProxyError,
    pub protocol: Protocol,
}

/// What the logging middleware finds in a response the proxy generated.
#[derive(Clone, Debug)]
pub struct ProxyErrorLog {
    pub kind: &'static str,
    pub message: String,
}

impl IntoResponse for ProtocolError {
    fn into_response(self) -> Response {
        let status = self.error.status();
        let body = self.error.body(self.protocol).to_string();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            "x-condenser-error",
            HeaderValue::from_static(self.error.kind()),
        );
        if let Some(after) = self.error.retry_after() {
            headers.insert(http::header::RETRY_AFTER, after.as_secs().max(1).into());
        }
        response.extensions_mut().insert(ProxyErrorLog {
            kind: self.error.kind(),
            message: self.error.to_string(),
        });
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape_has_message_type_param_code() {
        let error = ProxyError::UpstreamUnreachable {
            upstream: "openai".into(),
            reason: "connection refused".into(),
        };
        let body = error.body(crate::protocol::openai::PROTOCOL);
        assert_eq!(
            body["error"]["message"],
            "upstream openai is unreachable: connection refused"
        );
        assert_eq!(body["error"]["type"], "api_error");
        assert!(body["error"]["param"].is_null());
        assert_eq!(body["error"]["code"], "upstream_unreachable");
    }

    #[test]
    fn overloaded_is_a_503_with_retry_after_in_each_shape() {
        let error = || ProxyError::Overloaded {
            retry_after: Duration::from_secs(1),
        };
        assert_eq!(
            error().body(crate::protocol::openai::PROTOCOL)["error"]["code"],
            "overloaded"
        );
        let anthropic = error().body(crate::protocol::anthropic::PROTOCOL);
        assert_eq!(anthropic["error"]["type"], "overloaded_error");
        let response = error().into_response_for(crate::protocol::openai::PROTOCOL);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
    }

    #[test]
    fn anthropic_shape_is_typed_error_envelope() {
        let error = ProxyError::BodyTooLarge { limit: 10 };
        let body = error.body(crate::protocol::anthropic::PROTOCOL);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "request_too_large");
        assert_eq!(error.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
