-- 0016: debounce and singleton starts (`dedupe:`, issue 27 item 6; docs/flow-control.md,
-- "Debounce and singleton starts"; libs/store/src/dedupe.rs).
--
-- One row per (workflow, key) in use, claimed by one INSERT ... ON CONFLICT DO UPDATE:
--   keep = 'first': the execution made by the first start of the window; the row is live
--                   while window_end_at > now, then the sweeper deletes it;
--   keep = 'last':  a debounce not fired yet: execution_id is reserved (nothing exists
--                   under it), the columns hold the latest start, window_end_at is the fire
--                   time (never past first_at + 10 windows); the scheduler moves the row to
--                   start_debounce_fires when it is due.
CREATE TABLE start_dedupe (
    workflow TEXT NOT NULL,
    dedupe_key TEXT NOT NULL,
    keep TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    first_at BIGINT NOT NULL,
    window_end_at BIGINT NOT NULL,
    version TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    input TEXT NOT NULL,
    priority BIGINT NOT NULL,
    PRIMARY KEY (workflow, dedupe_key)
);
-- Due debounces (keep = 'last') and the sweep of ended windows (keep = 'first').
CREATE INDEX start_dedupe_due ON start_dedupe (keep, window_end_at);
-- DescribeExecution of a reserved id.
CREATE INDEX start_dedupe_execution ON start_dedupe (execution_id);
-- Debounces due, until their execution is started (the owner's start is idempotent by id,
-- so a fire retried after a crash starts nothing twice); attempt_at is the claim's lease.
CREATE TABLE start_debounce_fires (
    execution_id TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    version TEXT NOT NULL,
    definition_hash TEXT NOT NULL,
    input TEXT NOT NULL,
    priority BIGINT NOT NULL,
    fire_at BIGINT NOT NULL,
    attempt_at BIGINT NOT NULL
);
CREATE INDEX start_debounce_fires_attempt ON start_debounce_fires (attempt_at);
