//! Steps 5 and 6, the protocol seam: how an API frames its streamed answers.
//!
//! Most APIs stream server-sent events, which Condenser reads itself. An
//! API that streams in another framing (Bedrock's binary event stream)
//! says so through [`Adapter::frames`](super::Adapter::frames): the content
//! type its streams carry and a decoder that turns the bytes into the
//! JSON texts of the events they frame. Everything that reads a stream
//! (usage, the overflow check, telemetry) reads those texts, so it never
//! learns the framing.

/// A stream framing other than server-sent events.
pub trait Frames: Send + Sync {
    /// The content type its streams carry.
    fn content_type(&self) -> &'static str;

    /// A decoder for one stream, fed its bytes in order.
    fn decoder(&self) -> Box<dyn FrameDecoder>;
}

/// Turns one stream's bytes into the events they frame.
pub trait FrameDecoder: Send {
    /// Adds to `events` the JSON text of each event completed by `bytes`
    /// (the stream's next bytes); a broken stream yields no more events.
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<String>);
}

/// Whether `headers` say the body is a stream framed by `frames`.
pub fn is_framed(frames: &dyn Frames, headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with(frames.content_type()))
}
