//! An OTLP/HTTP trace receiver, as a collector is one: `POST /v1/traces`
//! with an `ExportTraceServiceRequest` in protobuf (or, for
//! `http/json`, JSON), decoded with the OpenTelemetry protocol's own
//! types. And two collectors that take nothing: a closed port and one
//! that accepts connections and never answers.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// SERVER and CLIENT, as OTLP numbers span kinds.
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;
pub const INTERNAL: i32 = 1;
/// Status code ERROR.
pub const ERROR: i32 = 2;

/// One span as received, every value shown as text.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: Vec<(String, String)>,
    pub status_code: i32,
    pub status_message: String,
    pub events: Vec<(String, Vec<(String, String)>)>,
    pub resource: Vec<(String, String)>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        let mut values = self.attributes.iter().filter(|(k, _)| k == key);
        let first = values.next().map(|(_, v)| v.as_str());
        assert!(values.next().is_none(), "{key} set twice on {}", self.name);
        first
    }

    /// Every text the span carries: names, values, status, events, resource.
    pub fn texts(&self) -> Vec<&str> {
        let mut texts = vec![self.name.as_str(), self.status_message.as_str()];
        for (key, value) in self.attributes.iter().chain(&self.resource) {
            texts.extend([key.as_str(), value.as_str()]);
        }
        for (name, attributes) in &self.events {
            texts.push(name);
            for (key, value) in attributes {
                texts.extend([key.as_str(), value.as_str()]);
            }
        }
        texts
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// Content types of the export requests.
    content_types: Vec<String>,
}

pub struct OtlpReceiver {
    pub addr: SocketAddr,
    received: Arc<Mutex<Received>>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver { addr, received }
    }

    /// For `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.received.lock().expect("lock").spans.clone()
    }

    pub fn content_types(&self) -> Vec<String> {
        self.received.lock().expect("lock").content_types.clone()
    }

    /// The spans of `trace_id` once `done` says they are there (and a few
    /// export intervals more, for spans that ended at the same moment and
    /// left in the next batch), at most `limit` later.
    pub async fn trace(&self, trace_id: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let limit = Duration::from_secs(15);
        let started = std::time::Instant::now();
        let of_trace = || -> Vec<Span> {
            self.spans()
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect()
        };
        loop {
            let spans = of_trace();
            if done(&spans) {
                tokio::time::sleep(Duration::from_millis(400)).await;
                return of_trace();
            }
            assert!(
                started.elapsed() < limit,
                "trace {trace_id} incomplete after {limit:?}: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn traces(
    State(received): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> impl IntoResponse {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let decoded = if content_type.starts_with("application/json") {
        serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|e| e.to_string())
    } else {
        ExportTraceServiceRequest::decode(body).map_err(|e| e.to_string())
    };
    let request = match decoded {
        Ok(request) => request,
        Err(error) => return (StatusCode::BAD_REQUEST, error).into_response(),
    };
    let mut received = received.lock().expect("lock");
    received.content_types.push(content_type);
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| pairs(r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                let status = span.status.unwrap_or_default();
                received.spans.push(Span {
                    name: span.name,
                    kind: span.kind,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: pairs(span.attributes),
                    status_code: status.code,
                    status_message: status.message,
                    events: span
                        .events
                        .into_iter()
                        .map(|e| (e.name, pairs(e.attributes)))
                        .collect(),
                    resource: resource.clone(),
                });
            }
        }
    }
    (
        [("content-type", "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

fn pairs(attributes: Vec<KeyValue>) -> Vec<(String, String)> {
    attributes
        .into_iter()
        .map(|kv| (kv.key, show(kv.value.as_ref())))
        .collect()
}

fn show(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(|x| show(Some(x))).collect();
            format!("[{}]", items.join(","))
        }
        Some(Any::BytesValue(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Any::KvlistValue(list)) => format!("{:?}", pairs(list.values.clone())),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// A port nothing listens on.
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    listener.local_addr().expect("address")
}

/// A collector that accepts connections, reads, and never answers.
pub async fn silent_collector() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}
