//! A recording hop between Condenser and a real upstream: it forwards every
//! request unchanged and keeps what was asked and what the upstream
//! answered, so a test can see the summary calls a real server accepted or
//! refused.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use std::sync::{Arc, Mutex};

/// One request as the upstream received it, with its answer's status.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub body: String,
    pub status: u16,
}

#[derive(Clone)]
struct Hop {
    target: String,
    client: reqwest::Client,
    log: Arc<Mutex<Vec<Exchange>>>,
}

pub struct Recorder {
    pub url: String,
    log: Arc<Mutex<Vec<Exchange>>>,
}

impl Recorder {
    /// Forwards to `target` (scheme, host and port) from a random port.
    pub async fn start(target: &str) -> Recorder {
        let log = Arc::new(Mutex::new(Vec::new()));
        let hop = Hop {
            target: target.trim_end_matches('/').to_string(),
            // A fresh connection per request: llama.cpp closes idle ones
            // after 5 s, and reusing one it just closed fails the request
            // ("IncompleteMessage"), which is the recorder's fault, not the
            // proxy's.
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("client"),
            log: log.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(hop);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("recorder binds");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Recorder { url, log }
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.log.lock().expect("log").clone()
    }

    /// Requests carrying the summary prompt's marker.
    pub fn summary_calls(&self) -> Vec<Exchange> {
        let marker = format!("{} REQUEST", condenser::protocol::SUMMARY_MARKER);
        self.exchanges()
            .into_iter()
            .filter(|e| e.body.contains(&marker))
            .collect()
    }
}

async fn forward(State(hop): State<Hop>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut outgoing = hop
        .client
        .request(parts.method, format!("{}{path}", hop.target))
        .body(body.clone());
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONTENT_LENGTH {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.send().await.expect("the upstream answers");
    let status = answer.status();
    let content_type = answer.headers().get(http::header::CONTENT_TYPE).cloned();
    let answer_body = answer.bytes().await.unwrap_or_default();
    hop.log.lock().expect("log").push(Exchange {
        body: String::from_utf8_lossy(&body).into_owned(),
        status: status.as_u16(),
    });
    let mut response = Response::new(Body::from(answer_body));
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, content_type);
    }
    response
}
