//! Steps 1 to 7, the protocol seam: Claude on Amazon Bedrock (InvokeModel).
//!
//! `POST /model/{modelId}/invoke` and `/invoke-with-response-stream`: the
//! Messages body without `model` and `stream` (the path says both), with
//! `anthropic_version: "bedrock-2023-05-31"` and the betas as a body array
//! `anthropic_beta` (the Anthropic SDKs' `bedrock` clients). Everything a
//! message is stays Anthropic's, so the adapter lends Messages' rules;
//! what is Bedrock's own is here: the model in the path (percent-encoded,
//! an ARN's `/` as `%2F`), the binary event stream
//! (`application/vnd.amazon.eventstream`, whose `chunk` events carry
//! `{"bytes": base64(one Messages stream event)}`), the error shape
//! (`{"message": …}`), the credential that names the caller (a Bedrock
//! API key, or the access key id of a SigV4 signature, never the
//! signature itself, which changes with every request), and SigV4
//! signing of what Condenser sends when the client sends no credential.

use super::anthropic::Anthropic;
use super::framing::{FrameDecoder, Frames};
use super::{
    Adapter, AnswerFacts, AnswerMessage, ChatRequest, Endpoint, ErrorInfo, Outline, OutputField,
    Protocol, Provider, Root, Signer, SummaryCall, SystemPart, TelemetryNames, ToolLinks, Trimmed,
    Usage, WindowProbe,
};
use aws_smithy_eventstream::frame::{write_message_to, DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use base64::Engine;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method};
use serde_json::{json, Value};
use std::sync::LazyLock;

mod signing;

pub struct Bedrock;

/// Claude on Bedrock's runtime API.
pub const PROTOCOL: Protocol = Protocol::of(&Bedrock);

/// The `anthropic_version` Bedrock takes, for the summary calls.
const VERSION: &str = "bedrock-2023-05-31";

/// The most bytes of one frame read before its end: Bedrock's events
/// are kilobytes.
const MAX_FRAME: usize = 16 << 20;

/// The content type of an event stream.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// The model id of a path `/model/{modelId}/{action}` (decoded) and the
/// action; `None` for any other path.
pub fn model_and_action(path: &str) -> Option<(String, &str)> {
    let rest = path.strip_prefix("/model/")?;
    let (id, action) = rest.rsplit_once('/')?;
    let id = percent_encoding::percent_decode_str(id)
        .decode_utf8()
        .ok()?;
    (!id.is_empty() && !action.is_empty()).then(|| (id.into_owned(), action))
}

/// A model id as a path segment, as the SDKs write it (`:` kept).
fn path_segment(model: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b':')
        .remove(b'.')
        .remove(b'-')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(model, SEGMENT).to_string()
}

impl Adapter for Bedrock {
    /// A body alone does not say the model: only [`Adapter::outline_at`]
    /// outlines a Bedrock request.
    fn outline(&self, _body: Bytes) -> Option<Outline> {
        None
    }

    fn outline_at(&self, body: Bytes, path: &str) -> Option<Outline> {
        let (model, action) = model_and_action(path)?;
        let stream = action == "invoke-with-response-stream";
        Outline::read_as(body, "messages", Some((model, stream)), |body, _, _| {
            SystemPart::Value(body.get("system").cloned().unwrap_or(Value::Null))
        })
    }

    fn build(&self, request: &ChatRequest, messages: &[&Value]) -> Vec<u8> {
        Anthropic.build(request, messages)
    }

    fn canonical(&self, message: &Value) -> Vec<u8> {
        Anthropic.canonical(message)
    }

