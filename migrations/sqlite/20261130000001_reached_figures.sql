-- The operator's views read what a conversation reaches from its list row
-- and from indexes, never by walking its messages: a conversation of
-- 100,000 messages took seconds a walk, and its figures minutes.
--
-- reached_messages and reached_bytes: the messages its heads reach (the
-- root not counted) and their bodies' bytes (the root counted), kept by
-- each message write from here on (store/write/conversations.rs).
alter table conversations add column reached_messages bigint not null default 0;
alter table conversations add column reached_bytes bigint not null default 0;

-- A compaction belongs to the conversation whose request made it, so a
-- conversation's compactions are an index range, newest first.
alter table compactions add column conversation text;
create index compactions_conversation on compactions (tenant, conversation, created_at);

-- A head's position, so the newest part of a conversation's tree starts
-- from its heads there without reading their messages.
alter table conversation_heads add column position bigint;
update conversation_heads set position = m.position
from messages m
where m.tenant = conversation_heads.tenant and m.hash = conversation_heads.head;

-- What each stored conversation reaches, walked once here: every head and
-- its ancestors, each message once per conversation.
create temp table reach (
    tenant text not null,
    conversation text not null,
    hash text not null,
    primary key (tenant, conversation, hash)
);

with recursive up(tenant, conversation, hash) as (
    select tenant, conversation, head from conversation_heads
    union
    select u.tenant, u.conversation, m.parent
    from messages m join up u on m.tenant = u.tenant and m.hash = u.hash
    where m.parent is not null)
insert into reach (tenant, conversation, hash)
select tenant, conversation, hash from up;

create index reach_hash on reach (tenant, hash);

update conversations set reached_messages = f.messages, reached_bytes = f.bytes
from (select r.tenant, r.conversation,
        sum(case when m.position > 0 then 1 else 0 end) as messages,
        coalesce(sum(m.bytes), 0) as bytes
    from reach r join messages m on m.tenant = r.tenant and m.hash = r.hash
    group by r.tenant, r.conversation) f
where conversations.tenant = f.tenant and conversations.conversation = f.conversation;

-- A compaction stored before: the conversation that reaches its prefix
-- (the first by id when several share it).
update compactions set conversation = f.conversation
from (select tenant, hash, min(conversation) as conversation from reach
    group by tenant, hash) f
where compactions.tenant = f.tenant and compactions.prefix_hash = f.hash;

drop table reach;
