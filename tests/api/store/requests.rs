//! The per-request figures stay bounded per conversation.

use super::{bodies, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::store::{RequestRecord, PRUNE_EVERY, REQUESTS_KEPT};

both_backends!(
    a_conversation_keeps_only_its_newest_request_rows,
    a_batch_of_records_counts_requests_compactions_and_branches,
    a_busy_instances_commit_stores_and_prunes_every_record,
);

fn record(chain: &Chain, len: usize, at: i64, compactions: i64) -> RequestRecord {
    RequestRecord {
        id: uuid::Uuid::now_v7(),
        arrived_at_ms: at,
        tenant: chain.tenant.clone(),
        conversation: chain.conversation(),
        chain: chain.hashes()[..len].to_vec(),
        label: None,
        model: "gpt-4o".into(),
        upstream: "openai".into(),
        status: 200,
        sent_bytes: at,
        estimated_tokens: at,
        upstream_input_tokens: None,
        window_tokens: Some(128_000),
        compacted_messages: None,
        compactions,
        overflows: 0,
        compaction_error: None,
        degraded: false,
    }
}

/// One group commit holding several requests of two conversations, out of
/// arrival order: counted as if written one by one.
async fn a_batch_of_records_counts_requests_compactions_and_branches(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let main = Chain::new("key-a", &bodies(6, None));
    let edited = Chain::new("key-a", &bodies(6, Some(3)));
    let other = Chain::new("key-b", &bodies(4, None));
    store
        .write_batch(&[], &[record(&main, 3, 1_000, 0)])
        .await
        .expect("first");
    let batch = [
        record(&main, 7, 1_300, 1),
        record(&other, 3, 1_100, 0),
        // An edit of message 3, after the head at 5 messages: a branch.
        record(&edited, 5, 1_400, 0),
        record(&main, 5, 1_200, 0),
        record(&other, 5, 1_250, 0),
    ];
    store.write_batch(&[], &batch).await.expect("batch");

    let rows = |sql: &'static str| db.count(sql);
    assert_eq!(rows("select count(*) from requests").await, 6);
    assert_eq!(rows("select count(*) from conversations").await, 2);
    assert_eq!(
        rows("select cast(sum(requests) as bigint) from conversations").await,
        6
    );
    assert_eq!(
        rows("select cast(sum(compactions) as bigint) from conversations").await,
        1
    );
    assert_eq!(
        rows("select max(branches) from conversations").await,
        2,
        "the edit is a second branch of the first conversation"
    );
    assert_eq!(rows("select min(branches) from conversations").await, 1);
    assert_eq!(
        rows("select max(last_activity) from conversations").await,
        1_400
    );
    assert_eq!(
        rows("select max(messages) from conversations").await,
        4,
        "the newest request by arrival sets the head: the edit, 4 messages"
    );
}

async fn a_conversation_keeps_only_its_newest_request_rows(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(3, None));
    let total = REQUESTS_KEPT + PRUNE_EVERY * 2;
    for n in 0..total {
        let record = RequestRecord {
            id: uuid::Uuid::now_v7(),
            arrived_at_ms: 1_000 + n,
            tenant: chain.tenant.clone(),
            conversation: chain.conversation(),
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

    assert!(kept <= REQUESTS_KEPT + PRUNE_EVERY, "{kept} rows kept");
    assert!(kept >= REQUESTS_KEPT, "{kept} rows kept");
    assert_eq!(oldest, total - kept, "the oldest rows went first");
    assert_eq!(
        requests, total,
        "the conversation still counts every request"
    );
}

/// A busy instance's group commit: hundreds of one conversation's records
/// at once, written in several statements, and a prune of more rows than
/// one statement deletes.
async fn a_busy_instances_commit_stores_and_prunes_every_record(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(3, None));
    let batch = 700;
    let mut written = 0;
    while written < REQUESTS_KEPT + PRUNE_EVERY {
        let records: Vec<RequestRecord> = (written..written + batch)
            .map(|n| record(&chain, 3, 1_000 + n, 0))
            .collect();
        store.write_batch(&[], &records).await.expect("batch");
        written += batch;
        let kept = db.count("select count(*) from requests").await;
        assert!(
            kept == written || kept <= REQUESTS_KEPT + batch,
            "{kept} rows kept after {written}"
        );
    }
    let kept = db.count("select count(*) from requests").await;
    let oldest = db.count("select min(sent_bytes) from requests").await;
    let requests = db.count("select requests from conversations").await;
    assert!(kept < written, "the commit that crossed the cap pruned");
    assert!(kept >= REQUESTS_KEPT, "{kept} rows kept");
    assert!(kept <= REQUESTS_KEPT + batch, "{kept} rows kept");
    assert_eq!(oldest, 1_000 + written - kept, "the oldest rows went first");
    assert_eq!(requests, written, "every request is counted");
}
