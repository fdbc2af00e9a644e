//! Beside the flow, shared state: what every request runs on.
//!
//! What every request handler shares, built once at start-up.

use crate::config::Settings;
use crate::conversation::ChainMemo;
use crate::overflow::SignatureTable;
use crate::protocol::native::ItemKey;
use crate::store::Storage;
use crate::store::{notify, Backend, Store, StoreOptions, Writer};
use crate::tokens::Sizes;
use crate::upstream::routes::RouteTable;
use crate::upstream::UpstreamClient;
use anyhow::Context;
use std::sync::Arc;

/// Cheap to clone: every request takes a copy (axum's `State`, its
/// exchange), so the parts sit behind one shared pointer, not one each.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub settings: Arc<Settings>,
    pub routes: Arc<RouteTable>,
    pub upstream: UpstreamClient,
    pub overflow: Arc<SignatureTable>,
    pub storage: Storage,
    /// Windows and byte-to-token rates of models, learned and configured.
    pub sizes: Sizes,
    /// Work that outlives its request (persisting, finishing a compaction);
    /// shutdown waits for it.
    pub background: tokio_util::task::TaskTracker,
    /// Group commits of what requests bring, off the request path.
    pub writer: Writer,
    /// Chain links of messages seen before, so a re-sent history is not
    /// canonicalized and hashed again.
    pub chain_memo: Arc<ChainMemo>,
    /// Proactive compactions that planning showed cannot be made, so a
    /// re-sent history is not planned again for the same answer.
    pub failed_plans: crate::compaction::FailedPlans,
    /// Each conversation's compactions since its client last sent
    /// something new: a loop is answered, not paid for.
    pub progress: crate::compaction::progress::Progress,
    /// What Condenser's compaction items are authenticated with.
    pub item_key: ItemKey,
}

impl AppState {
    pub async fn new(settings: Settings) -> anyhow::Result<Self> {
        let threads = crate::threads::count(settings.server.connection_threads);
        let upstream = UpstreamClient::new(&settings.timeouts, settings.max_body_bytes, threads)?;
        let overflow = SignatureTable::with_custom(&settings.overflow_signatures)?;
        let storage = open_storage(&settings).await?;
        remember_the_store(&settings.database_url, &storage).await;
        let item_key = item_key(&settings, &storage).await;
        let writer = Writer::start(
            storage.clone(),
            settings.storage.write_queue_bytes,
            settings.storage.write_linger,
        );
        let background = tokio_util::task::TaskTracker::new();
        let sizes = Sizes::new(
            settings.context_windows.clone().into_iter().collect(),
            storage.clone(),
            background.clone(),
        );
        Ok(Self(Arc::new(Shared {
            routes: Arc::new(
                RouteTable::from_settings(&settings).context("parsing the upstream base URLs")?,
            ),
            settings: Arc::new(settings),
            upstream,
            overflow: Arc::new(overflow),
            storage,
            sizes,
            background,
            writer,
            chain_memo: Arc::new(ChainMemo::default()),
            failed_plans: Default::default(),
            progress: Default::default(),
            item_key,
        })))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

pub fn store_options(settings: &Settings) -> StoreOptions {
    StoreOptions {
        max_connections: settings.storage.max_connections,
        acquire_timeout: settings.storage.acquire_timeout,
    }
}

/// Connects and migrates; a database that is down fails start-up unless
/// the operator allowed a degraded start.
async fn open_storage(settings: &Settings) -> anyhow::Result<Storage> {
    let retry = settings.storage.degraded_retry;
    let options = store_options(settings);
    let opened = async {
        let store = Store::connect(&settings.database_url, &options).await?;
        store.migrate().await?;
        store.forget_leases_of_a_previous_run().await?;
        Ok::<_, crate::store::StoreError>(store)
    }
    .await;
    match opened {
        Ok(store) => Ok(Storage::new(Some(store), true, retry)),
        Err(error) if settings.storage.allow_degraded_start => {
            tracing::warn!(error.message = %error, "database unavailable at start-up: running degraded");
            let store = Store::connect_lazy(&settings.database_url, &options)?;
            Ok(Storage::new(Some(store), false, retry))
        }
        Err(error) => Err(error)
            .context("opening the database (set storage.allow_degraded_start to start without it)"),
    }
}

/// Fills this instance's memory of the store before the first request:
/// listening first (Postgres), so no compaction made meanwhile is missed,
/// then the newest compactions. Without the database, memory starts empty
/// and fills as compactions are made.
async fn remember_the_store(url: &str, storage: &Storage) {
    let Some(store) = storage.store() else {
        return;
    };
    let memory = storage.memory();
    match store.backend() {
        Backend::Postgres => {
            if let Err(error) = notify::listen(url, store.clone(), memory.clone()).await {
                tracing::warn!(error.message = %error, "cannot listen for other instances' compactions: they are found on overflow");
            }
        }
        Backend::Sqlite => {
            if let Err(error) = notify::watch_sqlite_deletions(store.clone(), memory.clone()).await
            {
                tracing::warn!(error.message = %error, "cannot watch for deleted rows: restart after deleting conversations");
            }
        }
    }
    let remembered = notify::remember_recent(store, memory, None).await;
    tracing::debug!(remembered, "compactions loaded into memory");
}

/// The compaction items' key: the configured one, else the one the store
/// shares between instances (generated by the first to start). Without
/// the store, one for this process alone: its items open nowhere else.
async fn item_key(settings: &Settings, storage: &Storage) -> ItemKey {
    if let Some(secret) = &settings.compaction.item_key {
        return ItemKey::from_secret(secret.expose());
    }
    let mut fresh = [0u8; 32];
    getrandom::fill(&mut fresh).expect("the system's random source");
    let Some(store) = storage.store() else {
        return ItemKey::new(fresh);
    };
    let stored = store
        .shared_key("compaction_item_key", &hex::encode(fresh))
        .await;
    match stored.map(hex::decode) {
        Ok(Ok(bytes)) if bytes.len() == 32 => ItemKey::new(bytes.try_into().expect("32 bytes")),
        Ok(_) => {
            tracing::warn!(
                "the stored compaction item key is malformed: using one of this process"
            );
            ItemKey::new(fresh)
        }
        Err(error) => {
            tracing::warn!(error.message = %error, "cannot read the shared compaction item key: using one of this process");
            ItemKey::new(fresh)
        }
    }
}
