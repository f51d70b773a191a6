-- 0012: batch jobs (docs/evolving.md, "Batches"): one operator action applied by a
-- scheduler to many executions, under a lease, resumable from its cursor.
--   spec          the job's definition (selector, action, rate, reason), JSON;
--   state         RUNNING, COMPLETED, CANCELLED or FAILED;
--   request_id    the caller's id for an idempotent start (unique when set);
--   cursor_id     the last execution id begun, in execution-id order;
--   total         executions the selector matched at the start;
--   done          items with an outcome (= succeeded + failed + skipped);
--   lease_holder  the scheduler running it until lease_until.
CREATE TABLE batches (
    batch_id TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    request_id TEXT UNIQUE,
    cursor_id TEXT,
    total BIGINT NOT NULL DEFAULT 0,
    done BIGINT NOT NULL DEFAULT 0,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    skipped BIGINT NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    lease_holder TEXT,
    lease_until BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
-- The runners' look-up of a batch to lease.
CREATE INDEX batches_by_state ON batches (state, lease_until);
-- One row per execution a batch began: PENDING until its outcome is recorded.
CREATE TABLE batch_items (
    batch_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    code TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    seq BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, execution_id)
);
-- A batch's walk over its workflow's executions in id order.
CREATE INDEX executions_by_workflow_id ON executions (workflow, execution_id);
