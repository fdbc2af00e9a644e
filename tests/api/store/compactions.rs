//! Compactions: the deepest one of a chain, at most one per prefix, never
//! another tenant's.

use super::{bodies, compaction, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::conversation::TenantId;
use condenser::domain::{Compaction, Trigger};
use pretty_assertions::assert_eq;

both_backends!(
    the_deepest_compaction_of_the_chain_wins,
    a_second_compaction_of_the_same_prefix_is_refused,
    trims_round_trip_and_a_corrupt_trims_column_is_an_error,
);

async fn the_deepest_compaction_of_the_chain_wins(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(20, None));
    let other_tenant = TenantId::from_credential(b"", Some(b"key-b"));
    let (first, second) = (
        compaction(&chain, 5, 0, Trigger::Overflow),
        compaction(&chain, 12, 5, Trigger::Proactive),
    );
    for stored in [&second, &first] {
        assert!(store
            .insert_compaction(&chain.tenant, &chain.conversation(), stored)
            .await
            .expect("insert"));
    }
    assert!(store
        .insert_compaction(
            &other_tenant,
            &chain.conversation(),
            &compaction(&chain, 15, 12, Trigger::Overflow)
        )
        .await
        .expect("insert"));

    let hashes = chain.hashes();
    let latest = store
        .latest_compaction(&chain.tenant, &hashes)
        .await
        .expect("latest");
    let shorter = store
        .latest_compaction(&chain.tenant, &hashes[..10])
        .await
        .expect("latest");
    let none = store
        .latest_compaction(&chain.tenant, &hashes[..5])
        .await
        .expect("latest");

    assert_eq!(latest, Some(second));
    assert_eq!(shorter, Some(first));
    assert_eq!(none, None);
}

async fn a_second_compaction_of_the_same_prefix_is_refused(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(8, None));
    let winner = compaction(&chain, 6, 0, Trigger::Overflow);
    let loser = Compaction {
        summary: "another summary".to_owned(),
        ..winner.clone()
    };

    assert!(store
        .insert_compaction(&chain.tenant, &chain.conversation(), &winner)
        .await
        .expect("first"));
    assert!(!store
        .insert_compaction(&chain.tenant, &chain.conversation(), &loser)
        .await
        .expect("second"));

    let stored = store
        .latest_compaction(&chain.tenant, &chain.hashes())
        .await
        .expect("latest");
    assert_eq!(stored, Some(winner));
}

async fn trims_round_trip_and_a_corrupt_trims_column_is_an_error(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(8, None));
    let stored = compaction(&chain, 6, 0, Trigger::Overflow);
    assert!(!stored.trims.is_empty(), "the fixture has a trim");
    store
        .insert_compaction(&chain.tenant, &chain.conversation(), &stored)
        .await
        .expect("insert");
    let read = store
        .latest_compaction(&chain.tenant, &chain.hashes())
        .await
        .expect("latest")
        .expect("stored");
    assert_eq!(read.trims, stored.trims);

    sqlx::query("update compactions set trims = 'not json'")
        .execute(&db.pool().await)
        .await
        .expect("corrupt");
    let corrupt = store
        .latest_compaction(&chain.tenant, &chain.hashes())
        .await;
    assert!(
        corrupt.is_err(),
        "a row whose trims do not parse is not read as a compaction without trims: {corrupt:?}"
    );
}
