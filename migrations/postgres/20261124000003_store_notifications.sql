-- Every instance keeps the stored compactions in memory, so a request that
-- needs no compaction is forwarded without a database round trip. These
-- triggers tell the other instances what changed, on the condenser_store
-- channel, whoever wrote it (an instance, `condenser` subcommands, an
-- operator's SQL). Notifications are sent at commit, never for a rolled
-- back write.

create function condenser_notify_compaction() returns trigger
language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        perform pg_notify('condenser_store', 'compacted ' || new.tenant || ' ' || new.prefix_hash);
    else
        perform pg_notify('condenser_store', 'compaction-deleted ' || old.prefix_hash);
    end if;
    return null;
end $$;

create trigger compactions_notify after insert or delete on compactions
    for each row execute function condenser_notify_compaction();

-- One notification per statement: what was stored may be gone, and each
-- instance forgets which links it knew were stored.
create function condenser_notify_messages_deleted() returns trigger
language plpgsql as $$
begin
    perform pg_notify('condenser_store', 'messages-deleted');
    return null;
end $$;

create trigger messages_deleted_notify after delete on messages
    for each statement execute function condenser_notify_messages_deleted();
