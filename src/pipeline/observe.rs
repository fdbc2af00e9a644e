//! Beside the flow, the operator page: what each request did.
//!
//! Recording what each chat request did, for the operator page: the tokens
//! the upstream saw (estimated before sending, and as its usage reported),
//! and the compactions and overflows on the way. Queued for the writer once
//! the usage is known, never written on the request path.

use super::respond::Report;
use crate::conversation::Conversation;
use crate::domain::CompactionFailure;
use crate::state::AppState;
use crate::store::RequestRecord;
use axum::response::Response;
use std::future::Future;

/// What is known of a request before it is sent.
pub struct Observed {
    id: uuid::Uuid,
    arrived_at_ms: i64,
    state: AppState,
    upstream: String,
    model: String,
    conversation: Conversation,
}

impl Observed {
    /// `arrived_at_ms` is the request's arrival, as its messages' write
    /// has it too: the figures of the newest request by arrival are the
    /// conversation's.
    pub fn new(
        state: &AppState,
        upstream: &str,
        model: &str,
        conversation: &Conversation,
        arrived_at_ms: i64,
    ) -> Self {
        Self {
            id: uuid::Uuid::now_v7(),
            arrived_at_ms,
            state: state.clone(),
            upstream: upstream.to_owned(),
            model: model.to_owned(),
            conversation: conversation.clone(),
        }
    }

    /// Runs `exchange` and records its outcome on the side.
    pub async fn after(
        self,
        exchange: impl Future<Output = (Response, Report)>,
    ) -> (Response, Report) {
        let (response, mut report) = exchange.await;
        let status = response.status().as_u16();
        let usage = report.usage.take();
        let tenant = &self.conversation.tenant;
        let known = self.state.sizes.get(&self.upstream, &self.model, tenant);
        let estimated = known
            .calibration
            .unwrap_or_default()
            .tokens(report.sent_bytes);
        let mut record = RequestRecord {
            id: self.id,
            arrived_at_ms: self.arrived_at_ms,
            tenant: self.conversation.tenant,
            conversation: self.conversation.id,
            chain: self.conversation.chain,
            label: self.conversation.label,
            model: self.model,
            upstream: self.upstream,
            status: i64::from(status),
            sent_bytes: report.sent_bytes as i64,
            estimated_tokens: estimated as i64,
            upstream_input_tokens: None,
            window_tokens: known.window_tokens().map(|w| w as i64),
            compacted_messages: report.compacted_messages,
            compactions: i64::from(report.compactions),
            overflows: i64::from(report.overflows),
            compaction_error: report.compaction_error,
            degraded: report.degraded.is_some(),
        };
        // A request the upstream refused leaves no trace in the store. A
        // compaction loop refused leaves its row: only a conversation that
        // was compacted for its credential can loop, and the operator is
        // to see it.
        let looped = report.compaction_error == Some(CompactionFailure::Loop);
        if self.state.storage.store().is_none() || !(report.accepted || looped) {
            return (response, report);
        }
        let writer = self.state.writer.clone();
        // A full queue drops a chart point, counted, never a message.
        match usage {
            // Known once the client's body has been relayed whole.
            Some(usage) => usage.then(move |usage| {
                record.upstream_input_tokens = usage.map(|u| u.input_tokens as i64);
                let _ = writer.record(record);
            }),
            None => {
                let _ = writer.record(record);
            }
        }
        (response, report)
    }
}
