//! Persisting messages: only what is new, once per tenant, branches sharing
//! their prefix.

use super::{bodies, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use pretty_assertions::assert_eq;

both_backends!(
    a_long_conversation_stores_each_message_once,
    tenants_with_identical_messages_get_separate_rows,
    an_edit_shares_the_prefix_and_starts_a_branch,
);

async fn a_long_conversation_stores_each_message_once(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(500, None));

    // Every request brings the last reply and a new user message.
    let mut previous = 0;
    for len in (2..=500).step_by(2).chain([501]) {
        let stored = store
            .stored_prefix_len(&chain.tenant, &chain.hashes()[..len])
            .await
            .expect("prefix");
        let new = persist(&store, &chain, len).await;
        assert_eq!(stored, previous);
        assert!(new <= 2, "request with {len} messages wrote {new} rows");
        previous = len;
    }

    assert_eq!(db.count("select count(*) from messages").await, 501);
    let replay = store
        .insert_messages(&chain.tenant, None, &chain.messages)
        .await
        .expect("replay");
    assert_eq!(replay, 0);
    assert_eq!(
        store
            .stored_prefix_len(&chain.tenant, &chain.hashes())
            .await
            .expect("prefix"),
        501
    );
    assert_eq!(db.count("select count(*) from messages").await, 501);
}

async fn tenants_with_identical_messages_get_separate_rows(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let a = Chain::new("key-a", &bodies(4, None));
    let b = Chain::new("key-b", &bodies(4, None));

    assert_eq!(persist(&store, &a, 5).await, 5);
    assert_eq!(
        store
            .stored_prefix_len(&b.tenant, &b.hashes())
            .await
            .expect("prefix"),
        0
    );
    assert_eq!(
        store
            .stored_prefix_len(&b.tenant, &a.hashes())
            .await
            .expect("prefix"),
        0
    );
    assert_eq!(persist(&store, &b, 5).await, 5);
    // Even the very same hashes are stored again under another tenant.
    assert_eq!(
        store
            .insert_messages(&b.tenant, None, &a.messages)
            .await
            .expect("insert"),
        5
    );

    assert_eq!(db.count("select count(*) from messages").await, 15);
}

async fn an_edit_shares_the_prefix_and_starts_a_branch(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let original = Chain::new("key-a", &bodies(10, None));
    let edited = Chain::new("key-a", &bodies(10, Some(3)));
    persist(&store, &original, 11).await;

    let shared = store
        .stored_prefix_len(&edited.tenant, &edited.hashes())
        .await
        .expect("prefix");
    let new = persist(&store, &edited, 11).await;

    assert_eq!(shared, 3);
    assert_eq!(edited.hashes()[..3], original.hashes()[..3]);
    assert_eq!(new, 8);
    assert_eq!(db.count("select count(*) from messages").await, 19);
}
