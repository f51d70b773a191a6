-- 0011: statements whose cost grew with the finished executions stored (issue 14, "scale
-- with history"; plans in docs/benchmarks.md). Every index here is partial, so it holds only
-- the rows its statement looks for, whatever the history.
--
-- Claimed rows by claimer: a frontend's recovery at start (`claimed_by`), the claim sweep's
-- orphaned claimers and `release_claims`. Before, these walked `task_queue_by_execution`
-- from end to end (its second column is the state), done rows included.
CREATE INDEX task_queue_claimed ON task_queue (claimed_by, id) WHERE state = 'claimed';
-- Applied entries the done-row sweep may delete. Entries with a request id are kept until
-- their execution is deleted (0007), so in the old index they piled up in front of every
-- sweep's range.
DROP INDEX inbox_done_by_time;
CREATE INDEX inbox_done_by_time ON inbox (done_at) WHERE done_at IS NOT NULL AND request_id IS NULL;
-- The root rows of `owners`, oldest ownership first: the sweep that releases closed, quiet
-- trees walks them in this order and stops at its batch size, instead of reading (and
-- sorting) every owners row.
CREATE INDEX owners_roots_by_since ON owners (since, execution_id) WHERE execution_id = root_id;
