//! Beside the flow, operations: health and readiness.
//!
//! Operational endpoints: liveness, readiness, and a quick answer on `/`
//! (Claude Code probes `HEAD /` before its first request).

use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn root() -> &'static str {
    "condenser\n"
}

/// The process is alive and serving.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Dependencies are reachable.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let reachable = state
        .storage
        .run("ping", |store| async move { store.ping().await })
        .await
        .is_some();
    if reachable {
        (
            StatusCode::OK,
            Json(json!({"status": "ready", "database": "reachable"})),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "degraded", "database": "unreachable"})),
        )
    }
}
