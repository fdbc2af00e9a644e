//! Step 6, detect overflow, before anything reaches the client: an error
//! status is read whole (error bodies are small; a 5xx only when a signature
//! judges that status, as llama.cpp's 500), and a 200 event stream is
//! read up to its first event, because some servers put the overflow there
//! (and past the events that precede any output, where the Responses API
//! puts its `response.failed`). A healthy stream loses no time: its first
//! output event is what the client waits for anyway, and it is relayed as
//! soon as it is read.
//!
//! Every read here waits at most the idle timeout: an upstream that sends
//! its head and then nothing must cost the client a 504, not a hang.

use crate::overflow::{OverflowSignal, SignatureTable};
use crate::protocol::framing::{is_framed, Frames};
use crate::protocol::Adapter;
use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};
use std::time::Duration;

/// Error bodies larger than this are relayed without being inspected.
const MAX_ERROR_BODY: usize = 1024 * 1024;

/// Preamble events held back before a stream is relayed regardless.
const MAX_OPENING: usize = 256 * 1024;

/// The upstream went silent for the idle timeout before the client got
/// anything.
#[derive(Debug)]
pub struct Stalled;

pub enum Inspected {
    /// Relay as it is; `first_chunk` was already read off the body.
    Relay {
        response: reqwest::Response,
        first_chunk: Option<Bytes>,
    },
    /// An error response read whole that is not an overflow.
    Error {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
    },
    Overflow {
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        signal: OverflowSignal,
    },
}

pub async fn inspect(
    mut response: reqwest::Response,
    table: &SignatureTable,
    adapter: &dyn Adapter,
    idle: Duration,
) -> Result<Inspected, Stalled> {
    let status = response.status();
    if status.is_client_error() || table.judges(status.as_u16()) {
        let headers = response.headers().clone();
        let body = match read_capped(&mut response, idle).await? {
            ErrorBody::Whole(body) => body,
            // Too large to be an overflow: relayed whole, what was read first.
            ErrorBody::Beginning(beginning) => {
                return Ok(Inspected::Relay {
                    response,
                    first_chunk: Some(beginning),
                })
            }
        };
        return Ok(match table.detect(status.as_u16(), &body) {
            Some(signal) => Inspected::Overflow {
                status,
                headers,
                body,
                signal,
            },
            None => Inspected::Error {
                status,
                headers,
                body,
            },
        });
    }
    let frames = adapter
        .frames()
        .filter(|frames| is_framed(*frames, response.headers()));
    if status == StatusCode::OK && (frames.is_some() || is_event_stream(response.headers())) {
        let (held, signal) = match frames {
            Some(frames) => read_opening_frames(&mut response, table, frames, idle).await?,
            None => read_opening(&mut response, table, adapter, idle).await?,
        };
        if let Some(signal) = signal {
            let headers = response.headers().clone();
            return Ok(Inspected::Overflow {
                status,
                headers,
                body: held,
                signal,
            });
        }
        return Ok(Inspected::Relay {
            response,
            first_chunk: Some(held).filter(|held| !held.is_empty()),
        });
    }
    Ok(Inspected::Relay {
        response,
        first_chunk: None,
    })
}

enum ErrorBody {
    Whole(Bytes),
    /// The first bytes of a body past [`MAX_ERROR_BODY`]; the rest is unread.
    Beginning(Bytes),
}

async fn read_capped(
    response: &mut reqwest::Response,
    idle: Duration,
) -> Result<ErrorBody, Stalled> {
    let mut body = Vec::new();
    while let Some(chunk) = next_chunk(response, idle).await? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ERROR_BODY {
            return Ok(ErrorBody::Beginning(body.into()));
        }
    }
    Ok(ErrorBody::Whole(body.into()))
}

/// The next chunk, `None` at the end (or on a transport error, which the
/// relay of the rest would report the same way).
async fn next_chunk(
    response: &mut reqwest::Response,
    idle: Duration,
) -> Result<Option<Bytes>, Stalled> {
    match tokio::time::timeout(idle, response.chunk()).await {
        Ok(chunk) => Ok(chunk.ok().flatten()),
        Err(_) => Err(Stalled),
    }
}

pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// Reads a 200 stream up to its first event that is not preamble (see
/// [`Adapter::is_stream_preamble`]): the bytes read, and the overflow one of
/// those events reports. A healthy stream's first real event is what the
/// client waits for anyway, so holding the preamble until then costs it
/// nothing.
async fn read_opening(
    response: &mut reqwest::Response,
    table: &SignatureTable,
    adapter: &dyn Adapter,
    idle: Duration,
) -> Result<(Bytes, Option<OverflowSignal>), Stalled> {
    let mut held = Vec::new();
    let (mut judged, mut in_preamble) = (0, false);
    while let Some(chunk) = next_chunk(response, idle).await? {
        held.extend_from_slice(&chunk);
        let complete = complete_events_end(&held);
        let mut events = futures_util::stream::iter([Ok::<_, std::io::Error>(
            Bytes::copy_from_slice(&held[judged..complete]),
        )])
        .eventsource();
        judged = complete;
        while let Some(Ok(event)) = events.next().await {
            if let Some(signal) = table.detect_stream_event(&event.data) {
                return Ok((held.into(), Some(signal)));
            }
            if !adapter.is_stream_preamble(&event.data) {
                return Ok((held.into(), None));
            }
            in_preamble = true;
        }
        // Only a preamble or a partial first event is held for more: a
        // first chunk of comments (a gateway's "processing" pings) goes to
        // the client at once.
        if (complete > 0 && !in_preamble) || held.len() > MAX_OPENING {
            break;
        }
    }
    Ok((held.into(), None))
}

/// [`read_opening`] for a stream in an adapter's own framing: up to its
/// first complete event. Such a framing (Bedrock's) has no preamble, and
/// its exceptions decode as error events.
async fn read_opening_frames(
    response: &mut reqwest::Response,
    table: &SignatureTable,
    frames: &dyn Frames,
    idle: Duration,
) -> Result<(Bytes, Option<OverflowSignal>), Stalled> {
    let mut decoder = frames.decoder();
    let (mut held, mut events) = (Vec::new(), Vec::new());
    while let Some(chunk) = next_chunk(response, idle).await? {
        held.extend_from_slice(&chunk);
        decoder.feed(&chunk, &mut events);
        let signal = events.iter().find_map(|e| table.detect_stream_event(e));
        if signal.is_some() || !events.is_empty() || held.len() > MAX_OPENING {
            return Ok((held.into(), signal));
        }
    }
    Ok((held.into(), None))
}

