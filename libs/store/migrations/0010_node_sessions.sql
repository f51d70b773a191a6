-- What a node reports about itself with each heartbeat: a frontend writes a compact JSON
-- summary of its live worker sessions here, so `ListWorkers` on any frontend can answer for
-- the whole cluster by reading the live rows, without a query of its own on a timer.
-- NULL for nodes that report nothing (owners, schedulers, older binaries).
ALTER TABLE nodes ADD COLUMN sessions TEXT;
