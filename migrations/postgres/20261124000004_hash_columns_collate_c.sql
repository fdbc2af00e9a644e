-- Tenants, chain hashes and request ids are lowercase hex (or uuid) text:
-- compared byte by byte, never by a language's rules. Under the database's
-- default collation (en_US.UTF-8, or even C.UTF-8) every index comparison
-- of these keys went through strcoll; with collate "C" it is a memcmp, for
-- the primary keys the write path probes on every insert and the lookups
-- behind compaction and the operator page (and a hash-prefix LIKE can use
-- the index). Rebuilds the indexes once; the rows are not rewritten.

alter table messages
    alter column tenant type text collate "C",
    alter column hash type text collate "C",
    alter column parent type text collate "C";

alter table compactions
    alter column tenant type text collate "C",
    alter column prefix_hash type text collate "C",
    alter column base_hash type text collate "C";

alter table leases
    alter column tenant type text collate "C",
    alter column key_hash type text collate "C";

alter table requests
    alter column tenant type text collate "C",
    alter column root type text collate "C",
    alter column id type text collate "C",
    alter column head type text collate "C";

alter table conversations
    alter column tenant type text collate "C",
    alter column root type text collate "C",
    alter column head type text collate "C";