    /// The same messages hash alike whichever door they came through.
    fn canonical_scheme(&self) -> &'static str {
        Anthropic.canonical_scheme()
    }

    fn tool_links(&self, message: &Value) -> ToolLinks {
        Anthropic.tool_links(message)
    }

    fn summary_message(&self, role: &str, summary: &str) -> Value {
        Anthropic.summary_message(role, summary)
    }

    /// Messages' summary request, without `model` (it is in the URL) and
    /// with the client's `anthropic_version`, which Bedrock requires.
    fn summary_request(&self, client: &ChatRequest, call: &SummaryCall<'_>) -> Value {
        let mut summary = Anthropic.summary_request(client, call);
        if let Some(fields) = summary.as_object_mut() {
            fields.remove("model");
            let version = client.body.get("anthropic_version").cloned();
            fields.insert(
                "anthropic_version".into(),
                version.unwrap_or(json!(VERSION)),
            );
        }
        summary
    }

    /// `/model/{summary model}/invoke`: a summary is asked for whole.
    fn summary_url(&self, client_url: &reqwest::Url, model: &str) -> reqwest::Url {
        let mut url = client_url.clone();
        if let Some((base, _)) = client_url.path().split_once("/model/") {
            url.set_path(&format!("{base}/model/{}/invoke", path_segment(model)));
        }
        url
    }

    fn non_text_markers(&self) -> &'static [&'static str] {
        Anthropic.non_text_markers()
    }

    fn response_text(&self, response: &Value) -> Option<String> {
        Anthropic.response_text(response)
    }

    fn ran_out(&self, response: &Value) -> bool {
        Anthropic.ran_out(response)
    }

    fn refused_field(&self, error: &Value) -> Option<OutputField> {
        Anthropic.refused_field(error)
    }

    fn transcript_entry(&self, message: &Value) -> String {
        Anthropic.transcript_entry(message)
    }

    fn trim_tool_result(&self, message: &Value, keep_bytes: usize) -> Option<Trimmed> {
        Anthropic.trim_tool_result(message, keep_bytes)
    }

    fn max_output_tokens(&self, request: &ChatRequest) -> Option<u64> {
        Anthropic.max_output_tokens(request)
    }

    /// A `chunk` holding Messages' own `ping`, which every Messages client
    /// skips.
    fn keepalive(&self) -> &'static [u8] {
        static PING: LazyLock<Vec<u8>> = LazyLock::new(|| chunk_frame(br#"{"type":"ping"}"#));
        &PING
    }

    /// An event stream has no frame a client would skip without reading.
    fn stream_trailer(&self, _compactions: u32) -> Option<String> {
        None
    }

    fn stream_content_type(&self) -> &'static str {
        EVENT_STREAM
    }

    /// An exception frame, as Bedrock ends a stream that failed: its type
    /// says the status (botocore maps it back to one).
    fn stream_error_event(&self, status: u16, error_body: &Value) -> Vec<u8> {
        let exception = match status {
            400 | 413 => "validationException",
            429 => "throttlingException",
            408 | 504 => "modelTimeoutException",
            503 => "serviceUnavailableException",
            _ => "internalServerException",
        };
        let message = error_body
            .get("message")
            .or_else(|| error_body.pointer("/error/message"))
            .and_then(Value::as_str)
            .unwrap_or("the request failed");
        exception_frame(exception, message)
    }

    fn frames(&self) -> Option<&'static dyn Frames> {
        Some(&EventStream)
    }

    fn usage(&self, usage: &Value) -> Option<Usage> {
        Anthropic.usage(usage)
    }

    fn stream_usage(&self, event: &Value) -> Option<Usage> {
        Anthropic.stream_usage(event)
    }

    fn answer_facts(&self, answer: &Value, facts: &mut AnswerFacts) {
        Anthropic.answer_facts(answer, facts)
    }

    fn fact_markers(&self) -> &'static [&'static str] {
        Anthropic.fact_markers()
    }

    fn answer_messages<'v>(&self, answer: &'v Value) -> Vec<AnswerMessage<'v>> {
        Anthropic.answer_messages(answer)
    }
}

/// One `chunk` event carrying `event`, a Messages stream event's JSON.
pub fn chunk_frame(event: &[u8]) -> Vec<u8> {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event);
    let payload = json!({ "bytes": bytes }).to_string();
    frame(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.into_bytes(),
    )
}

