-- What Condenser learns of a model's requests from the usage upstreams
-- report, beside the window model_limits holds: how many tokens a byte of
-- request makes, so estimates before sending match the upstream's count.
-- Kept apart from model_limits: a rate is often known before any window is.
create table model_calibrations (
    upstream text not null,
    model text not null,
    -- tokens per byte of request JSON, times one million (an integer, so
    -- both backends store it exactly)
    tokens_per_mbyte bigint not null,
    -- 1 once a request whose input plus max_tokens exceeded the window was
    -- answered: this upstream does not count the output budget against the
    -- window (llama.cpp). 0, the default, assumes it does, as most APIs do.
    ignores_output bigint not null default 0,
    updated_at bigint not null,
    created_at bigint not null,
    primary key (upstream, model)
);
