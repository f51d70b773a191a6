-- The worker a task row was claimed for (the `worker_id` of its session's hello). A result
-- for the row's token is accepted only from that worker: on any of its streams, through any
-- frontend, or through the unary calls naming it. Rows claimed before this migration have
-- no worker and accept no result; their claims are handed back as uncertain (redelivered
-- with the same idempotency key) when their frontend restarts or dies.
ALTER TABLE task_queue ADD COLUMN worker_id TEXT;
