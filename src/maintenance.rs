//! Beside the flow, retention: what the operator no longer keeps.
//!
//! Retention and pruning (`storage.retention`, `storage.prune_branches_after`):
//! a background loop on every instance, of which only the holder of the
//! maintenance lease works at a time. It deletes in small batches, each
//! conversation in its own transaction, so it never holds the database long.
//! Both work per conversation (one session): an idle one goes while a
//! sibling that shares its system prompt is active, taking only what the
//! sibling does not reach; pruning removes dead ends within one
//! conversation, never another's messages.

use crate::config::StorageSettings;
use crate::conversation::{ChainHash, TenantId};
use crate::store::Storage;
use crate::store::{now_ms, Store, StoreError};
use std::time::Duration;

/// Conversations deleted or pruned per batch.
const BATCH: i64 = 100;

/// Batches per run: a backlog is worked off over several runs, not at once.
const MAX_BATCHES: usize = 20;

/// What one run removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub conversations: u64,
    pub pruned_messages: u64,
}

/// Starts the loop when retention or pruning is configured. Not on the
/// shutdown tracker: an interrupted run loses nothing, as each deletion is
/// one transaction.
pub fn spawn(storage: &Storage, settings: &StorageSettings) {
    if settings.retention.is_none() && settings.prune_branches_after.is_none() {
        return;
    }
    let storage = storage.clone();
    let settings = settings.clone();
    let holder = uuid::Uuid::new_v4().to_string();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(settings.maintenance_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let (holder, settings) = (&holder, &settings);
            let memory = storage.memory();
            storage
                .run("maintenance", |store| async move {
                    if take_turn(&store, holder, settings.maintenance_interval).await? {
                        let swept = run_once(&store, settings).await?;
                        if swept != Swept::default() {
                            crate::store::notify::after_deletions(&store, memory).await;
                        }
                    }
                    Ok(())
                })
                .await;
        }
    });
}

/// One lease for the whole fleet, renewed by its holder every run; a dead
/// holder's turn passes to another instance after three intervals.
async fn take_turn(store: &Store, holder: &str, interval: Duration) -> Result<bool, StoreError> {
    let tenant = TenantId::from_stored("condenser-maintenance".to_owned());
    let key = ChainHash::ZERO;
    store
        .try_acquire_lease(&tenant, &key, holder, interval * 3)
        .await
}

fn cutoff(age: Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
}

/// Deletes idle conversations, then prunes dead-end branches, in batches.
pub async fn run_once(store: &Store, settings: &StorageSettings) -> Result<Swept, StoreError> {
    let mut swept = Swept::default();
    if let Some(retention) = settings.retention {
        let before = cutoff(retention);
        for _ in 0..MAX_BATCHES {
            let idle = store.idle_conversations(before, BATCH).await?;
            for (tenant, conversation) in &idle {
                let deleted = store.delete_conversation(tenant, conversation).await?;
                swept.conversations += deleted.conversations;
            }
            if (idle.len() as i64) < BATCH {
                break;
            }
        }
    }
    if let Some(grace) = settings.prune_branches_after {
        let before = cutoff(grace);
        for (tenant, conversation) in store.prune_candidates(before, BATCH).await? {
            swept.pruned_messages += store
                .prune_conversation(&tenant, &conversation, before)
                .await?;
        }
    }
    if swept != Swept::default() {
        tracing::info!(
            conversations = swept.conversations,
            pruned_messages = swept.pruned_messages,
            "retention: deleted idle conversations and dead-end branches"
        );
    }
    Ok(swept)
}