/// One exception frame of type `exception` saying `message`.
pub fn exception_frame(exception: &str, message: &str) -> Vec<u8> {
    let payload = json!({ "message": message }).to_string();
    frame(
        &[
            (":exception-type", exception),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload.into_bytes(),
    )
}

fn frame(headers: &[(&'static str, &str)], payload: Vec<u8>) -> Vec<u8> {
    let headers = headers
        .iter()
        .map(|(name, value)| Header::new(*name, HeaderValue::String(value.to_string().into())))
        .collect();
    let message = Message::new_from_parts(headers, payload);
    let mut framed = Vec::new();
    write_message_to(&message, &mut framed).expect("short headers and payloads frame");
    framed
}

/// Bedrock's binary event stream.
pub struct EventStream;

impl Frames for EventStream {
    fn content_type(&self) -> &'static str {
        EVENT_STREAM
    }

    fn decoder(&self) -> Box<dyn FrameDecoder> {
        Box::new(EventDecoder::default())
    }
}

/// Frames read off one stream: each `chunk`'s Messages event, and each
/// exception as a Messages `error` event naming its type, so the overflow
/// check reads Bedrock's in-stream errors as it reads Anthropic's.
#[derive(Default)]
struct EventDecoder {
    frames: MessageFrameDecoder,
    pending: BytesMut,
    broken: bool,
}

impl FrameDecoder for EventDecoder {
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<String>) {
        if self.broken {
            return;
        }
        self.pending.extend_from_slice(bytes);
        // The frame's length is the upstream's word: a frame that would
        // hold more than any event does is a broken stream, not a buffer.
        if self.pending.len() > MAX_FRAME {
            self.broken = true;
            self.pending = BytesMut::new();
            return;
        }
        loop {
            match self.frames.decode_frame(&mut self.pending) {
                Ok(DecodedFrame::Complete(message)) => events.extend(event_of(&message)),
                Ok(DecodedFrame::Incomplete) => return,
                Err(_) => {
                    self.broken = true;
                    self.pending = BytesMut::new();
                    return;
                }
            }
        }
    }
}

fn header<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    let header = message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)?;
    header.value().as_string().ok().map(|value| value.as_str())
}

/// The Messages event a frame carries.
fn event_of(message: &Message) -> Option<String> {
    let payload: Value = serde_json::from_slice(message.payload()).ok()?;
    match header(message, ":message-type")? {
        "event" if header(message, ":event-type") == Some("chunk") => {
            let bytes = payload.get("bytes")?.as_str()?;
            let event = base64::engine::general_purpose::STANDARD
                .decode(bytes)
                .ok()?;
            String::from_utf8(event).ok()
        }
        "exception" => {
            let kind = header(message, ":exception-type").unwrap_or("exception");
            let text = payload.get("message").and_then(Value::as_str);
            let error = json!({"type": kind, "message": text.unwrap_or_default()});
            Some(json!({"type": "error", "error": error}).to_string())
        }
        _ => None,
    }
}

impl Provider for Bedrock {
    fn name(&self) -> &'static str {
        "bedrock"
    }

    fn chat(&self) -> &'static dyn Adapter {
        &Bedrock
    }

    fn endpoint(&self, method: &Method, path: &str) -> Endpoint {
        let chat = matches!(
            model_and_action(path),
            Some((_, "invoke" | "invoke-with-response-stream"))
        );
        match chat && method == Method::POST {
            true => Endpoint::Chat,
            false => Endpoint::Passthrough,
        }
    }

    fn adapter(&self, _endpoint: Endpoint) -> &'static dyn Adapter {
        &Bedrock
    }

    /// Bedrock's base URLs carry no path: the path is kept.
    fn upstream_path<'p>(&self, path: &'p str) -> &'p str {
        path
    }

    /// The SDKs' default region; a deployment names its own
    /// (`[upstreams.bedrock] base_url`).
    fn root(&self) -> Option<Root> {
        Some(Root {
            base_url: "https://bedrock-runtime.us-east-1.amazonaws.com",
            default_window: None,
            legacy_key: None,
        })
    }

    /// The runtime API's paths, and the inference-profile lookups Claude
    /// Code sends a Bedrock gateway at start (`GET /inference-profiles…`):
    /// no other API at the root uses them, and a Bedrock credential must
    /// never reach another provider's upstream.
    fn claims(&self, path: &str, _headers: &HeaderMap) -> bool {
        path.starts_with("/model/") || path.starts_with("/inference-profiles")
    }

    /// Bedrock's own shape (botocore reads `message`); the type travels
    /// in the status.
    fn error_body(&self, error: &ErrorInfo<'_>) -> Value {
        json!({"message": error.message})
    }

    fn telemetry(&self) -> TelemetryNames {
        TelemetryNames {
            operation: "chat",
            provider: "aws.bedrock",
        }
    }

    fn window_probe(&self) -> Option<WindowProbe> {
        None
    }

    /// A signed request's access key id: its signature changes with every
    /// request, the key that made it does not.
    fn credential(&self, headers: &HeaderMap, _query: Option<&str>) -> Option<Vec<u8>> {
        match signing::access_key_of(headers) {
            Some(access_key) => Some(access_key.as_bytes().to_vec()),
            None => super::bearer_or_key(headers).map(<[u8]>::to_vec),
        }
    }

    fn signer(&self) -> Option<&'static dyn Signer> {
        Some(&signing::SigV4)
    }
}

#[cfg(test)]
mod tests;
