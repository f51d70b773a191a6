-- The worker language a queued task is routed to (the task's `language` in its workflow,
-- lower-case), or NULL for any worker. A claim skips rows routed to another language than
-- the claiming worker's (the first word of its `Hello.runtime`). Rows queued before this
-- migration have none and stay claimable by every worker serving their task.
ALTER TABLE task_queue ADD COLUMN language TEXT;
