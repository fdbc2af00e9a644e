-- A context window learned from an overflow error is shared between
-- tenants, instances and restarts only once it is agreed: a second tenant's
-- overflow stated it, or another tenant's request that fits it was
-- answered. Rows written before this rule was kept (0) are ignored when
-- read: one tenant alone may have taught them.
alter table model_limits add column corroborated bigint not null default 0;
