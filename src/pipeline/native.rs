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
use crate::protocol::native::{Asked, Expanded, Sealed, Shape};
use crate::state::AppState;
use crate::upstream::routes::Route;
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use std::sync::atomic::Ordering::Relaxed;

/// What the client asked of its provider's own compaction that Condenser
/// does itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeAsk {
    /// Answer with a compaction, in this shape, instead of forwarding.
    Compact(Shape),
    /// Compact past this many input tokens, and lead the answer with the
    /// compaction item.
    Threshold(u64),
}

/// Where a form forwarded to the provider that defines it turns out to be
/// unknown there: the request as Condenser serves it.
#[derive(Debug, Clone)]
pub struct Fallback {
    /// The body without the form.
    pub body: Bytes,
    /// The compaction threshold the form set.
    pub threshold: Option<u64>,
}

/// The request as the chat pipeline takes it after this step.
pub struct Prepared {
    /// The body the chat pipeline works on.
    pub body: Bytes,
    /// The body forwarded should it not parse.
    pub forwarded: Bytes,
    /// What of the provider's compaction Condenser does.
    pub ask: Option<NativeAsk>,
    /// What to serve should the upstream refuse the form.
    pub fallback: Option<Fallback>,
}

/// What the pipeline does with a request after this step.
enum Native {
    /// An ordinary chat request (Condenser's items expanded), with its
    /// compaction threshold if it set one and Condenser serves it.
    Chat(Bytes, Option<u64>, Option<Fallback>),
    /// A compaction to answer: `body` without the ask, `original` as sent.
    Compact {
        body: Bytes,
        original: Bytes,
        shape: Shape,
    },
    /// A compaction asked of the upstream, outside the chat pipeline: it
    /// may not know the form. `needs_item`: a success counts only if it
    /// holds the compaction item.
    Probe { body: Bytes, needs_item: bool },
    /// Refused before anything is forwarded or stored.
    Refused(Response),
}

/// The request the chat pipeline takes, or the response, when this step
/// already has it.
pub async fn prepared(
    state: &AppState,
    route: &Route,
    parts: &Parts,
    credential: Option<&[u8]>,
    body: Bytes,
) -> Result<Prepared, Response> {
    let prepared = match prepare(state, route, credential, body) {
        Native::Probe { body, needs_item } => {
            if let Some(answer) = probe(state, route, parts, body.clone(), needs_item).await {
                return Err(answer);
            }
            prepare(state, route, credential, body)
        }
        prepared => prepared,
    };
    let chat = |body: Bytes, ask, fallback| Prepared {
        forwarded: body.clone(),
        body,
        ask,
        fallback,
    };
    match prepared {
        Native::Chat(body, threshold, fallback) => {
            Ok(chat(body, threshold.map(NativeAsk::Threshold), fallback))
        }
        Native::Probe { body, .. } => Ok(chat(body, None, None)),
        Native::Compact {
            body,
            original,
            shape,
        } => Ok(Prepared {
            body,
            forwarded: original,
            ask: Some(NativeAsk::Compact(shape)),
            fallback: None,
        }),
        Native::Refused(response) => Err(response),
    }
}

fn prepare(state: &AppState, route: &Route, credential: Option<&[u8]>, body: Bytes) -> Native {
    let adapter = route.adapter();
    let Some(forms) = adapter.native() else {
        return Native::Chat(body, None, None);
    };
    let salt = state.settings.storage.tenant_salt.as_bytes();
    let tenant = TenantId::from_credential(salt, credential);
    let role = &state.settings.compaction.summary_role;
    let key = &state.item_key;
    let expanded = forms.expand(&body, &mut |content| {
        let opened = Sealed::open(key, tenant.as_str(), content)?;
        Ok(opened.map(|opened| Expanded {
            message: adapter.summary_message(role, &opened.summary),
            carried: opened.carried,
        }))
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
    let path = route.url.path();
    match forms.asked(path, &body, serve) {
        Asked::Nothing if !serve && may_fall_back(route) => {
            forwarded(forms.asked(path, &body, true), body)
        }
        Asked::Nothing => Native::Chat(body, None, None),
        Asked::Rewritten { body, threshold } => Native::Chat(body, threshold, None),
        Asked::Forward => Native::Probe {
            body,
            needs_item: false,
        },
        Asked::Compact { body: asked, shape } => Native::Compact {
            body: asked,
            original: body,
            shape,
        },
    }
}

/// A request forwarded to the provider that defines its forms, with what
/// to serve should it refuse them (`served`, what serving would make of
/// it). A compaction it asks is probed outside the chat pipeline, so
/// that an answer without the item can still be served.
fn forwarded(served: Asked, body: Bytes) -> Native {
    match served {
        Asked::Compact { .. } => Native::Probe {
            body,
            needs_item: true,
        },
        Asked::Rewritten {
            body: served,
            threshold,
        } => {
            let fallback = Fallback {
                body: served,
                threshold,
            };
            Native::Chat(body, None, Some(fallback))
        }
        Asked::Nothing | Asked::Forward => Native::Chat(body, None, None),
    }
}

/// Forwards a compaction request; the upstream's answer, unless it shows
/// the form unknown there (refused, or answered without the item) in
/// `auto` mode, which is then remembered and the request served.
async fn probe(
    state: &AppState,
    route: &Route,
    parts: &Parts,
    body: Bytes,
    needs_item: bool,
) -> Option<Response> {
    let (method, sent) = (parts.method.clone(), body.into());
    let response = state
        .upstream
        .forward(route, method, &parts.headers, sent)
        .await;
    let forms = route.adapter().native()?;
    let status = response.status();
    if (status.is_success() && !needs_item) || !may_fall_back(route) {
        return Some(response);
    }
    let (head, answer) = response.into_parts();
    let Ok(answer) = axum::body::to_bytes(answer, MAX_PROBED_ANSWER).await else {
        let error = ProxyError::Internal.into_response_for(route.upstream.protocol);
        return Some(error);
    };
    let unknown = match status.is_success() {
        true => !forms.holds_compaction(&answer),
        false => forms.refuses(route.url.path(), status.as_u16(), &answer),
    };
    if !unknown {
        return Some(Response::from_parts(head, answer.into()));
    }
    remember_refused(route, status.as_u16());
    None
}

/// An answer to a compaction request read whole to find its item: a
/// compaction item, or the reply of a server that ignored the ask.
const MAX_PROBED_ANSWER: usize = 16 * 1024 * 1024;

/// Whether a refusal of a form forwarded to `route`'s upstream still
/// switches it to serving (`auto`, not switched yet).
pub fn may_fall_back(route: &Route) -> bool {
    let auto = route.upstream.native_compaction == NativeCompaction::Auto;
    auto && !route.upstream.native_refused.load(Relaxed)
}

/// Remembers that the upstream does not know a native form: its later
/// requests are served.
pub fn remember_refused(route: &Route, status: u16) {
    tracing::info!(
        upstream = %route.upstream.name,
        status,
        "the upstream does not know a native compaction form: Condenser serves it from now on"
    );
    route.upstream.native_refused.store(true, Relaxed);
}

/// Whether Condenser answers the forms on `route`'s upstream.
fn serves(route: &Route, defined_here: bool) -> bool {
    match route.upstream.native_compaction {
        NativeCompaction::Forward => false,
        NativeCompaction::Serve => true,
        NativeCompaction::Auto => !defined_here || route.upstream.native_refused.load(Relaxed),
    }
}
