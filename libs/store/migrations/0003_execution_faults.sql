-- 0003: poison quarantine. One row per execution whose processing failed (a caught panic, an
-- exceeded budget, or an attempt the owner process did not survive). Rows exist only on the
-- failure and recovery paths: a healthy execution has none, so the hot path never writes here.
--
-- `failures` counts attempts at applying the execution's pending inbox entries that did not
-- finish; `inbox_seq` is the first pending entry then (a new seq means progress was made and
-- the count starts again). `parked_at` set = the execution is parked: its projection status is
-- SUSPENDED (the previous one kept in `resume_status`), the entry at `inbox_seq` stays pending
-- (not applied, not deleted) and the owner skips its entries until an operator resumes or
-- terminates it.
CREATE TABLE execution_faults (
    execution_id TEXT PRIMARY KEY,
    inbox_seq BIGINT,
    failures BIGINT NOT NULL,
    reason TEXT NOT NULL,
    parked_at BIGINT,
    resume_status TEXT,
    updated_at BIGINT NOT NULL
);
