//! Step 3, persist: what a message write makes a conversation reach.
//!
//! A conversation's list row counts the messages its heads reach and
//! their bytes (`conversations`), so that the operator's views never walk
//! a conversation's messages to count them. A commit adds to those
//! figures what it made each conversation reach:
//!
//! - a conversation it opens reaches its requests' whole chains: the
//!   links the write carried, and those stored before (a shared system
//!   prompt, an opening another session stored), whose bytes are read;
//! - a conversation already listed reaches, beyond what it did, the links
//!   this commit inserted, whichever of its batches carried them (a link
//!   stored before was reached already, by its own earlier write).
//!
//! Short only where a listed conversation's new branch passes through
//! links another conversation stored first; pruning counts the
//! conversation again (`lifecycle`).

use super::batch_rows::{hex, BatchStatement, Column};
use super::messages::{Inserted, MessageBatch};
use crate::conversation::{ChainHash, TenantId};
use crate::store::rows::hash_column;
use crate::store::{Backend, Result};
use serde::Serialize;
use sqlx::any::AnyArguments;
use sqlx::{AnyConnection, Row};
use std::collections::{HashMap, HashSet};

/// What one conversation reaches, beyond what it did, after a commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Reached {
    /// Messages, the roots not counted.
    pub(super) messages: i64,
    /// Bytes of their bodies, the roots counted.
    pub(super) bytes: i64,
}

/// A stored link whose bytes are read.
#[derive(Serialize)]
struct LinkRow<'a> {
    tenant: &'a str,
    #[serde(serialize_with = "hex")]
    hash: &'a ChainHash,
}

const LINK_COLUMNS: [Column; 2] = [("tenant", "text"), ("hash", "text")];

/// The stored bytes of the links bound.
static LINK_BYTES: BatchStatement = BatchStatement::new(0, &LINK_COLUMNS, |source| {
    format!(
        "select r.tenant, r.hash, m.bytes from {source} \
         join messages m on m.tenant = r.tenant and m.hash = r.hash"
    )
});

/// Links read per statement.
const LOOKUP_CHUNK: usize = 2_000;

/// What each group of batches (one conversation's, newest last) makes its
/// conversation reach; `new[i]`: whether group `i`'s conversation had no
/// row before this commit. `inserted`: the links this commit stored.
pub(super) async fn reached_on(
    connection: &mut AnyConnection,
    backend: Backend,
    groups: &[&[&MessageBatch<'_>]],
    new: &[bool],
    inserted: &Inserted,
) -> Result<Vec<Reached>> {
    let mut reached = Vec::with_capacity(groups.len());
    // Links a new conversation reaches that its write did not carry.
    let mut uncarried: Vec<(usize, &TenantId, ChainHash)> = Vec::new();
    for (index, (group, new)) in groups.iter().zip(new).enumerate() {
        let Some(first) = group.first() else {
            reached.push(Reached::default());
            continue;
        };
        let tenant = first.tenant;
        let carried: HashMap<ChainHash, (i64, i64)> = group
            .iter()
            .flat_map(|batch| batch.messages.iter())
            .map(|m| (m.hash, (m.position, body_bytes(&m.body))))
            .collect();
        let mut figures = Reached::default();
        if *new {
            let mut seen = HashSet::new();
            let links = group.iter().flat_map(|b| b.chain.iter().enumerate());
            for (position, hash) in links.filter(|(_, hash)| seen.insert(**hash)) {
                figures.messages += i64::from(position > 0);
                match carried.get(hash) {
                    Some((_, bytes)) => figures.bytes += bytes,
                    None => uncarried.push((index, tenant, *hash)),
                }
            }
        } else {
            let key = |hash: &ChainHash| (tenant.as_str().to_owned(), *hash);
            for (hash, (position, bytes)) in &carried {
                if inserted.contains(&key(hash)) {
                    figures.messages += i64::from(*position > 0);
                    figures.bytes += bytes;
                }
            }
        }
        reached.push(figures);
    }
    for chunk in uncarried.chunks(LOOKUP_CHUNK) {
        let stored = stored_bytes(connection, backend, chunk).await?;
        for (index, tenant, hash) in chunk {
            let bytes = stored.get(&(tenant.as_str().to_owned(), *hash));
            reached[*index].bytes += bytes.copied().unwrap_or(0);
        }
    }
    Ok(reached)
}

fn body_bytes(body: &str) -> i64 {
    i64::try_from(body.len()).unwrap_or(i64::MAX)
}

async fn stored_bytes(
    connection: &mut AnyConnection,
    backend: Backend,
    links: &[(usize, &TenantId, ChainHash)],
) -> Result<HashMap<(String, ChainHash), i64>> {
    let rows: Vec<LinkRow<'_>> = links
        .iter()
        .map(|(_, tenant, hash)| LinkRow {
            tenant: tenant.as_str(),
            hash,
        })
        .collect();
    let (text, arguments) = LINK_BYTES.bound(backend, AnyArguments::default(), &rows)?;
    let found = sqlx::query_with(text, arguments)
        .fetch_all(&mut *connection)
        .await?;
    let mut bytes = HashMap::with_capacity(found.len());
    for row in found {
        let key = (row.try_get("tenant")?, hash_column(&row, "hash")?);
        bytes.insert(key, row.try_get("bytes")?);
    }
    Ok(bytes)
}
