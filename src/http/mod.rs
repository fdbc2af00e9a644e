//! Step 1, accept and route.

mod guard;
pub mod ops;
pub mod passthrough;
pub mod serve;

use crate::state::AppState;
use crate::upstream::routes::Endpoint;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;

pub fn router(state: AppState) -> Router {
    let metrics = Router::new()
        .route("/metrics", axum::routing::get(crate::metrics::render))
        .with_state(crate::metrics::handle());
    let guard = axum::middleware::from_fn_with_state(state.clone(), guard::refuse_unforwardable);
    Router::new()
        .merge(ops::router())
        .merge(crate::web::router(state.clone()))
        .fallback(proxy)
        .with_state(state)
        .merge(metrics)
        .layer(guard)
        .layer(axum::middleware::from_fn(crate::metrics::track))
}

/// Every path that is not operational: chat endpoints go through the
/// pipeline, the rest is forwarded untouched.
async fn proxy(State(state): State<AppState>, request: Request) -> Response {
    let uri = request.uri();
    let route = state
        .routes
        .resolve(request.method(), uri.path(), uri.query(), request.headers());
    tracing::debug!(upstream = %route.upstream.name, endpoint = ?route.endpoint, "routed");
    match route.endpoint {
        Endpoint::Chat | Endpoint::Responses => {
            let (parts, body) = request.into_parts();
            let limit = state.settings.max_body_bytes;
            match passthrough::read_body(body, limit).await {
                Ok(body) => crate::pipeline::handle(&state, route, parts, body).await,
                Err(error) => error.into_response_for(route.upstream.protocol),
            }
        }
        Endpoint::Passthrough => passthrough::forward(&state, route, request).await,
    }
}
