//! Step 5, forward: which headers cross.
//!
//! Which headers cross the proxy. Everything passes, the caller's credential
//! included (the upstream needs it), except what belongs to one connection.

use http::header::{
    HeaderMap, HeaderName, CONNECTION, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};

/// Hop-by-hop headers (RFC 9110 §7.6.1) describe a single connection, so a
/// proxy must not forward them; `host` and `content-length` are recomputed by
/// the client for the upstream connection. Names, not strings: a string
/// would be parsed again at every comparison.
const CONNECTION_SCOPED: [HeaderName; 10] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    HOST,
];

/// Condenser's own request headers: meaningful to Condenser, not to upstreams.
const CONDENSER_REQUEST_HEADERS: [HeaderName; 1] = [HeaderName::from_static("x-conversation-id")];

pub fn request_headers(incoming: &HeaderMap) -> HeaderMap {
    kept(incoming, |name| {
        name == http::header::CONTENT_LENGTH || CONDENSER_REQUEST_HEADERS.contains(name)
    })
}

/// Response headers keep `content-length`: bodies are relayed unchanged.
pub fn response_headers(upstream: &HeaderMap) -> HeaderMap {
    kept(upstream, |_| false)
}

/// `headers` without those of one connection, those its `connection`
/// header lists, and those `also_dropped` names. Copied in one pass, not
/// cloned and then removed from: each removal hashes its name, present or
/// not, and there were a score of them a request.
fn kept(headers: &HeaderMap, also_dropped: impl Fn(&HeaderName) -> bool) -> HeaderMap {
    let listed_in_connection: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    let mut kept = HeaderMap::with_capacity(headers.keys_len());
    for (name, value) in headers {
        let dropped = CONNECTION_SCOPED.contains(name)
            || listed_in_connection.contains(name)
            || also_dropped(name);
        if !dropped {
            kept.append(name.clone(), value.clone());
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::try_from(*k).expect("name"),
                    v.parse().expect("value"),
                )
            })
            .collect()
    }

    #[test]
    fn credentials_and_api_headers_pass_hop_by_hop_do_not() {
        let incoming = headers(&[
            ("authorization", "Bearer sk-test"),
            ("x-api-key", "sk-ant"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "tools-2024-04-04"),
            ("openai-organization", "org-1"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("host", "localhost"),
            ("content-length", "10"),
            ("x-conversation-id", "label"),
        ]);
        let out = request_headers(&incoming);
        let names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "authorization",
                "x-api-key",
                "anthropic-version",
                "anthropic-beta",
                "openai-organization"
            ]
        );
    }

    #[test]
    fn repeated_headers_keep_every_value_in_order() {
        let mut upstream = headers(&[
            ("content-type", "application/json"),
            ("connection", "close"),
            ("content-length", "2"),
        ]);
        upstream.append("set-cookie", "a=1".parse().expect("value"));
        upstream.append("set-cookie", "b=2".parse().expect("value"));
        let out = response_headers(&upstream);
        let cookies: Vec<&str> = out
            .get_all("set-cookie")
            .iter()
            .map(|value| value.to_str().expect("ascii"))
            .collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(
            out.get("content-length").map(|v| v.as_bytes()),
            Some(&b"2"[..])
        );
        assert!(out.get("connection").is_none());
        assert_eq!(out.len(), 4);
    }
}
