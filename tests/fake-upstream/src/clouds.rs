//! OpenAI's protocol as clouds serve it, with their own rules:
//!
//! - Azure OpenAI's deployment path (`/openai/deployments/{deployment}/
//!   chat/completions`) requires `api-version` in the query (without it:
//!   404 `Resource not found`, MicrosoftDocs/azure-docs#114602,
//!   cherry-studio#8077) and takes the key in `api-key` (or an Entra token
//!   as `Authorization: Bearer`; learn.microsoft.com/azure/ai-foundry/openai
//!   reference). The deployment names the model; the body's `model` is
//!   ignored.
//! - Gemini's OpenAI-compatible endpoint (`/v1beta/openai/chat/
//!   completions`) answers errors as Gemini does, in a JSON array
//!   (jackmpcollins/magentic#382). That its overflow carries the native
//!   wording is not confirmed by a capture; it is the native API's
//!   (`The input token count (N) exceeds the maximum number of tokens
//!   allowed (M).`, google-gemini/gemini-cli#5807).

use crate::chat::{handle, Flavor};
use crate::state::{Protocol, State};
use axum::extract::{Path, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::json;
use std::sync::Arc;

pub async fn azure_chat(
    AxumState(state): AxumState<Arc<State>>,
    Path(deployment): Path<String>,
    request: Request,
) -> Response {
    let versioned = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|pair| pair.starts_with("api-version=")));
    if !versioned {
        // The body as Azure sends it, the space after the colon included.
        let body = r#"{"error":{"code":"404","message": "Resource not found"}}"#;
        let mut response = (StatusCode::NOT_FOUND, body).into_response();
        let json = http::HeaderValue::from_static("application/json");
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, json);
        return response;
    }
    handle(
        state,
        Protocol::OpenAi,
        Flavor::Azure { deployment },
        request,
    )
    .await
}

pub async fn gemini_compat_chat(
    AxumState(state): AxumState<Arc<State>>,
    request: Request,
) -> Response {
    handle(state, Protocol::OpenAi, Flavor::GeminiCompat, request).await
}

/// The key from `api-key`, else an Entra bearer token, or Azure's 401.
#[allow(clippy::result_large_err)]
pub fn azure_credential(headers: &HeaderMap) -> Result<String, Response> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer "));
    match header("api-key").or(bearer) {
        Some(key) => Ok(key.to_string()),
        None => {
            let body = json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}});
            Err((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response())
        }
    }
}

pub fn gemini_overflow(tokens: u64, window: u64) -> Response {
    let message = format!(
        "The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window})."
    );
    let body = json!([{"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}]);
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}
