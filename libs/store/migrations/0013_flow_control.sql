-- 0013: flow control (issue 27; docs/flow-control.md). Each task row carries what its
-- attempt's `StepScheduled` recorded (`orbit_engine::flow::Flow`):
--   priority           1 (first) ..= 5 (last), 3 when none was declared;
--   dispatch_rank      the claim order: queued at (ms) + (priority - 1) * the priority step,
--                      so a waiting task ages past fresher, more urgent ones (no starvation);
--   limited            whether the claim must count or take something for it (a concurrency
--                      key or a rate limit): such rows are claimed only by the flow claim;
--   concurrency_key    the scoped key it holds while claimed, with concurrency_limit;
--   rate_key           the rate-limit bucket its claim takes one start from;
--   rate_starts,       the bucket's limit when declared inline (starts per window, window
--   rate_period_ms     in ms); NULL for a named limit, read from rate_limits at the claim;
--   rate_name          the named limit (`rate_limit: {name}`), NULL for an inline one;
--   fair_key,          the scoped fair key (`fairness:`) and its weight (1..=1000): the
--   fair_weight        flow claim takes the rows of the key with the least running per
--                      weight first (docs/flow-control.md, "Fair queues");
--   flow               the whole Flow as JSON (NULL: none declared).
ALTER TABLE task_queue ADD COLUMN priority BIGINT NOT NULL DEFAULT 3;
ALTER TABLE task_queue ADD COLUMN dispatch_rank BIGINT NOT NULL DEFAULT 0;
ALTER TABLE task_queue ADD COLUMN limited BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE task_queue ADD COLUMN concurrency_key TEXT;
ALTER TABLE task_queue ADD COLUMN concurrency_limit BIGINT;
ALTER TABLE task_queue ADD COLUMN rate_key TEXT;
ALTER TABLE task_queue ADD COLUMN rate_starts BIGINT;
ALTER TABLE task_queue ADD COLUMN rate_period_ms BIGINT;
ALTER TABLE task_queue ADD COLUMN rate_name TEXT;
ALTER TABLE task_queue ADD COLUMN fair_key TEXT;
ALTER TABLE task_queue ADD COLUMN fair_weight BIGINT;
ALTER TABLE task_queue ADD COLUMN flow TEXT;
-- Rows queued before: priority 3, ranked as `libs/store/src/flow.rs` ranks them
-- (PRIORITY_STEP_MS = 60000).
UPDATE task_queue SET dispatch_rank = created_at + 120000 WHERE state = 'queued';
-- The claims: unlimited rows by rank (what every claim reads), limited rows apart.
DROP INDEX task_queue_queued;
CREATE INDEX task_queue_ready ON task_queue (task, dispatch_rank, id)
    WHERE state = 'queued' AND NOT limited;
CREATE INDEX task_queue_limited ON task_queue (task, dispatch_rank, id)
    WHERE state = 'queued' AND limited;
-- How many attempts hold a concurrency key now.
CREATE INDEX task_queue_running_key ON task_queue (concurrency_key)
    WHERE state = 'claimed' AND concurrency_key IS NOT NULL;
-- How many attempts of a fair key run now (the flow claim's share of each key).
CREATE INDEX task_queue_running_fair ON task_queue (fair_key)
    WHERE state = 'claimed' AND fair_key IS NOT NULL;
-- Server-wide named rate limits (`--rate-limit`, AdminService.SetRateLimit).
CREATE TABLE rate_limits (
    name TEXT PRIMARY KEY,
    max_starts BIGINT NOT NULL,
    period_ms BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
-- One row per rate-limit bucket in use: the starts taken in its current window (windows
-- of the limit's period, aligned to the epoch).
CREATE TABLE rate_buckets (
    bucket TEXT PRIMARY KEY,
    window_start BIGINT NOT NULL,
    used BIGINT NOT NULL
);
