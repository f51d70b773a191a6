-- 0015: worker pools and sticky workers (issue 27; docs/flow-control.md, "Worker pools and
-- sticky workers"). Each task row carries what its attempt's `StepScheduled.flow` recorded:
--   labels         the worker labels it requires, a JSON object (sorted keys); NULL: any
--                  worker. A claim takes it only for a worker whose `Hello.labels` hold
--                  every pair;
--   sticky_worker  the worker it prefers (the one that ran the execution's previous task
--                  attempt); NULL: none;
--   sticky_until   until when (epoch ms, store clock) only that worker may claim it.
-- Rows queued before have none of these: claimable as before. No index: the claims read
-- them as filters of the rows the existing indexes give.
ALTER TABLE task_queue ADD COLUMN labels TEXT;
ALTER TABLE task_queue ADD COLUMN sticky_worker TEXT;
ALTER TABLE task_queue ADD COLUMN sticky_until BIGINT;
