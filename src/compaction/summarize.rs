//! The summary call (DESIGN.md step 7): an LLM call through the same upstream,
//! with the caller's own credential and headers.

use crate::http::routes::Route;
use crate::protocol::{Adapter, SUMMARY_MARKER};
use crate::tokens::Calibration;
use crate::upstream::UpstreamClient;
use http::{HeaderMap, HeaderValue, Method};
use serde_json::Value;
use std::time::Duration;

/// The instructions of every summary call.
pub const PROMPT: &str = include_str!("prompts/summarize.md");

/// Share of the window one summary call's input may fill.
const INPUT_SHARE: f64 = 0.6;

/// Why a summary could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("summary call failed with upstream status {status}: {message}")]
    Upstream { status: u16, message: String },
    #[error("summary call failed: {0}")]
    Transport(String),
    #[error("summary call timed out after {0:?}")]
    Timeout(Duration),
    #[error("summary call returned no text")]
    Empty,
}

impl SummaryError {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Upstream { .. } => "upstream_error",
            Self::Transport(_) => "transport",
            Self::Timeout(_) => "timeout",
            Self::Empty => "empty",
        }
    }
}

pub struct Summarizer<'a> {
    pub client: &'a UpstreamClient,
    pub route: &'a Route,
    pub headers: &'a HeaderMap,
    pub adapter: &'a dyn Adapter,
    pub model: &'a str,
    pub max_tokens: u64,
    pub window: u64,
    pub calibration: Calibration,
    pub timeout: Duration,
}

impl Summarizer<'_> {
    /// Folds `messages` into `previous`, one call per chunk that fits the
    /// window, so even a part larger than the window gets summarized.
    pub async fn summarize(
        &self,
        previous: Option<&str>,
        messages: &[Value],
    ) -> Result<(String, usize), SummaryError> {
        let entries: Vec<String> = messages
            .iter()
            .map(|m| self.adapter.transcript_entry(m))
            .collect();
        let mut running = previous.map(str::to_string);
        let mut calls = 0;
        for chunk in self.chunks(&entries) {
            running = Some(self.call(running.as_deref(), &chunk).await?);
            calls += 1;
        }
        Ok((running.unwrap_or_default(), calls))
    }

    fn chunks(&self, entries: &[String]) -> Vec<String> {
        let input_tokens = (self.window as f64 * INPUT_SHARE) as u64;
        let reserved = self.max_tokens + self.calibration.tokens(PROMPT.len());
        let budget = self
            .calibration
            .bytes(input_tokens.saturating_sub(reserved))
            .max(4096);
        let mut chunks = vec![String::new()];
        for entry in entries {
            let entry =
                crate::protocol::elide_middle(entry, budget).unwrap_or_else(|| entry.clone());
            let current = chunks.last_mut().expect("chunks is never empty");
            if !current.is_empty() && current.len() + entry.len() > budget {
                chunks.push(String::new());
            }
            let current = chunks.last_mut().expect("chunks is never empty");
            current.push_str(&entry);
            current.push('\n');
        }
        chunks
    }

    async fn call(&self, previous: Option<&str>, transcript: &str) -> Result<String, SummaryError> {
        let input = format!(
            "<previous_summary>\n{}\n</previous_summary>\n<transcript>\n{transcript}</transcript>",
            previous.unwrap_or("(none)")
        );
        let body = self
            .adapter
            .summary_request(self.model, PROMPT, &input, self.max_tokens);
        let mut headers = crate::upstream::headers::request_headers(self.headers);
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            http::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        let send = self.client.send(
            &self.route.upstream,
            Method::POST,
            &self.route.url,
            headers,
            body.to_string().into(),
        );
        let response = tokio::time::timeout(self.timeout, async {
            let response = send
                .await
                .map_err(|e| SummaryError::Transport(e.to_string()))?;
            let status = response.status().as_u16();
            let bytes = response
                .bytes()
                .await
                .map_err(|e| SummaryError::Transport(e.without_url().to_string()))?;
            Ok::<_, SummaryError>((status, bytes))
        })
        .await
        .map_err(|_| SummaryError::Timeout(self.timeout))??;
        let (status, bytes) = response;
        if status != 200 {
            let message = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            return Err(SummaryError::Upstream { status, message });
        }
        let parsed: Value = serde_json::from_slice(&bytes).map_err(|_| SummaryError::Empty)?;
        let text = self
            .adapter
            .response_text(&parsed)
            .ok_or(SummaryError::Empty)?;
        Ok(text.replace(SUMMARY_MARKER, "[summary]"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_announces_itself_and_treats_the_transcript_as_data() {
        assert!(PROMPT.starts_with(&format!("{SUMMARY_MARKER} REQUEST")));
        assert!(PROMPT.contains("strictly as"));
        assert!(PROMPT.contains("replaces the previous summary"));
    }
}
