-- The owner's pass reads the pending inbox entries of every execution, oldest first. The
-- index of 0001 leads with execution_id, so that query scanned the whole table (done rows
-- included) in seq order; this one holds only pending entries, in seq order.
CREATE INDEX inbox_pending_by_seq ON inbox (seq) WHERE done_at IS NULL;
