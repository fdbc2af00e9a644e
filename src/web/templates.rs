//! Beside the flow, the operator page: templates.
//!
//! The page templates, compiled once. Names end in `.html`, so minijinja
//! escapes every value they print: a stored `<script>` shows as text.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use minijinja::Environment;
use serde::Serialize;
use std::sync::LazyLock;

static TEMPLATES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    let pages = [
        ("base.html", include_str!("templates/base.html")),
        ("login.html", include_str!("templates/login.html")),
        ("list.html", include_str!("templates/list.html")),
        (
            "conversation.html",
            include_str!("templates/conversation.html"),
        ),
        ("overview.html", include_str!("templates/overview.html")),
    ];
    for (name, source) in pages {
        // The templates are part of the binary: a syntax error is a bug the
        // page tests catch, reported on first render below.
        if let Err(error) = env.add_template(name, source) {
            tracing::error!(template = name, error.message = %error, "admin template does not compile");
        }
    }
    env
});

/// `name` rendered with `context`, or a 500 saying the page failed.
pub fn render(name: &str, context: impl Serialize) -> Response {
    let rendered = TEMPLATES
        .get_template(name)
        .and_then(|template| template.render(context));
    match rendered {
        Ok(html) => Html(html).into_response(),
        Err(error) => {
            tracing::error!(template = name, error.message = %error, "rendering an admin page failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page could not be rendered\n",
            )
                .into_response()
        }
    }
}
