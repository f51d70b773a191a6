-- 0014: the flow claim behind a long fair queue (issue 27; docs/flow-control.md, "Fair
-- queues"). A claim takes at most its credits' worth of rows, and a fair key's own rows go
-- in rank order, so of the rows that carry only a fair key (no concurrency key, no rate
-- limit: they always pass) it needs each key's first rows by rank, not all of them: a
-- loose scan of the keys and each key's head, on `task_queue_fair_head`. The rows under a
-- concurrency key or a rate limit are all judged, as before, on `task_queue_limited_keyed`.
CREATE INDEX task_queue_limited_keyed ON task_queue (task, dispatch_rank, id)
    WHERE state = 'queued' AND limited
        AND (concurrency_key IS NOT NULL OR rate_key IS NOT NULL);
CREATE INDEX task_queue_fair_head ON task_queue (fair_key, dispatch_rank, id)
    WHERE state = 'queued' AND limited AND concurrency_key IS NULL AND rate_key IS NULL;
-- When a fair key last had a row claimed (ms): keys of equal share go least recently
-- served first, so two keys on one worker slot alternate instead of the older queue
-- going first until it drains. One row per fair key ever claimed.
CREATE TABLE fair_served (
    fair_key TEXT PRIMARY KEY,
    served_at BIGINT NOT NULL
);
