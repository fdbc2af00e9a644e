-- Request rows keyed by what every statement reads them by.
--
-- requests was a rowid table with a primary key (tenant, root, id) that no
-- statement reads by, and an index (tenant, conversation, id) that every
-- one does (a conversation's chart, its count, its pruning, its
-- deletion): each request's row went into four b-trees, and its pruning
-- took it out of four. Keyed by (tenant, conversation, id) without a
-- rowid, the row is stored once, in the order those statements walk it;
-- with requests_created, two b-trees a row. ids are uuid v7, unique on
-- their own, so the new key is unique wherever the old one was.
create table requests_by_conversation (
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
    conversation text not null default '',
    primary key (tenant, conversation, id)
) without rowid;

insert into requests_by_conversation (tenant, root, id, head, messages, model, upstream,
    status, sent_bytes, estimated_tokens, upstream_input_tokens, window_tokens,
    compacted_messages, compactions, overflows, compaction_error, degraded, created_at,
    conversation)
select tenant, root, id, head, messages, model, upstream,
    status, sent_bytes, estimated_tokens, upstream_input_tokens, window_tokens,
    compacted_messages, compactions, overflows, compaction_error, degraded, created_at,
    conversation
from requests;

-- Its indexes (requests_created, requests_conversation) go with it.
drop table requests;
alter table requests_by_conversation rename to requests;

-- The overview reads a recent period across conversations.
create index requests_created on requests (created_at);
