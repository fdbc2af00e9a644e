//! Beside the flow, the operator page.
//!
//! The operator page, `/admin/`: conversations, one conversation's context
//! over time, and an overview. Server-side templates (minijinja, escaping
//! every value) and one chart library (uPlot) embedded in the binary: no
//! build step, no CDN.
//!
//! Every route sits behind [`auth::require_admin`], which answers 404 when
//! no admin token is configured and 401 to anyone without it: an upstream
//! API key opens nothing here, and the pages show every tenant only to the
//! holder of the admin token.

mod auth;
mod pages;
mod session;
mod templates;
mod view;

use crate::state::AppState;
use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use axum::Router;

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/admin", get(|| async { Redirect::permanent("/admin/") }))
        .route("/admin/", get(pages::conversations))
        .route(
            "/admin/conversations/{tenant}/{conversation}",
            get(pages::conversation),
        )
        .route("/admin/overview", get(pages::overview))
        .route("/admin/login", get(auth::login_form).post(auth::login))
        .route("/admin/logout", post(auth::logout))
        .route("/admin/assets/{name}", get(asset))
        .route(
            "/admin/{*rest}",
            get(|| async { axum::http::StatusCode::NOT_FOUND }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state,
            auth::require_admin,
        ))
        .layer(axum::Extension(std::sync::Arc::new(
            auth::LoginLimiter::default(),
        )))
}

/// The embedded static files: uPlot (MIT, see `assets/uPlot.LICENSE`) and
/// the page's own script and style.
async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> axum::response::Response {
    let (body, kind) = match name.as_str() {
        "uPlot.iife.min.js" => (include_str!("assets/uPlot.iife.min.js"), "text/javascript"),
        "uPlot.min.css" => (include_str!("assets/uPlot.min.css"), "text/css"),
        "chart.js" => (include_str!("assets/chart.js"), "text/javascript"),
        "admin.css" => (include_str!("assets/admin.css"), "text/css"),
        _ => return axum::http::StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
