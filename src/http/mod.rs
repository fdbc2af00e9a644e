//! Step 1, accept and route.

mod activity;
mod around;
mod body;
mod budget;
mod guard;
pub mod ops;
pub mod passthrough;
pub mod serve;
mod websocket;
mod weight;

use crate::state::AppState;
use crate::upstream::routes::{Endpoint, Route};
use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;
use budget::BodyBudget;
use std::sync::Arc;
use weight::heaviest;

pub use around::every_request;

/// The routes, without the layers every request passes through: those
/// wrap every route in one `Router::layer` call (`app.rs`). Each call
/// boxes every route once more, and a request clones the boxed services
/// of every level beneath each one it passes: a small request paid 18
/// boxed clones and 11 boxed futures with five levels, 4 and 6 with two
/// (bench/HISTORY.md, "Issue 54: the router's levels"). So the proxy's
/// own state (its body budget, its sockets) is its router's state, not
/// `Extension` layers.
pub fn router(state: AppState) -> Router {
    let metrics = Router::new()
        .route("/metrics", axum::routing::get(crate::metrics::render))
        .with_state(crate::metrics::handle());
    let proxying = Proxying {
        budget: body_budget(&state),
        sockets: websocket::Sockets::new(state.settings.server.websocket_connections_per_tenant),
        state: state.clone(),
    };
    Router::new()
        .merge(ops::router())
        .merge(crate::web::router(state.clone()))
        .merge(Router::new().fallback(proxy).with_state(proxying))
        .with_state(state)
        .merge(metrics)
}

/// What the proxy's handler holds.
#[derive(Clone)]
struct Proxying {
    state: AppState,
    budget: Arc<BodyBudget>,
    sockets: Arc<websocket::Sockets>,
}

/// This instance's budget of chat body bytes in flight.
fn body_budget(state: &AppState) -> Arc<BodyBudget> {
    let settings = &state.settings;
    let max_body = settings.max_body_bytes;
    let budget = BodyBudget::new(settings.server.inflight_body_budget(max_body), max_body);
    if settings.server.max_inflight_body_bytes.is_none() && budget.limit() == heaviest(max_body) {
        tracing::warn!(
            max_body_bytes = max_body,
            "little memory for chat bodies: one largest body at a time \
             (lower max_body_bytes, or set server.max_inflight_body_bytes)"
        );
    }
    tracing::info!(max_inflight_body_bytes = budget.limit(), "chat body budget");
    budget
}

/// A chat request: its body read whole, its pass over the bytes for
/// step 2 taken chunk by chunk as they arrive, then the pipeline.
async fn chat(
    state: &AppState,
    route: Route,
    request: Request,
    bounds: body::Bounds,
    budget: &Arc<BodyBudget>,
) -> Response {
    let declared = passthrough::declared_length(&request);
    let (parts, mut body) = request.into_parts();
    let mut arriving = crate::pipeline::arriving(&route, &parts, declared);
    let each_chunk = |chunk: &[u8]| {
        if let Some(arriving) = arriving.as_mut() {
            arriving.update(chunk);
        }
    };
    match body::read_chat_body(&mut body, declared, bounds, budget, each_chunk).await {
        // The lease is given back once the answer's head is ready.
        Ok((bytes, _lease)) => {
            let arrived = arriving.and_then(|arriving| arriving.arrived(&bytes));
            crate::pipeline::handle(state, route, parts, bytes, arrived).await
        }
        Err(error) => {
            let refusal = error.into_response_for(route.upstream.protocol);
            body::refused_unread(parts.version, body, bounds, refusal)
        }
    }
}

/// Every path that is not operational: chat endpoints go through the
/// pipeline, the rest is forwarded untouched.
async fn proxy(State(proxying): State<Proxying>, request: Request) -> Response {
    let Proxying {
        state,
        budget,
        sockets,
    } = proxying;
    if websocket::wanted(request.headers()) {
        return websocket::upgrade(&state, &sockets, &budget, request).await;
    }
    let uri = request.uri();
    let route = state
        .routes
        .resolve(request.method(), uri.path(), uri.query(), request.headers());
    tracing::debug!(upstream = %route.upstream.name, endpoint = ?route.endpoint, "routed");
    let total = state.settings.server.body_total_timeout;
    let bounds = body::Bounds {
        max_bytes: state.settings.max_body_bytes,
        deadline: tokio::time::Instant::now() + total,
        total,
    };
    match route.endpoint {
        Endpoint::Chat | Endpoint::Responses => chat(&state, route, request, bounds, &budget).await,
        Endpoint::Passthrough => passthrough::forward(&state, route, request, bounds).await,
    }
}
