-- Keys every instance of a fleet shares, generated once by whichever
-- instance starts first (the key of Condenser's compaction items).
create table if not exists server_keys (
    name text primary key,
    value text not null
);
