//! The operator views over a conversation with a branch and a compaction.

use super::{bodies, compaction, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::cli::render::{render_detail, render_list};
use condenser::conversation::ChainHash;
use condenser::domain::Trigger;
use condenser::store::StoreError;
use pretty_assertions::assert_eq;

both_backends!(the_admin_views_show_a_conversation_and_its_branch,);

async fn the_admin_views_show_a_conversation_and_its_branch(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let (original, edited) = (
        Chain::new("key-a", &bodies(10, None)),
        Chain::new("key-a", &bodies(10, Some(3))),
    );
    persist(&store, &original, 11).await;
    persist(&store, &edited, 11).await;
    store
        .insert_compaction(
            &original.tenant,
            &original.conversation(),
            &compaction(&original, 5, 0, Trigger::Overflow),
        )
        .await
        .expect("compaction");

    let list = store.list_conversations(10).await.expect("list");
    let root = original.messages[0].hash.to_hex();
    let id = original.conversation().to_hex();
    assert_eq!(id, edited.conversation().to_hex(), "an edit is a branch");
    let detail = store
        .conversation(&id[..8])
        .await
        .expect("show")
        .expect("found");
    let listed = render_list(&list);
    let shown = render_detail(&detail);

    assert_eq!(
        (
            list.len(),
            list[0].messages,
            list[0].branches,
            list[0].compactions
        ),
        (1, 18, 2, 1)
    );
    assert_eq!(list[0].label.as_deref(), Some("chat-1"));
    assert!(
        listed.contains(&id[..12]) && listed.contains("chat-1"),
        "{listed}"
    );
    assert_eq!(
        (detail.root.to_hex(), detail.messages.len()),
        (root.clone(), 19)
    );
    assert!(
        shown.contains("── compaction: 5 messages → summary 1.9 KB (overflow, gpt-4o) ──"),
        "{shown}"
    );
    let branch = &edited.messages[3].hash.to_hex()[..12];
    assert!(
        shown
            .lines()
            .any(|line| line.contains('↳') && line.contains(branch)),
        "{shown}"
    );
    assert!(matches!(
        store.conversation("abc").await,
        Err(StoreError::InvalidId(_))
    ));
    let leaf = edited.messages[10].hash.to_hex();
    assert_eq!(
        store.conversation(&leaf).await.expect("show"),
        None,
        "a message is not a conversation"
    );
    let never_stored = ChainHash::root(&original.tenant, b"never stored").to_hex();
    assert_eq!(store.conversation(&never_stored).await.expect("show"), None);
}
