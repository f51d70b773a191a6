-- The caller's idempotency id of a signal or cancel (`request_id`). One entry per
-- (execution, kind, request id): a retried command finds the first entry and answers with
-- its reply (the seq it recorded), even after the execution closed. Entries with a request
-- id are kept until their execution is deleted (the done-row sweep skips them), so a retry
-- is recognised for as long as the execution exists.
ALTER TABLE inbox ADD COLUMN request_id TEXT;
CREATE UNIQUE INDEX inbox_request ON inbox (execution_id, kind, request_id)
    WHERE request_id IS NOT NULL;
