-- What the operator page lists and draws, and what retention walks.
--
-- requests: one row per chat request that went through the pipeline,
-- written in the background after the response (never on the request path).
-- A conversation's chart, the sawtooth of tokens the upstream saw, is drawn
-- from it. Bounded: the newest rows of each conversation are kept (see
-- store/requests.rs), and retention deletes them with their conversation.
create table requests (
    tenant text not null,
    -- h_0 of the conversation: its root message
    root text not null,
    -- uuid v7: time-ordered and unique across instances
    id text not null,
    -- hash of the request's newest message
    head text not null,
    -- messages in the request, the system part not counted
    messages bigint not null,
    model text not null,
    upstream text not null,
    status bigint not null,
    -- the body last sent upstream (rewritten when a summary applied)
    sent_bytes bigint not null,
    -- its tokens as estimated before sending
    estimated_tokens bigint not null,
    -- its tokens as the upstream reported in usage, when it did
    upstream_input_tokens bigint,
    -- the model's known window at the time, if one was known
    window_tokens bigint,
    -- a stored summary stood for messages 1..=compacted_messages
    compacted_messages bigint,
    -- compactions performed while serving this request
    compactions bigint not null,
    overflows bigint not null,
    -- x-condenser-compaction-error, when a compaction failed
    compaction_error text,
    -- 1 when forwarded without storage (degraded)
    degraded bigint not null,
    created_at bigint not null,
    primary key (tenant, root, id)
);

-- The overview reads a recent period across conversations.
create index requests_created on requests (created_at);

-- One row per conversation tree, kept up to date by each recorded request,
-- so listing 100,000 conversations is an indexed, paged read rather than a
-- walk of every message.
create table conversations (
    tenant text not null,
    root text not null,
    -- x-conversation-id or a client's session header, for people only
    label text,
    -- newest message of the newest request, and that request's length
    head text not null,
    messages bigint not null,
    -- branches taken: 1 plus each request that did not extend the previous
    -- one (an edit, a regeneration, aider's dropped reminder)
    branches bigint not null,
    requests bigint not null,
    compactions bigint not null,
    -- tokens of the newest request (the upstream's count when reported)
    tokens bigint not null,
    window_tokens bigint,
    model text not null,
    -- when dead-end branches were last pruned
    pruned_at bigint,
    last_activity bigint not null,
    created_at bigint not null,
    primary key (tenant, root)
);

-- One index per sortable column of the list, and one for retention.
create index conversations_activity on conversations (last_activity);
create index conversations_messages on conversations (messages);
create index conversations_compactions on conversations (compactions);
create index conversations_tokens on conversations (tokens);
create index conversations_label on conversations (label);
-- The list's filter by a conversation hash prefix (tenant prefixes use the
-- primary key).
create index conversations_root on conversations (root);

-- Conversations stored before this table existed, so retention and the list
-- see them too.
with recursive tree(tenant, root, hash) as (
    select tenant, hash, hash from messages where position = 0
    union all
    select m.tenant, t.root, m.hash
    from messages m join tree t on m.tenant = t.tenant and m.parent = t.hash)
insert into conversations (tenant, root, label, head, messages, branches, requests,
    compactions, tokens, window_tokens, model, pruned_at, last_activity, created_at)
select t.tenant, t.root, min(m.label), t.root, max(m.position),
    cast(sum(case when exists (select 1 from messages c where c.tenant = t.tenant and c.parent = t.hash)
        then 0 else 1 end) as bigint),
    0,
    (select count(*)
        from compactions k join tree kt on k.tenant = kt.tenant and k.prefix_hash = kt.hash
        where kt.tenant = t.tenant and kt.root = t.root),
    0, null, '', null, max(m.created_at), min(m.created_at)
from tree t join messages m on m.tenant = t.tenant and m.hash = t.hash
group by t.tenant, t.root;
