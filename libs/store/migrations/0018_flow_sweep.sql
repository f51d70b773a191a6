-- 0018: the flow-control rows the retention sweeper deletes (docs/flow-control.md,
-- "Rows kept"; orbit_store::Retention::delete_idle_flow_rows).
--   rate_buckets.expires_at  the end of the bucket's window (window_start + period): past
--                            it the row counts nothing (a claim in a later window starts
--                            the bucket over), so it can go. NULL on rows written before
--                            this migration: those go a year (the longest period) after
--                            their window started.
-- fair_served rows need no column: a fair key with no queued or claimed task row has no
-- tie to break, and a key without a row counts as served longest ago, which is where an
-- idle key belongs when it comes back.
ALTER TABLE rate_buckets ADD COLUMN expires_at BIGINT;
CREATE INDEX rate_buckets_expiry ON rate_buckets (expires_at);
