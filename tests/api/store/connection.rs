//! Connecting and migrating: URLs of both kinds, a dead database failing
//! fast, a lazy pool for starting degraded.

use super::{bodies, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::store::{Backend, Store, StoreError, StoreOptions};
use pretty_assertions::assert_eq;
use std::time::{Duration, Instant};

both_backends!(
    migrating_twice_is_harmless,
    a_lazy_store_connects_on_first_use
);

async fn migrating_twice_is_harmless(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    persist(&store, &Chain::new("key-a", &bodies(2, None)), 3).await;

    store.migrate().await.expect("second migration");
    let again = Store::connect(&db.url, &StoreOptions::default())
        .await
        .expect("reconnect");
    again.migrate().await.expect("third migration");

    assert_eq!(db.count("select count(*) from messages").await, 3);
    again.ping().await.expect("ping");
}

#[tokio::test]
async fn an_in_memory_sqlite_store_keeps_its_rows_across_calls() {
    let store = Store::connect("sqlite::memory:", &StoreOptions::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let chain = Chain::new("key-a", &bodies(3, None));

    assert_eq!(persist(&store, &chain, 4).await, 4);
    assert_eq!(
        store
            .stored_prefix_len(&chain.tenant, &chain.hashes())
            .await
            .expect("prefix"),
        4
    );
}

async fn a_lazy_store_connects_on_first_use(backend: TestBackend) {
    let db = TestDb::new(backend).await;

    let store = Store::connect_lazy(&db.url, &StoreOptions::default()).expect("lazy");
    store.migrate().await.expect("migrate");

    store.ping().await.expect("ping");
    let expected = match backend {
        TestBackend::Sqlite => Backend::Sqlite,
        TestBackend::Postgres => Backend::Postgres,
    };
    assert_eq!(store.backend(), expected);
}

#[tokio::test]
async fn a_sqlite_file_is_created_in_wal_mode() {
    let db = TestDb::new(TestBackend::Sqlite).await;

    db.store().await;

    let pool = db.pool().await;
    let mode: String = sqlx::query_scalar("pragma journal_mode")
        .fetch_one(&pool)
        .await
        .expect("journal mode");
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn a_sqlite_file_in_a_missing_directory_gets_its_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("state/nested/condenser.db");
    let url = format!("sqlite://{}", file.display());

    let store = Store::connect(&url, &StoreOptions::default()).await;

    assert!(store.is_ok(), "{:?}", store.err());
    assert!(file.exists());
}

#[tokio::test]
async fn a_dead_database_fails_fast_and_a_lazy_store_still_starts() {
    let options = StoreOptions {
        acquire_timeout: Duration::from_millis(500),
        ..StoreOptions::default()
    };
    let dead = "postgres://postgres@127.0.0.1:1/condenser";
    let started = Instant::now();

    let connected = Store::connect(dead, &options).await;
    let lazy = Store::connect_lazy(dead, &options).expect("a lazy store needs no database");
    let pinged = lazy.ping().await;

    assert!(matches!(connected, Err(StoreError::Database(_))));
    assert!(matches!(pinged, Err(StoreError::Database(_))));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_unsupported_url_is_refused() {
    let refused = Store::connect("mysql://root:secret@db/app", &StoreOptions::default()).await;

    let message = refused.expect_err("mysql is unsupported").to_string();
    assert_eq!(message, "unsupported database url scheme: mysql");
}
