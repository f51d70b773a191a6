-- 0006: drop `worker_sessions` and `workers` (created by 0001, never written or read).
--
-- Worker sessions live in the memory of the frontend that holds the stream
-- (`worker::Registry`); a dead frontend's claims are released from `task_queue` by a live
-- one's sweeper. A registry in the database is a design idea this code does not follow (see
-- docs/architecture.md, section 6); a later migration creates what it needs. `IF EXISTS`
-- keeps this safe on a database whose tables were already removed by hand. Their index
-- goes with the table on both backends. `schedules` stays: the schedules issue uses it.
DROP TABLE IF EXISTS worker_sessions;
DROP TABLE IF EXISTS workers;