/// The end of the last complete event (blank line) in `bytes`.
fn complete_events_end(bytes: &[u8]) -> usize {
    let ends = |sep: &[u8]| {
        bytes
            .windows(sep.len())
            .rposition(|w| w == sep)
            .map_or(0, |i| i + sep.len())
    };
    ends(b"\n\n").max(ends(b"\r\n\r\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::responses::Responses;

    fn answer(status: u16, content_type: &str, chunks: &[&str]) -> reqwest::Response {
        let chunks: Vec<Result<Bytes, std::io::Error>> = chunks
            .iter()
            .map(|chunk| Ok(Bytes::from(chunk.to_string())))
            .collect();
        let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
        let response = http::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(body)
            .expect("a response");
        reqwest::Response::from(response)
    }

    fn stream(events: &[&str]) -> reqwest::Response {
        answer(200, "text/event-stream", events)
    }

    fn frames(status: u16, frames: &[Vec<u8>]) -> reqwest::Response {
        let chunks: Vec<Result<Bytes, std::io::Error>> = frames
            .iter()
            .map(|frame| Ok(Bytes::from(frame.clone())))
            .collect();
        let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
        let response = http::Response::builder()
            .status(status)
            .header("content-type", crate::protocol::bedrock::EVENT_STREAM)
            .body(body)
            .expect("a response");
        reqwest::Response::from(response)
    }

    /// Bedrock reports an overflow found after the headers as an
    /// exception frame; a healthy stream goes on from its first chunk.
    #[tokio::test]
    async fn an_event_stream_opening_with_an_overflow_exception_is_an_overflow() {
        use crate::protocol::bedrock::{chunk_frame, Bedrock};
        let error = serde_json::json!({"message": "Input is too long for requested model."});
        let table = SignatureTable::builtin();
        let failing = frames(200, &[Bedrock.stream_error_event(400, &error)]);
        let inspected = inspect(failing, &table, &Bedrock, IDLE).await;
        assert!(matches!(inspected, Ok(Inspected::Overflow { .. })));
        let start =
            chunk_frame(br#"{"type":"message_start","message":{"usage":{"input_tokens":3}}}"#);
        let healthy = frames(200, &[start.clone(), chunk_frame(br#"{"type":"ping"}"#)]);
        let Ok(Inspected::Relay { first_chunk, .. }) =
            inspect(healthy, &table, &Bedrock, IDLE).await
        else {
            panic!("a healthy stream is relayed");
        };
        assert_eq!(first_chunk.as_deref(), Some(&start[..]));
        let throttled =
            Bedrock.stream_error_event(429, &serde_json::json!({"message": "Too many requests"}));
        let inspected = inspect(frames(200, &[throttled]), &table, &Bedrock, IDLE).await;
        assert!(matches!(inspected, Ok(Inspected::Relay { .. })));
    }

    const IDLE: Duration = Duration::from_secs(5);
    const CREATED: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"error\":null}}\n\n";
    const IN_PROGRESS: &str = "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":{\"error\":null}}\n\n";

    #[tokio::test]
    async fn a_responses_stream_failing_after_its_preamble_is_an_overflow() {
        let error = r#"{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again."}"#;
        let failed = format!("event: response.failed\ndata: {{\"type\":\"response.failed\",\"response\":{{\"status\":\"failed\",\"error\":{error}}}}}\n\n");
        // OpenAI's own streaming path reports it as an `error` event.
        let errored = format!("event: error\ndata: {{\"type\":\"error\",\"sequence_number\":2,\"error\":{error}}}\n\n");
        for last in [failed, errored] {
            let response = stream(&[CREATED, IN_PROGRESS, &last]);
            let inspected = inspect(response, &SignatureTable::builtin(), &Responses, IDLE)
                .await
                .expect("not stalled");
            let Inspected::Overflow { body, .. } = inspected else {
                panic!("not recognized: {last}");
            };
            assert!(body.ends_with(last.as_bytes()), "the whole opening is kept");
        }
    }

    #[tokio::test]
    async fn a_healthy_stream_is_relayed_from_its_first_output_event() {
        let output = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\"}\n\n";
        let rest = "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n";
        // An event may arrive in pieces.
        let response = stream(&[&CREATED[..30], &CREATED[30..], IN_PROGRESS, output, rest]);
        let Inspected::Relay {
            mut response,
            first_chunk,
        } = inspect(response, &SignatureTable::builtin(), &Responses, IDLE)
            .await
            .expect("not stalled")
        else {
            panic!("relayed");
        };
        let held = first_chunk.expect("the opening");
        assert_eq!(held, format!("{CREATED}{IN_PROGRESS}{output}"));
        let next = response.chunk().await.expect("reads").expect("a chunk");
        assert_eq!(next, rest.as_bytes());
    }

    #[tokio::test]
    async fn a_first_chunk_of_comments_is_relayed_at_once() {
        let ping = ": OPENROUTER PROCESSING\n\n";
        let response = stream(&[ping, CREATED]);
        let inspected = inspect(response, &SignatureTable::builtin(), &Responses, IDLE)
            .await
            .expect("not stalled");
        let Inspected::Relay { first_chunk, .. } = inspected else {
            panic!("relayed");
        };
        assert_eq!(first_chunk.expect("the ping"), ping.as_bytes());
    }

    #[tokio::test]
    async fn chat_streams_are_judged_on_their_first_event_only() {
        let first = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
        let later =
            "data: {\"error\":{\"message\":\"prompt is too long: 9 tokens > 1 maximum\"}}\n\n";
        let response = stream(&[first, later]);
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        let inspected = inspect(response, &SignatureTable::builtin(), adapter, IDLE)
            .await
            .expect("not stalled");
        let Inspected::Relay { first_chunk, .. } = inspected else {
            panic!("a later event is the client's to see");
        };
        assert_eq!(first_chunk.expect("first"), first.as_bytes());
    }

    #[tokio::test]
    async fn sglang_and_vllm_errors_opening_a_chat_stream_are_overflows() {
        let events = [
            // SGLang before 0.5.23 (BerriAI/litellm#10793).
            ("sglang", "data: {\"error\":{\"object\":\"error\",\"message\":\"The input (140000 tokens) is longer than the model's context length (131072 tokens).\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}\n\n"),
            // vLLM's engine check, raised once the stream has begun.
            ("vllm", "data: {\"error\":{\"message\":\"The decoder prompt (length 8825) is longer than the maximum model length of 8192.\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}\n\n"),
        ];
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        for (want, event) in events {
            let response = stream(&[event, "data: [DONE]\n\n"]);
            let inspected = inspect(response, &SignatureTable::builtin(), adapter, IDLE)
                .await
                .expect("not stalled");
            let Inspected::Overflow { body, signal, .. } = inspected else {
                panic!("not recognized: {event}");
            };
            assert_eq!(signal.signature, want);
            assert!(signal.excess_tokens().is_some_and(|excess| excess > 0));
            assert_eq!(body, event.as_bytes(), "judged on the first event");
        }
    }

    #[tokio::test]
    async fn a_5xx_is_read_only_when_a_signature_lists_it() {
        let table = SignatureTable::builtin();
        let adapter = crate::protocol::openai::PROTOCOL.adapter();
        let body = r#"{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}"#;
        let inspected = inspect(
            answer(500, "application/json", &[body]),
            &table,
            adapter,
            IDLE,
        )
        .await
        .expect("not stalled");
        let Inspected::Overflow { signal, .. } = inspected else {
            panic!("llama.cpp's 500 is an overflow");
        };
        assert_eq!(signal.signature, "llama.cpp");
        // Any other 5xx streams through untouched, unread.
        let inspected = inspect(
            answer(502, "application/json", &[body]),
            &table,
            adapter,
            IDLE,
        )
        .await
        .expect("not stalled");
        let Inspected::Relay { first_chunk, .. } = inspected else {
            panic!("a 502 is relayed");
        };
        assert_eq!(first_chunk, None);
    }
}
