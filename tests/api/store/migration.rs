//! Upgrading a database the previous release wrote (conversations keyed by
//! their root): every message and compaction is reached by a conversation
//! afterwards, sibling chats are conversations of their own, and deleting
//! every conversation leaves no message behind.

use super::{bodies, compaction, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::conversation::{ConversationId, TenantId};
use condenser::domain::Trigger;
use condenser::store::{NewMessage, Store, StoreOptions};
use pretty_assertions::assert_eq;
use sqlx::AnyPool;
use std::collections::BTreeSet;

both_backends!(an_upgraded_database_keeps_every_message_and_compaction_reachable,);

/// This release's first migration: those before it are the previous
/// release's schema.
const FIRST_OF_THIS_RELEASE: &str = "20261128000001";

/// A database at the previous release's schema: its migrations only,
/// copied apart (same files, so the same checksums the full run checks).
async fn previous_release(db: &TestDb, backend: TestBackend) -> AnyPool {
    let folder = match backend {
        TestBackend::Sqlite => "migrations/sqlite",
        TestBackend::Postgres => "migrations/postgres",
    };
    let old = tempfile::tempdir().expect("temporary directory");
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    for entry in std::fs::read_dir(source).expect("migrations") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if name.as_str() < FIRST_OF_THIS_RELEASE {
            std::fs::copy(&path, old.path().join(&name)).expect("copied");
        }
    }
    // Creates the SQLite file; migrates nothing.
    Store::connect(&db.url, &StoreOptions::default())
        .await
        .expect("connects");
    let pool = db.pool().await;
    let migrator = sqlx::migrate::Migrator::new(old.path())
        .await
        .expect("old migrations");
    migrator.run(&pool).await.expect("the previous schema");
    pool
}

/// A message row as the previous release wrote it.
async fn insert(pool: &AnyPool, tenant: &TenantId, label: Option<&str>, message: &NewMessage) {
    sqlx::query(
        "insert into messages (tenant, hash, parent, position, role, body, bytes, \
         token_estimate, label, created_at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         on conflict (tenant, hash) do nothing",
    )
    .bind(tenant.as_str())
    .bind(message.hash.to_hex())
    .bind(message.parent.map(|p| p.to_hex()))
    .bind(message.position)
    .bind(message.role.as_str())
    .bind(message.body.as_str())
    .bind(message.body.len() as i64)
    .bind(message.token_estimate)
    .bind(label)
    .bind(1_000 + message.position)
    .execute(pool)
    .await
    .expect("old message row");
}

/// The previous release's figures: one request row per root, and the
/// root's list row.
async fn old_figures(pool: &AnyPool, chain: &Chain, len: usize, label: &str) {
    let (root, head) = (
        chain.messages[0].hash.to_hex(),
        chain.messages[len - 1].hash.to_hex(),
    );
    sqlx::query(
        "insert into requests (tenant, root, id, head, messages, model, upstream, status, \
         sent_bytes, estimated_tokens, upstream_input_tokens, window_tokens, \
         compacted_messages, compactions, overflows, compaction_error, degraded, created_at) \
         values ($1, $2, $3, $4, $5, 'gpt-4o', 'openai', 200, 10, 10, 9, 128000, null, 0, 0, \
         null, 0, $6)",
    )
    .bind(chain.tenant.as_str())
    .bind(&root)
    .bind(uuid::Uuid::now_v7().to_string())
    .bind(&head)
    .bind(len as i64 - 1)
    .bind(5_000 + len as i64)
    .execute(pool)
    .await
    .expect("old request row");
    sqlx::query(
        "insert into conversations (tenant, root, label, head, messages, branches, requests, \
         compactions, tokens, window_tokens, model, pruned_at, last_activity, created_at) \
         values ($1, $2, $3, $4, $5, 1, 1, 0, 9, 128000, 'gpt-4o', null, 5000, 1000) \
         on conflict (tenant, root) do update set branches = conversations.branches + 1",
    )
    .bind(chain.tenant.as_str())
    .bind(&root)
    .bind(label)
    .bind(&head)
    .bind(len as i64 - 1)
    .execute(pool)
    .await
    .expect("old list row");
}

