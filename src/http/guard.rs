//! Step 1, accept: requests refused before routing.
//!
//! Requests that must never reach an upstream, refused before routing in
//! the error shape of the protocol the client speaks:
//!
//! - `CONNECT` asks for a tunnel: Condenser is a reverse proxy for two HTTP
//!   APIs, and forwarding it would hand the caller's credential to a
//!   tunnel nobody configured.
//! - An asterisk-form target (`OPTIONS *`) names the server, not a
//!   resource: there is no upstream path for it.
//! - A `.` or `..` segment, literal or percent-encoded, would be resolved
//!   when the upstream URL is built and could climb out of the configured
//!   base path (`/v1/../../x` reaching `/x` with the caller's key). No
//!   endpoint of these APIs has one, so it is refused rather than guessed at.

use crate::error::ProxyError;
use crate::state::AppState;
use axum::extract::Request;
use axum::response::Response;
use http::Method;
use percent_encoding::percent_decode_str;

/// The refusal of a request that must not be forwarded, in the error
/// shape of the protocol its path speaks; `None` for any other.
pub fn refused(state: &AppState, request: &Request) -> Option<Response> {
    let error = refusal(request.method(), request.uri())?;
    let protocol = state
        .routes
        .protocol(request.uri().path(), request.headers());
    Some(error.into_response_for(protocol))
}

fn refusal(method: &Method, uri: &http::Uri) -> Option<ProxyError> {
    if method == Method::CONNECT {
        return Some(ProxyError::MethodNotAllowed("CONNECT"));
    }
    let path = uri.path();
    if path == "*" {
        return Some(ProxyError::BadTarget("asterisk-form request target"));
    }
    if escapes(path) {
        return Some(ProxyError::BadTarget("`.` or `..` path segment"));
    }
    None
}

/// Whether a path has a dot segment once decoded. `\` counts as a
/// separator: URL parsers treat it as `/` in http(s) URLs.
fn escapes(path: &str) -> bool {
    let decoded = percent_decode_str(path).decode_utf8_lossy();
    decoded
        .split(['/', '\\'])
        .any(|segment| segment == "." || segment == "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_refused(method: Method, target: &str) -> bool {
        let uri: http::Uri = target.parse().expect("a valid target");
        refusal(&method, &uri).is_some()
    }

    #[test]
    fn dot_segments_are_refused_in_every_spelling() {
        for path in [
            "/v1/../../../x",
            "/v1/%2e%2e/%2E%2E/x",
            "/v1/.%2e/x",
            "/v1/..%2fx",
            "/v1/..%5cx",
            "/v1/./models",
            "/v1/..",
        ] {
            assert!(is_refused(Method::GET, path), "{path}");
        }
    }

    #[test]
    fn ordinary_paths_and_dots_inside_names_pass() {
        for path in [
            "/v1/models",
            "/v1/models/gpt-4.1",
            "/v1/files/file-..abc",
            "/v1/chat/completions?x=..",
            "/",
        ] {
            assert!(!is_refused(Method::POST, path), "{path}");
        }
    }

    #[test]
    fn connect_and_asterisk_form_are_refused() {
        assert!(is_refused(Method::CONNECT, "api.openai.com:443"));
        assert!(is_refused(Method::OPTIONS, "*"));
        assert!(!is_refused(Method::OPTIONS, "/v1/models"));
    }
}
