//! Persisting messages: only what is new, once per tenant, branches sharing
//! their prefix.

use super::{bodies, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use pretty_assertions::assert_eq;

both_backends!(
    a_long_conversation_stores_each_message_once,
    tenants_with_identical_messages_get_separate_rows,
    an_edit_shares_the_prefix_and_starts_a_branch,
    stored_text_is_exactly_the_text_written,
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
    let conversation = chain.conversation();
    let replay = store
        .insert_messages(chain.batch(&conversation, None, 0, 501))
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
    let same = Chain {
        tenant: b.tenant.clone(),
        ..Chain::new("key-a", &bodies(4, None))
    };
    let conversation = same.conversation();
    assert_eq!(
        store
            .insert_messages(same.batch(&conversation, None, 0, 5))
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

/// Rows travel to the database as one JSON text per batch: whatever a body
/// or a label holds (quotes, backslashes, escapes that are text, control
/// characters, any script) is stored as it was, in batches larger than any
/// one statement's.
async fn stored_text_is_exactly_the_text_written(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let awkward = [
        r#"{"role":"user","content":"say \"hi\" and \\ then \u0000 \ud83d\ude00"}"#,
        "{\"role\":\"assistant\",\n\t\"content\":\"Zürich → 東京 😀 'quoted' $1 ?\"}",
        r#"{"role":"user","content":"value ->> 'hash' as hash; drop table messages; --"}"#,
    ];
    let bodies: Vec<String> = (0..1_200)
        .map(|index| format!("{}{index}", awkward[index % awkward.len()]))
        .collect();
    let chain = Chain::new("key-a", &bodies);
    let label = "build \"müde\" \\ 'x' 😀";

    let conversation = chain.conversation();
    let written = store
        .insert_messages(chain.batch(&conversation, Some(label), 0, 1_201))
        .await
        .expect("insert");

    assert_eq!(written, 1_201);
    let pool = db.pool().await;
    let stored: Vec<(String, Option<String>, String, String)> = sqlx::query_as(
        "select body, label, hash, parent from messages where position > 0 order by position",
    )
    .fetch_all(&pool)
    .await
    .expect("read back");
    assert_eq!(stored.len(), bodies.len());
    for ((body, stored_label, hash, parent), message) in stored.iter().zip(&chain.messages[1..]) {
        assert_eq!(body, &message.body);
        assert_eq!(stored_label.as_deref(), Some(label));
        assert_eq!(hash, &message.hash.to_hex());
        assert_eq!(Some(parent.clone()), message.parent.map(|p| p.to_hex()));
    }
    assert_eq!(
        store
            .stored_prefix_len(&chain.tenant, &chain.hashes())
            .await
            .expect("prefix"),
        1_201
    );
}
