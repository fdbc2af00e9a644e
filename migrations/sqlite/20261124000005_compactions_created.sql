-- The process reads the newest compactions into memory when it starts.
create index compactions_created on compactions (created_at);
