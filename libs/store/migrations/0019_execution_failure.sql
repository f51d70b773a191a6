-- 0019: why a run failed, as list-query attributes (issue 28; docs/queries.md), and the
-- indexes that serve a selective query on every system attribute.
--
-- `failed_step` is the step whose failure failed the run and `error_code` the code of the
-- error the run ended with; both are written by the owner's commit when a run ends FAILED
-- or TIMED_OUT and cleared (NULL) by the commit of any other status, so a reset or a
-- continue-as-new starts clean.
ALTER TABLE executions ADD COLUMN failed_step TEXT;
ALTER TABLE executions ADD COLUMN error_code TEXT;

-- Every index leads with the attribute and ends with the list's keyset columns. Search
-- attributes (`execution_search`, migration 0018) carry their own indexes.
CREATE INDEX executions_by_failed_step ON executions (failed_step, created_at);
CREATE INDEX executions_by_error_code ON executions (error_code, created_at);
CREATE INDEX executions_by_closed ON executions (closed_at, execution_id);
CREATE INDEX executions_by_version ON executions (version, created_at);
CREATE INDEX executions_by_duration ON executions ((closed_at - created_at), execution_id);
-- Not `updated_at`: it changes with every commit of an open execution, and an index on it
-- would turn each of those into a non-HOT update on PostgreSQL (docs/queries.md, Indexes).
