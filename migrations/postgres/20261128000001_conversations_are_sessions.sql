-- A conversation is one session a user had, not the tree under a
-- (tenant, system prompt) root: two chats that share a system prompt are
-- two conversations, listed, kept and deleted apart. Messages stay
-- content-addressed and shared; a conversation is the heads its requests
-- ended at, and its messages are what those heads reach.
--
-- The previous release kept no session: each stored leaf's conversation is
-- its first message after the system part (its ancestor at position 1),
-- which is what a request without a session id is named by now. A root
-- with no message is a conversation of its own; the top of a subtree whose
-- parent was never stored (a write lost before) names that subtree, so
-- everything stored is reachable from some conversation.

-- Each message's conversation, as the old rows allow.
create temporary table message_conversations (
    tenant text collate "C" not null,
    hash text collate "C" not null,
    conversation text collate "C" not null,
    primary key (tenant, hash)
);

with recursive down(tenant, conversation, hash) as (
    select m.tenant, m.hash, m.hash from messages m
    where m.position <= 1
       or not exists (select 1 from messages p where p.tenant = m.tenant and p.hash = m.parent)
    union all
    select c.tenant, d.conversation, c.hash
    from messages c join down d on c.tenant = d.tenant and c.parent = d.hash
    where c.position > 1)
insert into message_conversations (tenant, hash, conversation)
select tenant, hash, conversation from down where true
on conflict (tenant, hash) do nothing;

-- The heads each conversation's requests ended at; a message write records
-- its request's head in the transaction that stores its messages.
create table conversation_heads (
    tenant text collate "C" not null,
    conversation text collate "C" not null,
    head text collate "C" not null,
    created_at bigint not null,
    primary key (tenant, conversation, head)
);

-- Whether another conversation's head is among a conversation's messages
-- (a deletion keeps those).
create index conversation_heads_head on conversation_heads (tenant, head);

insert into conversation_heads (tenant, conversation, head, created_at)
select mc.tenant, mc.conversation, mc.hash, m.created_at
from message_conversations mc join messages m on m.tenant = mc.tenant and m.hash = mc.hash
where not exists (select 1 from messages c where c.tenant = mc.tenant and c.parent = mc.hash);

-- Request figures belong to a conversation.
alter table requests add column conversation text collate "C" not null default '';
update requests set conversation = coalesce(
    (select mc.conversation from message_conversations mc
     where mc.tenant = requests.tenant and mc.hash = requests.head),
    requests.root);
create index requests_conversation on requests (tenant, conversation, id);

-- One list row per conversation, keyed by it; root stays as a column.
create table conversations_by_session (
    tenant text collate "C" not null,
    -- a session's digest, or the first message's chain hash
    conversation text collate "C" not null,
    -- the system prompt's chain hash, shared with sibling conversations
    root text collate "C" not null,
    -- x-conversation-id or a client's session header, for people
    label text,
    -- newest message of the newest request, and that request's length
    head text collate "C" not null,
    messages bigint not null,
    -- branches taken: 1 plus each request that did not extend the previous
    -- one (a rewind, an edit, a regeneration)
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
    primary key (tenant, conversation)
);

-- Each figure is one aggregate per conversation, joined: one pass over the
-- messages, whatever their number.
insert into conversations_by_session (tenant, conversation, root, label, head, messages,
    branches, requests, compactions, tokens, window_tokens, model, pruned_at,
    last_activity, created_at)
select f.tenant, f.conversation, coalesce(t.parent, f.conversation), f.label, h.head,
    f.messages, b.branches, coalesce(q.requests, 0), coalesce(k.compactions, 0),
    coalesce(w.upstream_input_tokens, w.estimated_tokens, 0), w.window_tokens,
    coalesce(w.model, ''), null,
    case when coalesce(q.last_request, 0) > f.last_message
        then q.last_request else f.last_message end,
    f.first_message
from (select mc.tenant, mc.conversation, min(m.label) as label,
        max(m.position) as messages, max(m.created_at) as last_message,
        min(m.created_at) as first_message
    from message_conversations mc join messages m on m.tenant = mc.tenant and m.hash = mc.hash
    group by mc.tenant, mc.conversation) f
join (select tenant, conversation, count(*) as branches from conversation_heads
    group by tenant, conversation) b
    on b.tenant = f.tenant and b.conversation = f.conversation
join (select tenant, conversation, head,
        row_number() over (partition by tenant, conversation
            order by created_at desc, head) as n
    from conversation_heads) h
    on h.tenant = f.tenant and h.conversation = f.conversation and h.n = 1
left join messages t on t.tenant = f.tenant and t.hash = f.conversation and t.position = 1
left join (select tenant, conversation, count(*) as requests, max(created_at) as last_request
    from requests group by tenant, conversation) q
    on q.tenant = f.tenant and q.conversation = f.conversation
left join (select mc.tenant, mc.conversation, count(*) as compactions
    from compactions c join message_conversations mc
        on mc.tenant = c.tenant and mc.hash = c.prefix_hash
    group by mc.tenant, mc.conversation) k
    on k.tenant = f.tenant and k.conversation = f.conversation
left join (select tenant, conversation, estimated_tokens, upstream_input_tokens,
        window_tokens, model,
        row_number() over (partition by tenant, conversation order by id desc) as n
    from requests) w
    on w.tenant = f.tenant and w.conversation = f.conversation and w.n = 1;

drop table conversations;
alter table conversations_by_session rename to conversations;

-- One index per sortable column of the list, and one for retention.
create index conversations_activity on conversations (last_activity);
create index conversations_messages on conversations (messages);
create index conversations_compactions on conversations (compactions);
create index conversations_tokens on conversations (tokens);
create index conversations_label on conversations (label);
-- The list's filter, and the CLI, by a conversation id prefix (tenant
-- prefixes use the primary key).
create index conversations_conversation on conversations (conversation);

drop table message_conversations;
