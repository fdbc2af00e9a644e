//! Step 3, persist: keeping instances' memory current.
//!
//! Keeping every instance's memory of the store current.
//!
//! Postgres: triggers (migrations/postgres) notify the `condenser_store`
//! channel when a compaction is inserted or deleted and when messages are
//! deleted; every instance listens and updates its [`StoreMemory`]. A
//! notification lost while the listening connection was down is made up
//! for on reconnect: recent compactions are read again and the stored links
//! forgotten.
//!
//! SQLite: one server per file, but `condenser` subcommands (or an
//! operator's SQL) may delete rows beside it. Triggers count deletions
//! (migrations/sqlite) and the server looks at the count every second.

use crate::conversation::{ChainHash, TenantId};
use crate::store::{Store, StoreMemory};
use sqlx::postgres::PgListener;
use std::time::Duration;

pub const CHANNEL: &str = "condenser_store";

/// How far back a reconnect reads compactions it may have missed.
const CATCH_UP: Duration = Duration::from_secs(60);

/// How often a SQLite server looks at the deletion count.
const SQLITE_DELETIONS_EVERY: Duration = Duration::from_secs(1);

/// What a notification says happened.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Compacted(TenantId, ChainHash),
    CompactionDeleted(ChainHash),
    MessagesDeleted,
}

fn parse(payload: &str) -> Option<Change> {
    let mut words = payload.split(' ');
    let change = match (words.next()?, words.next(), words.next()) {
        ("compacted", Some(tenant), Some(prefix)) => Change::Compacted(
            TenantId::from_stored(tenant.to_owned()),
            ChainHash::from_hex(prefix)?,
        ),
        ("compaction-deleted", Some(prefix), None) => {
            Change::CompactionDeleted(ChainHash::from_hex(prefix)?)
        }
        ("messages-deleted", None, None) => Change::MessagesDeleted,
        _ => return None,
    };
    Some(change)
}

/// Starts listening; returns once the first LISTEN is in place, so what is
/// loaded after it cannot miss a notification.
pub async fn listen(url: &str, store: Store, memory: StoreMemory) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    listener.listen(CHANNEL).await?;
    tokio::spawn(async move {
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    apply(&store, &memory, notification.payload()).await;
                }
                // The connection dropped; the next call reconnects.
                Ok(None) => {
                    tracing::warn!("store notifications interrupted: catching up");
                    catch_up(&store, &memory).await;
                }
                Err(error) => {
                    tracing::warn!(error.message = %error, "store notifications unavailable: retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    Ok(())
}

async fn apply(store: &Store, memory: &StoreMemory, payload: &str) {
    match parse(payload) {
        Some(Change::Compacted(tenant, prefix)) => {
            match store.compaction_at(&tenant, &prefix).await {
                Ok(Some(compaction)) => memory.remember_compaction(&tenant, &compaction),
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(error.message = %error, "reading a notified compaction failed");
                }
            }
        }
        Some(Change::CompactionDeleted(prefix)) => memory.forget_compaction(&prefix),
        Some(Change::MessagesDeleted) => memory.forget_stored(),
        None => tracing::debug!(payload, "unknown store notification"),
    }
}

/// Loads the compactions of the last `since` (all: `None`) into memory,
/// newest first, as many as memory holds.
pub async fn remember_recent(
    store: &Store,
    memory: &StoreMemory,
    since: Option<Duration>,
) -> usize {
    let since_ms = since.map_or(0, |since| {
        crate::store::now_ms().saturating_sub(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
    });
    match store
        .recent_compactions(since_ms, super::memory::COMPACTION_BYTES)
        .await
    {
        Ok(found) => {
            for (tenant, compaction) in &found {
                memory.remember_compaction(tenant, compaction);
            }
            found.len()
        }
        Err(error) => {
            tracing::warn!(error.message = %error, "reading recent compactions failed");
            0
        }
    }
}

/// After this process deleted rows. On Postgres the triggers tell every
/// instance, this one included; on SQLite this one forgets at once rather
/// than at its next look at the deletion count.
pub async fn after_deletions(store: &Store, memory: &StoreMemory) {
    if store.backend() == crate::store::Backend::Sqlite {
        forget_and_reload(store, memory).await;
    }
}

/// Starts watching SQLite's deletion count; returns once the count it
/// compares with is read, so a deletion after memory is filled is not
/// missed.
pub async fn watch_sqlite_deletions(store: Store, memory: StoreMemory) -> crate::store::Result<()> {
    let mut seen = store.sqlite_deletions().await?;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SQLITE_DELETIONS_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match store.sqlite_deletions().await {
                Ok(count) if count != seen => {
                    tracing::debug!(
                        deletions = count - seen,
                        "rows deleted: forgetting what memory knew"
                    );
                    forget_and_reload(&store, &memory).await;
                    seen = count;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(error.message = %error, "reading the deletion count failed");
                }
            }
        }
    });
    Ok(())
}

async fn forget_and_reload(store: &Store, memory: &StoreMemory) {
    memory.forget_stored();
    memory.forget_compactions();
    remember_recent(store, memory, None).await;
}

async fn catch_up(store: &Store, memory: &StoreMemory) {
    memory.forget_stored();
    remember_recent(store, memory, Some(CATCH_UP)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_and_garbage_does_not() {
        let tenant = TenantId::from_credential(b"", Some(b"k"));
        let prefix = ChainHash::root(&tenant, b"s");
        let payload = format!("compacted {} {}", tenant.as_str(), prefix.to_hex());
        assert_eq!(parse(&payload), Some(Change::Compacted(tenant, prefix)));
        let payload = format!("compaction-deleted {}", prefix.to_hex());
        assert_eq!(parse(&payload), Some(Change::CompactionDeleted(prefix)));
        assert_eq!(parse("messages-deleted"), Some(Change::MessagesDeleted));
        assert_eq!(parse("compacted x zz"), None);
        assert_eq!(parse("messages-deleted now"), None);
        assert_eq!(parse(""), None);
    }
}