/// What the previous release stored: two chats under one system prompt
/// (one with an edit and a compaction), a request with no message, and
/// another tenant's chat with a gap its lost write left.
async fn write_previous_release(pool: &AnyPool) -> Vec<(TenantId, ConversationId)> {
    let chat_a = Chain::new("key-a", &bodies(6, None));
    let edited_a = Chain::new("key-a", &bodies(6, Some(4)));
    let chat_b = Chain::new("key-a", &bodies(3, Some(1)));
    for (chain, label) in [
        (&chat_a, "chat-a"),
        (&edited_a, "chat-a"),
        (&chat_b, "chat-b"),
    ] {
        for message in &chain.messages {
            insert(pool, &chain.tenant, Some(label), message).await;
        }
        old_figures(pool, chain, chain.messages.len(), label).await;
    }
    let empty = Chain::new("key-a", &[]);
    let bare = NewMessage {
        hash: condenser::conversation::ChainHash::root(&empty.tenant, b"another prompt"),
        ..empty.messages[0].clone()
    };
    insert(pool, &empty.tenant, None, &bare).await;
    let gapped = Chain::new("key-b", &bodies(5, None));
    for message in gapped.messages.iter().filter(|m| m.position != 2) {
        insert(pool, &gapped.tenant, None, message).await;
    }
    let summary = compaction(&chat_a, 3, 0, Trigger::Overflow);
    sqlx::query(
        "insert into compactions (tenant, prefix_hash, base_hash, prefix_len, summary, \
         summary_tokens, messages_compacted, tokens_before, tokens_after, model, trigger, \
         trims, duration_ms, created_at) \
         values ($1, $2, $3, 3, 'summary', 5, 3, 100, 10, 'gpt-4o', 'overflow', '[]', 1, 1)",
    )
    .bind(chat_a.tenant.as_str())
    .bind(summary.prefix_hash.to_hex())
    .bind(summary.base_hash.to_hex())
    .execute(pool)
    .await
    .expect("old compaction");
    let top_of_gap = ConversationId::first_turn(&[gapped.messages[3].hash]);
    vec![
        (chat_a.tenant.clone(), chat_a.conversation()),
        (chat_b.tenant.clone(), chat_b.conversation()),
        (
            empty.tenant.clone(),
            ConversationId::first_turn(&[bare.hash]),
        ),
        (gapped.tenant.clone(), gapped.conversation()),
        (gapped.tenant.clone(), top_of_gap),
    ]
}

async fn all(pool: &AnyPool, sql: &str) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>(sql)
        .fetch_all(pool)
        .await
        .expect("rows")
        .into_iter()
        .collect()
}

async fn an_upgraded_database_keeps_every_message_and_compaction_reachable(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let pool = previous_release(&db, backend).await;
    let expected = write_previous_release(&pool).await;
    let messages = all(&pool, "select hash from messages").await;

    let store = db.store().await;

    let listed = store.list_conversations(100).await.expect("list");
    let ids: BTreeSet<(String, String)> = listed
        .iter()
        .map(|c| (c.tenant.as_str().to_owned(), c.conversation.to_hex()))
        .collect();
    let wanted: BTreeSet<(String, String)> = expected
        .iter()
        .map(|(tenant, id)| (tenant.as_str().to_owned(), id.to_hex()))
        .collect();
    assert_eq!(ids, wanted, "one conversation per chat, its edit a branch");
    let mut reached = BTreeSet::new();
    let mut compactions = 0;
    for conversation in &listed {
        let detail = store
            .conversation_tree(conversation.tenant.clone(), conversation.conversation)
            .await
            .expect("detail");
        reached.extend(detail.messages.iter().map(|m| m.hash.to_hex()));
        compactions += detail.compactions.len();
    }
    assert_eq!(reached, messages, "every message is some conversation's");
    assert_eq!(compactions, 1, "the compaction is its chat's");
    let by_id = |id: &ConversationId| {
        listed
            .iter()
            .find(|c| c.conversation == *id)
            .expect("listed")
    };
    let (chat_a, chat_b) = (&expected[0].1, &expected[1].1);
    assert_eq!(
        (
            by_id(chat_a).label.as_deref(),
            by_id(chat_a).branches,
            by_id(chat_a).compactions
        ),
        (Some("chat-a"), 2, 1)
    );
    assert_eq!(by_id(chat_b).label.as_deref(), Some("chat-b"));
    let figures = all(&pool, "select conversation from requests").await;
    assert_eq!(
        figures,
        [chat_a.to_hex(), chat_b.to_hex()].into_iter().collect(),
        "the old figures belong to their chats"
    );

    for (tenant, conversation) in &expected {
        store
            .delete_conversation(tenant, conversation)
            .await
            .expect("deleted");
    }
    for table in [
        "messages",
        "compactions",
        "conversation_heads",
        "conversations",
        "requests",
    ] {
        let count = db.count(&format!("select count(*) from {table}")).await;
        assert_eq!(count, 0, "{table} after deleting every conversation");
    }
}
