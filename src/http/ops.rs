//! Beside the flow, operations: health and readiness.
//!
//! Operational endpoints: liveness, readiness, and a quick answer on `/`
//! (Claude Code probes `HEAD /` before its first request).
//!
//! Readiness costs a database round trip, so its answer is reused for a
//! second: a load balancer, an orchestrator and a monitor probing each
//! instance, however often, cost it one round trip a second between them,
//! and a burst of probes waits for one check and shares its answer.

use crate::state::AppState;
use crate::store::Storage;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a readiness answer is reused.
const READINESS_TTL: Duration = Duration::from_secs(1);

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(root))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(Extension(Arc::new(Readiness::default())))
}

/// The last readiness check: when, and whether the database answered.
#[derive(Default)]
struct Readiness {
    last: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

impl Readiness {
    /// The last answer while it is fresh, else a new one. One check at a
    /// time: probes that arrive during it wait and take its answer.
    async fn check(&self, storage: &Storage) -> bool {
        let mut last = self.last.lock().await;
        if let Some((at, ready)) = *last {
            if at.elapsed() < READINESS_TTL {
                return ready;
            }
        }
        let ready = storage
            .run("ping", |store| async move { store.ping().await })
            .await
            .is_some();
        *last = Some((Instant::now(), ready));
        ready
    }
}

async fn root() -> &'static str {
    "condenser\n"
}

/// The process is alive and serving.
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Dependencies are reachable (as of at most a second ago).
async fn readyz(
    State(state): State<AppState>,
    Extension(readiness): Extension<Arc<Readiness>>,
) -> impl IntoResponse {
    if readiness.check(&state.storage).await {
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
