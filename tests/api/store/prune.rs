//! Pruning dead-end branches on both backends: old dead ends go, and no
//! message on the path of a stored compaction or of a live branch does.

use super::{bodies, compaction, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::conversation::ChainHash;
use condenser::store::Trigger;
use pretty_assertions::assert_eq;
use std::collections::BTreeSet;

both_backends!(pruning_keeps_every_path_to_a_compaction_and_to_a_live_branch,);

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

    let root: ChainHash = original.messages[0].hash;
    let deleted = store
        .prune_conversation(&original.tenant, &root, 3000)
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
