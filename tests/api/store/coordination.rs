//! State shared by instances: summarizer leases and learned model limits.

use super::{bodies, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use pretty_assertions::assert_eq;
use std::time::Duration;

both_backends!(
    a_lease_has_one_holder_until_it_expires_or_is_released,
    model_limits_are_upserted,
);

async fn a_lease_has_one_holder_until_it_expires_or_is_released(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(2, None));
    let (tenant, key) = (&chain.tenant, &chain.messages[0].hash);
    let (long, short) = (Duration::from_secs(60), Duration::from_millis(300));
    let acquire = |holder: &'static str, ttl| store.try_acquire_lease(tenant, key, holder, ttl);

    assert!(acquire("a", short).await.expect("a takes it"));
    assert!(!acquire("b", long).await.expect("b refused"));
    assert!(acquire("a", short).await.expect("a renews"));
    // Time passing is the behaviour under test (the TTL): a sleep is a
    // lower bound on it, so a busy machine cannot make this fail.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(acquire("b", long).await.expect("b takes the expired lease"));
    assert!(!acquire("a", long).await.expect("a refused"));
    store
        .release_lease(tenant, key, "a")
        .await
        .expect("a cannot release b's lease");
    assert!(!acquire("c", long).await.expect("c refused"));
    store
        .release_lease(tenant, key, "b")
        .await
        .expect("b releases");
    assert!(acquire("c", long)
        .await
        .expect("c takes the released lease"));
}

async fn model_limits_are_upserted(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;

    assert_eq!(
        store.model_limit("openai", "gpt-4o").await.expect("read"),
        None
    );
    store
        .record_model_limit("openai", "gpt-4o", 128_000, "config")
        .await
        .expect("record");
    store
        .record_model_limit("openai", "gpt-4o", 127_000, "overflow")
        .await
        .expect("update");
    store
        .record_model_limit("azure", "gpt-4o", 8_192, "usage")
        .await
        .expect("record");

    assert_eq!(
        store.model_limit("openai", "gpt-4o").await.expect("read"),
        Some(127_000)
    );
    assert_eq!(
        store.model_limit("azure", "gpt-4o").await.expect("read"),
        Some(8_192)
    );
    assert_eq!(db.count("select count(*) from model_limits").await, 2);
    let unknown = store.model_size("openai", "gpt-4o").await.expect("read");
    assert_eq!(
        (unknown.tokens_per_byte, unknown.ignores_output),
        (None, false)
    );
    store
        .record_calibration("openai", "gpt-4o", 0.25, true)
        .await
        .expect("record");
    store
        .record_calibration("openai", "gpt-4o", 0.3125, false)
        .await
        .expect("update");
    let calibrated = store.model_size("openai", "gpt-4o").await.expect("read");
    assert_eq!(calibrated.window, Some(127_000));
    assert_eq!(calibrated.tokens_per_byte, Some(0.3125));
    assert!(!calibrated.ignores_output, "the newest observation wins");
    let azure = store.model_size("azure", "gpt-4o").await.expect("read");
    assert_eq!(azure.tokens_per_byte, None);
}
