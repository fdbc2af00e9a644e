-- Condenser's schema, SQLite flavour (the zero-setup single-instance store).
--
-- The same queries run on Postgres and SQLite through sqlx's Any driver, so
-- both schemas stick to the types that driver maps on both sides: times are
-- unix milliseconds in bigint, chain hashes are lowercase hex text, JSON is
-- text. There are no foreign keys: a message batch is written alongside the
-- upstream call, so a compaction may be committed before the messages it
-- covers, and nothing here is ever deleted by cascade.

-- Every message a client sent, stored exactly once per tenant (invariant 7).
-- The key is the content-addressed chain hash, so replays and concurrent
-- instances collapse onto one row with `on conflict do nothing`. Position 0 is
-- the conversation root: the system prompt, parent null, hash h_0.
create table messages (
    tenant text not null,
    hash text not null,
    parent text,
    position bigint not null,
    role text not null,
    -- the message JSON as the client first sent it; text so
    -- the bytes are kept as they were, not re-normalized
    body text not null,
    bytes bigint not null,
    token_estimate bigint not null,
    -- x-conversation-id, for people only: it never changes identity
    label text,
    created_at bigint not null,
    -- tenant first: every query is scoped to one tenant (invariant 8)
    primary key (tenant, hash)
);

-- Walking a conversation down from its root (admin views, branch counts).
create index messages_tenant_parent on messages (tenant, parent);

-- Listing conversations starts from the roots, a small fraction of the rows.
create index messages_roots on messages (tenant, hash) where position = 0;

-- A compaction records that messages 1..=prefix_len of the chain ending at
-- prefix_hash are summarized. Originals are never deleted (invariant 7); the
-- row is written in one statement so a crash leaves none or all of it.
create table compactions (
    tenant text not null,
    -- h_c: hash of the last compacted message
    prefix_hash text not null,
    -- the compaction this one replaces, or the root h_0: the single-flight key
    base_hash text not null,
    prefix_len bigint not null,
    -- the raw summary text, without the marker wrapper, so wrappers never nest
    summary text not null,
    summary_tokens bigint not null,
    messages_compacted bigint not null,
    tokens_before bigint not null,
    tokens_after bigint not null,
    model text not null,
    -- why it ran: overflow, threshold, ...
    trigger text not null,
    -- JSON array of trimmed tool results:
    -- [{"message_hash", "replacement", "original_bytes", "kept_bytes"}]
    trims text not null default '[]',
    duration_ms bigint not null,
    created_at bigint not null,
    primary key (tenant, prefix_hash)
);

-- One summarizer per prefix across instances: a row with an expiry, taken
-- with a conditional upsert. A dead holder's lease simply expires.
create table leases (
    tenant text not null,
    key_hash text not null,
    holder text not null,
    expires_at bigint not null,
    created_at bigint not null,
    primary key (tenant, key_hash)
);

-- Context windows learned from overflow errors and usage, per upstream and
-- model; shared by instances so one learns for all.
create table model_limits (
    upstream text not null,
    model text not null,
    context_window bigint not null,
    -- where the number came from: config, overflow error, usage, ...
    source text not null,
    updated_at bigint not null,
    created_at bigint not null,
    primary key (upstream, model)
);
