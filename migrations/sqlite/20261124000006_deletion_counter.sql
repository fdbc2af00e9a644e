-- Every process keeps in memory which messages and compactions are stored.
-- Postgres tells the instances of a deletion by notification; SQLite has
-- none, so these triggers count deletions and a running server watches the
-- count: rows deleted by a `condenser` subcommand or by hand, on the same
-- file, are forgotten by the server too.
create table store_deletions (
    id integer primary key check (id = 1),
    deletions integer not null
);
insert into store_deletions (id, deletions) values (1, 0);

create trigger messages_deleted_count after delete on messages
begin
    update store_deletions set deletions = deletions + 1 where id = 1;
end;

create trigger compactions_deleted_count after delete on compactions
begin
    update store_deletions set deletions = deletions + 1 where id = 1;
end;
