-- What Condenser learns of a model's sizes beyond its window.

-- An upstream that refused input + max_tokens over the window counts the
-- output budget against it; compaction before sending must too. 0 or 1
-- (bigint: the one integer type the Any driver maps alike on both backends).
alter table model_limits add column counts_output bigint not null default 0;

-- Bytes-to-tokens rate of a model's requests, learned from the usage the
-- upstream reports, so estimates before sending match the upstream's count.
-- Kept apart from model_limits: a rate is often known before any window is.
create table model_calibrations (
    upstream text not null,
    model text not null,
    -- tokens per byte of request JSON, times one million (an integer, so both
    -- backends store it exactly)
    tokens_per_mbyte bigint not null,
    updated_at bigint not null,
    created_at bigint not null,
    primary key (upstream, model)
);
