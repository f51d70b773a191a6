-- 0004: retention. A finished execution records when it may be deleted (`delete_after`,
-- epoch ms, written by the owner with the closing commit from the workflow's `retention`
-- or the server default); the sweeper deletes expired trees and applied (done) rows.
ALTER TABLE executions ADD COLUMN delete_after BIGINT;
CREATE INDEX executions_by_delete_after ON executions (delete_after)
    WHERE delete_after IS NOT NULL;
-- Deleting an execution deletes its inbox rows, done or not (the 0001 index holds only
-- pending ones).
CREATE INDEX inbox_by_execution ON inbox (execution_id);
-- Applied rows, oldest first, for the sweeper that deletes them after a grace period.
CREATE INDEX inbox_done_by_time ON inbox (done_at) WHERE done_at IS NOT NULL;
CREATE INDEX task_queue_done_by_time ON task_queue (updated_at) WHERE state = 'done';
