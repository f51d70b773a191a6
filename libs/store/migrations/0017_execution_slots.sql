-- 0017: workflow-level concurrency slots (issue 27; docs/flow-control.md, "Workflow
-- concurrency"; libs/store/src/slots.rs). One row per (scoped key, execution) that holds a
-- slot (`held`) or waits for one; `ticket` is the start order in which waiters are granted.
-- A commit that touches a key locks it first (PostgreSQL: pg_advisory_xact_lock of the key's
-- hash; SQLite: the single writer), so at most the limit of executions hold a key. Rows
-- are deleted when their execution closes; workflows without `concurrency:` never touch
-- the table.
CREATE TABLE execution_slots (
    ticket BIGSERIAL PRIMARY KEY,
    slot_key TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    held BOOLEAN NOT NULL,
    slot_limit BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (slot_key, execution_id)
);
