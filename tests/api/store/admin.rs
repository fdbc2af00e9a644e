//! The operator views over a conversation with a branch and a compaction.

use super::{bodies, compaction, persist, Chain};
use crate::helpers::db::{both_backends, TestBackend, TestDb};
use condenser::cli::render::{render_detail, render_list};
use condenser::conversation::ChainHash;
use condenser::domain::Trigger;
use condenser::store::StoreError;
use pretty_assertions::assert_eq;

both_backends!(
    the_admin_views_show_a_conversation_and_its_branch,
    the_figures_kept_on_write_match_a_walk_of_each_conversation,
    show_reads_the_newest_positions_and_a_page_of_each_list,
);

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

/// What `list` shows, against what a walk of every message counts.
async fn the_figures_kept_on_write_match_a_walk_of_each_conversation(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let original = Chain::new("key-a", &bodies(12, None));
    let edited = Chain::new("key-a", &bodies(12, Some(5)));
    // Another chat under the same system prompt: it reaches the shared
    // root, stored by the first.
    let sibling = Chain::new("key-a", &bodies(4, Some(1)));
    persist(&store, &original, 5).await;
    persist(&store, &original, 13).await;
    persist(&store, &edited, 9).await;
    persist(&store, &sibling, 5).await;
    persist(&store, &edited, 13).await;
    for (chain, prefix) in [(&original, 6), (&edited, 10), (&sibling, 2)] {
        let compaction = compaction(chain, prefix, 0, Trigger::Proactive);
        store
            .insert_compaction(&chain.tenant, &chain.conversation(), &compaction)
            .await
            .expect("compaction");
    }

    let listed = store.list_conversations(10).await.expect("list");
    assert_eq!(listed.len(), 2);
    for summary in &listed {
        let walked = store
            .conversation_tree(summary.tenant.clone(), summary.conversation)
            .await
            .expect("tree");
        assert_eq!(
            (
                summary.messages,
                summary.bytes,
                summary.branches,
                summary.compactions
            ),
            (
                walked.figures.messages,
                walked.figures.bytes,
                walked.figures.branches,
                walked.figures.compactions
            ),
            "{}",
            summary.conversation
        );
    }
    let by_id = |chain: &Chain| {
        listed
            .iter()
            .find(|s| s.conversation == chain.conversation())
            .expect("listed")
            .clone()
    };
    assert_eq!(
        (by_id(&original).messages, by_id(&original).branches),
        (12 + 8, 2)
    );
    assert_eq!(
        (by_id(&sibling).messages, by_id(&sibling).compactions),
        (4, 1)
    );
}

async fn show_reads_the_newest_positions_and_a_page_of_each_list(backend: TestBackend) {
    let db = TestDb::new(backend).await;
    let store = db.store().await;
    let chain = Chain::new("key-a", &bodies(30, None));
    persist(&store, &chain, 31).await;
    for prefix in [5, 10, 15, 20, 25] {
        let mut made = compaction(&chain, prefix, prefix - 5, Trigger::Overflow);
        made.created_at_ms += i64::try_from(prefix).expect("small");
        store
            .insert_compaction(&chain.tenant, &chain.conversation(), &made)
            .await
            .expect("compaction");
    }
    let id = chain.conversation().to_hex();
    let query = condenser::store::DetailQuery {
        positions: 8,
        limit: 2,
        offset: 2,
    };
    let detail = store
        .conversation_page(&id[..10], &query)
        .await
        .expect("show")
        .expect("found");

    let positions: Vec<i64> = detail.messages.iter().map(|m| m.position).collect();
    assert_eq!(positions, (23..=30).collect::<Vec<_>>());
    let marked: Vec<i64> = detail.compactions.iter().map(|c| c.prefix_len).collect();
    assert_eq!(marked, [25], "the compactions among the messages shown");
    let page: Vec<i64> = detail
        .newest_compactions
        .items
        .iter()
        .map(|c| c.prefix_len)
        .collect();
    assert_eq!(
        (page, detail.newest_compactions.total),
        (vec![15, 10], 5),
        "the third and fourth newest, of five"
    );
    assert_eq!((detail.figures.messages, detail.figures.branches), (30, 1));
    let shown = render_detail(&detail);
    assert!(
        shown.contains("(positions 23 and later; --messages N shows more)"),
        "{shown}"
    );
    assert!(
        shown.contains("compactions 3–4 of 5, newest first (--page 3: older)"),
        "{shown}"
    );
}
