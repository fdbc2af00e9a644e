//! Step 2, identify: the providers' own compaction forms, before the chat
//! pipeline sees the request.
//!
//! Per upstream (`native_compaction`): `forward` passes the forms
//! untouched; `serve` answers them with Condenser's own summaries; `auto`
//! forwards where the upstream is the provider that defines them and
//! serves elsewhere. Whatever the setting, an item Condenser made is
//! replaced by its summary message (no other server can read it), and one
//! that claims to be Condenser's but does not open is refused.

use crate::config::NativeCompaction;
use crate::conversation::TenantId;
use crate::error::ProxyError;
use crate::protocol::native::{Asked, Sealed, Shape};
use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::HeaderMap;
use std::sync::atomic::Ordering::Relaxed;

/// What the pipeline does with a request after this step.
enum Native {
    /// An ordinary chat request (Condenser's items expanded).
    Chat(Bytes),
    /// A compaction to answer: `body` without the ask, `original` as sent.
    Compact {
        body: Bytes,
        original: Bytes,
        shape: Shape,
    },
    /// Not Condenser's to handle: forwarded byte for byte.
    Forward(Bytes),
    /// Refused before anything is forwarded or stored.
    Refused(Response),
}

/// The body the chat pipeline works on, the body forwarded should it not
/// parse, and the compaction to answer if one is asked; or the response,
/// when this step already has it.
pub async fn prepared(
    state: &AppState,
    route: &Route,
    parts: &Parts,
    credentials: &HeaderMap,
    body: Bytes,
) -> Result<(Bytes, Bytes, Option<Shape>), Response> {
    let prepared = match prepare(state, route, credentials, body) {
        Native::Forward(body) => {
            let (method, sent) = (parts.method.clone(), body.clone().into());
            let upstream = &state.upstream;
            let response = upstream.forward(route, method, &parts.headers, sent).await;
            if !refused_as_unknown(route, response.status()) {
                return Err(response);
            }
            prepare(state, route, credentials, body)
        }
        prepared => prepared,
    };
    match prepared {
        Native::Chat(body) | Native::Forward(body) => Ok((body.clone(), body, None)),
        Native::Compact {
            body,
            original,
            shape,
        } => Ok((body, original, Some(shape))),
        Native::Refused(response) => Err(response),
    }
}

fn prepare(state: &AppState, route: &Route, credentials: &HeaderMap, body: Bytes) -> Native {
    let adapter = route.adapter();
    let Some(forms) = adapter.native() else {
        return Native::Chat(body);
    };
    let salt = state.settings.storage.tenant_salt.as_bytes();
    let credential = crate::conversation::identify::credential(credentials);
    let tenant = TenantId::from_credential(salt, credential);
    let role = &state.settings.compaction.summary_role;
    let key = &state.item_key;
    let expanded = forms.expand(&body, &mut |content| {
        let summary = Sealed::open(key, tenant.as_str(), content)?;
        Ok(summary.map(|summary| adapter.summary_message(role, &summary)))
    });
    let body = match expanded {
        Ok(Some(expanded)) => Bytes::from(expanded),
        Ok(None) => body,
        Err(forged) => {
            metrics::counter!("condenser_forged_items_total").increment(1);
            tracing::info!(error.message = %forged, "compaction item refused");
            let error = ProxyError::ForgedItem(forged.to_string());
            return Native::Refused(error.into_response_for(route.upstream.protocol));
        }
    };
    let serve = serves(route, forms.defined_by(route.url.host_str().unwrap_or("")));
    match forms.asked(route.url.path(), &body, serve) {
        Asked::Nothing => Native::Chat(body),
        Asked::Rewritten { body } => Native::Chat(body),
        Asked::Forward => Native::Forward(body),
        Asked::Compact { body: asked, shape } => Native::Compact {
            body: asked,
            original: body,
            shape,
        },
    }
}

/// Whether Condenser answers the forms on `route`'s upstream.
fn serves(route: &Route, defined_here: bool) -> bool {
    match route.upstream.native_compaction {
        NativeCompaction::Forward => false,
        NativeCompaction::Serve => true,
        NativeCompaction::Auto => !defined_here || route.upstream.native_refused.load(Relaxed),
    }
}

/// A compaction endpoint forwarded in `auto` mode and answered 404 or 405
/// is one this upstream does not have: remembered, so this request and
/// the later ones are served. Whether the request is now to be served.
fn refused_as_unknown(route: &Route, status: http::StatusCode) -> bool {
    let auto = route.upstream.native_compaction == NativeCompaction::Auto;
    let unknown = matches!(status.as_u16(), 404 | 405);
    if !(auto && unknown) {
        return false;
    }
    tracing::info!(
        upstream = %route.upstream.name,
        "the upstream does not know a compaction endpoint: Condenser serves it from now on"
    );
    route.upstream.native_refused.store(true, Relaxed);
    true
}
