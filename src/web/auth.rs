//! Beside the flow, the operator page: who may open it.
//!
//! Who may open the operator page: the holder of `admin_token`, sent as
//! `Authorization: Bearer TOKEN` (scripts) or as the session cookie the
//! login form sets (browsers). Both are compared in constant time.
//!
//! The cookie holds a signed issue time (`session.rs`), not the token,
//! expires after `admin_session_ttl`, and is `HttpOnly` and
//! `SameSite=Strict`, so page scripts cannot read it and other sites cannot
//! send it.
//!
//! Logging in is limited per client address: after five wrong tokens in a
//! minute, the address gets a 429 with `Retry-After` until the minute is
//! over, even for the right one, so the token cannot be guessed at the
//! speed of the network. Behind a reverse proxy every client shares its
//! address, and so its limit. The login page's stylesheet is served
//! without a session, or the form would load unstyled.

use super::session;
use super::templates::render;
use crate::state::AppState;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use axum_extra::extract::cookie::{Cookie, CookieJar};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

const COOKIE: &str = "condenser_admin";

/// What anyone may load: the login page's own stylesheet.
const PUBLIC_PATHS: &[&str] = &["/admin/login", "/admin/assets/admin.css"];

/// Wrong tokens an address may send per window before it must wait.
const LOGIN_FAILURES: u32 = 5;
const LOGIN_WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at once; when that many failed within a window,
/// new addresses wait too, rather than the table growing without bound.
const LOGIN_ADDRESSES: usize = 10_000;

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

fn authorized(headers: &HeaderMap, jar: &CookieJar, token: &str, ttl: Duration) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if let Some(presented) = bearer {
        return same("condenser-admin-token", presented, token);
    }
    jar.get(COOKIE)
        .is_some_and(|cookie| session::valid(cookie.value(), token, ttl))
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
    let public = PUBLIC_PATHS.contains(&request.uri().path());
    let ttl = state.settings.admin_session_ttl;
    let mut response = if public || authorized(request.headers(), &jar, token, ttl) {
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
    Extension(limiter): Extension<Arc<LoginLimiter>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(login): Form<Login>,
) -> Response {
    let Some(token) = configured(&state) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let client = client_key(peer.ip());
    if let Err(wait) = limiter.check(client) {
        return too_many_attempts(wait);
    }
    if !same("condenser-admin-token", &login.token, token) {
        limiter.failed(client);
        let page = render("login.html", minijinja::context! { failed => true });
        return (StatusCode::UNAUTHORIZED, page).into_response();
    }
    // Secure when a TLS-terminating proxy in front says the page is https.
    let https = headers
        .get("x-forwarded-proto")
        .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = session_cookie(
        &session::issue(token),
        state.settings.admin_session_ttl,
        https,
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/admin/")).into_response()
}

/// The `Set-Cookie` value of a session: written out, as the cookie
/// builder's `Max-Age` takes a type of a crate this one does not name.
fn session_cookie(value: &str, ttl: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={value}; Max-Age={}; Path=/admin; HttpOnly; SameSite=Strict{secure}",
        ttl.as_secs()
    )
}

fn too_many_attempts(wait: Duration) -> Response {
    let seconds = wait.as_secs().max(1);
    let page = render("login.html", minijinja::context! { retry_after => seconds });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, page).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The address a limit applies to: an IPv6 client usually holds a whole
/// /64, so that is what counts as one client.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// Wrong tokens per client address, in fixed windows.
#[derive(Default)]
pub struct LoginLimiter {
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl LoginLimiter {
    /// `Err(wait)` while `client` has used up its window's failures.
    fn check(&self, client: IpAddr) -> Result<(), Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= LOGIN_ADDRESSES {
            failures.retain(|_, (since, _)| since.elapsed() < LOGIN_WINDOW);
        }
        match failures.get(&client) {
            Some((since, count)) if *count >= LOGIN_FAILURES => {
                let waited = since.elapsed();
                if waited < LOGIN_WINDOW {
                    return Err(LOGIN_WINDOW - waited);
                }
                Ok(())
            }
            None if failures.len() >= LOGIN_ADDRESSES => Err(LOGIN_WINDOW),
            _ => Ok(()),
        }
    }

    fn failed(&self, client: IpAddr) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let entry = failures.entry(client).or_insert((now, 0));
        if entry.0.elapsed() >= LOGIN_WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
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
