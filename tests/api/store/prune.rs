//! Pruning dead-end branches on both backends: old dead ends go, and no
//! message on the path of a stored compaction or of a live branch does.

use super::{bodies, compaction, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::conversation::ConversationId;
use condenser::domain::Trigger;
use pretty_assertions::assert_eq;
use std::collections::BTreeSet;

both_backends!(
    pruning_keeps_every_path_to_a_compaction_and_to_a_live_branch,
    pruning_never_takes_what_another_conversation_reaches,
);

fn hexes(chain: &Chain, positions: std::ops::RangeInclusive<usize>) -> BTreeSet<String> {
    positions.map(|p| chain.messages[p].hash.to_hex()).collect()
}

async fn pruning_keeps_every_path_to_a_compaction_and_to_a_live_branch(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    // Three branches of one conversation: the original, an edit of message
    // 3 whose first five messages a compaction stands for, and an edit of
    // message 7 that is still in use.
    let original = Chain::new("key-a", &bodies(10, None));
    let compacted = Chain::new("key-a", &bodies(10, Some(3)));
    let live = Chain::new("key-a", &bodies(10, Some(7)));
    for chain in [&original, &compacted, &live] {
        persist(&store, chain, 11).await;
    }
    store
        .insert_compaction(
            &compacted.tenant,
            &compacted.conversation(),
            &compaction(&compacted, 5, 0, Trigger::Overflow),
        )
        .await
        .expect("compaction");
    let pool = db.pool().await;
    let live_tip: Vec<String> = hexes(&live, 7..=10).into_iter().collect();
    sqlx::query("update messages set created_at = 1000")
        .execute(&pool)
        .await
        .expect("backdating");
    for hash in &live_tip {
        sqlx::query("update messages set created_at = 5000 where hash = $1")
            .bind(hash)
            .execute(&pool)
            .await
            .expect("the live branch is recent");
    }

    // The newest request, as its figures record it, ended on the live branch.
    sqlx::query("update conversations set head = $1")
        .bind(live.messages[10].hash.to_hex())
        .execute(&pool)
        .await
        .expect("the newest head");

    let conversation = original.conversation();
    let deleted = store
        .prune_conversation(&original.tenant, &conversation, 3000)
        .await
        .expect("prunes");

    let left: BTreeSet<String> = sqlx::query_scalar("select hash from messages")
        .fetch_all(&pool)
        .await
        .expect("hashes")
        .into_iter()
        .collect();
    let mut expected = hexes(&original, 0..=6);
    expected.extend(hexes(&compacted, 3..=5));
    expected.extend(hexes(&live, 7..=10));
    assert_eq!(left, expected);
    // Gone: the original's tail after the live fork, the compacted branch
    // past its compaction.
    assert_eq!(deleted, 4 + 5);
}

/// An old dead end of one conversation that another conversation (a
/// session that sent the same messages) reaches is that one's history: it
/// stays, and so does its head.
async fn pruning_never_takes_what_another_conversation_reaches(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let original = Chain::new("key-a", &bodies(10, None));
    let edited = Chain::new("key-a", &bodies(10, Some(7)));
    for chain in [&original, &edited] {
        persist(&store, chain, 11).await;
    }
    let session = ConversationId::session(&original.tenant, b"another session");
    store
        .insert_messages(original.batch(&session, Some("s"), 11, 11))
        .await
        .expect("the session reaches the original's leaf");
    let pool = db.pool().await;
    for sql in [
        "update messages set created_at = 1000",
        "update conversation_heads set created_at = 1000",
    ] {
        sqlx::query(sql).execute(&pool).await.expect("backdating");
    }
    let edited_tip = edited.messages[10].hash.to_hex();
    sqlx::query("update conversations set head = $1")
        .bind(&edited_tip)
        .execute(&pool)
        .await
        .expect("the newest head");

    let deleted = store
        .prune_conversation(&original.tenant, &original.conversation(), 3000)
        .await
        .expect("prunes");

    assert_eq!(deleted, 0, "the other conversation's messages stay");
    assert_eq!(db.count("select count(*) from messages").await, 15);
    let heads = "select count(*) from conversation_heads where head = '{}'";
    let original_tip = original.messages[10].hash.to_hex();
    assert_eq!(db.count(&heads.replace("{}", &original_tip)).await, 2);
}
