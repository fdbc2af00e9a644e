-- An instance starting up reads the newest compactions into memory, and
-- catches up on the last minute after a lost notification connection.
create index compactions_created on compactions (created_at);
