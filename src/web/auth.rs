//! Beside the flow, the operator page: who may open it.
//!
//! Who may open the operator page: the holder of `admin_token`, sent as
//! `Authorization: Bearer TOKEN` (scripts) or as the session cookie the
//! login form sets (browsers). Both are compared in constant time.
//!
//! The cookie holds a digest of the token, not the token, and is
//! `HttpOnly` and `SameSite=Strict`, so page scripts cannot read it and
//! other sites cannot send it.

use super::templates::render;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const COOKIE: &str = "condenser_admin";

/// The configured token, when the page is on.
fn configured(state: &AppState) -> Option<&str> {
    let token = state.settings.admin_token.as_ref()?.expose();
    (!token.is_empty()).then_some(token)
}

fn digest(purpose: &str, token: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(purpose.as_bytes());
    hasher.update(b"\0");
    hasher.update(token.as_bytes());
    hasher.finalize().into()
}

/// Equal digests, compared in constant time (both are 32 bytes, so not
/// even the length of the token leaks).
fn same(purpose: &str, presented: &str, token: &str) -> bool {
    digest(purpose, presented)
        .ct_eq(&digest(purpose, token))
        .into()
}

fn session_value(token: &str) -> String {
    hex::encode(digest("condenser-admin-session", token))
}

fn authorized(headers: &HeaderMap, jar: &CookieJar, token: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if let Some(presented) = bearer {
        return same("condenser-admin-token", presented, token);
    }
    jar.get(COOKIE).is_some_and(|cookie| {
        let expected = session_value(token);
        cookie.value().as_bytes().ct_eq(expected.as_bytes()).into()
    })
}

/// 404 while the page is off; the login form to anyone without the token;
/// the page to its holder. Admin responses are never cached.
pub async fn require_admin(
    State(state): State<AppState>,
    jar: CookieJar,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = configured(&state) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let is_login = request.uri().path() == "/admin/login";
    let mut response = if is_login || authorized(request.headers(), &jar, token) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            render("login.html", minijinja::context! {}),
        )
            .into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

pub async fn login_form() -> Response {
    render("login.html", minijinja::context! {}).into_response()
}

#[derive(Deserialize)]
pub struct Login {
    token: String,
}

pub async fn login(
    State(state): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    Form(login): Form<Login>,
) -> Response {
    let Some(token) = configured(&state) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if !same("condenser-admin-token", &login.token, token) {
        let page = render("login.html", minijinja::context! { failed => true });
        return (StatusCode::UNAUTHORIZED, page).into_response();
    }
    // Secure when a TLS-terminating proxy in front says the page is https.
    let https = headers
        .get("x-forwarded-proto")
        .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = Cookie::build((COOKIE, session_value(token)))
        .path("/admin")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(https)
        .build();
    (jar.add(cookie), Redirect::to("/admin/")).into_response()
}

pub async fn logout(jar: CookieJar) -> Response {
    let cookie = Cookie::build((COOKIE, "")).path("/admin").build();
    (jar.remove(cookie), Redirect::to("/admin/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        let token = "admin-token-0123456789";
        assert!(same("p", token, token));
        assert!(!same("p", "admin-token-012345678", token));
        assert!(!same("p", "", token));
    }
}
