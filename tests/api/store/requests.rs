//! The per-request figures stay bounded per conversation.

use super::{bodies, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::store::{RequestRecord, REQUESTS_KEPT};

both_backends!(a_conversation_keeps_only_its_newest_request_rows,);

async fn a_conversation_keeps_only_its_newest_request_rows(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(3, None));
    let total = REQUESTS_KEPT + 64 * 2;
    for n in 0..total {
        let record = RequestRecord {
            id: uuid::Uuid::now_v7(),
            arrived_at_ms: 1_000 + n,
            tenant: chain.tenant.clone(),
            chain: chain.hashes(),
            label: None,
            model: "gpt-4o".into(),
            upstream: "openai".into(),
            status: 200,
            sent_bytes: n,
            estimated_tokens: n,
            upstream_input_tokens: Some(n),
            window_tokens: None,
            compacted_messages: None,
            compactions: 0,
            overflows: 0,
            compaction_error: None,
            degraded: false,
        };
        store.record_request(&record).await.expect("recorded");
    }

    let kept = db.count("select count(*) from requests").await;
    let oldest = db.count("select min(sent_bytes) from requests").await;
    let requests = db.count("select requests from conversations").await;

    assert!(kept <= REQUESTS_KEPT + 64, "{kept} rows kept");
    assert!(kept >= REQUESTS_KEPT, "{kept} rows kept");
    assert_eq!(oldest, total - kept, "the oldest rows went first");
    assert_eq!(
        requests, total,
        "the conversation still counts every request"
    );
}
