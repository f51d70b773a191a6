//! Worker routing in SQLite's claim statements (issue 27; migration 0014): the condition
//! `sql::TASK_CLAIMABLE` and the flow claim's `JUDGE` add for worker labels and sticky
//! workers, as a macro so both statements stay `concat!` constants.

/// Worker pools and sticky workers (issue 27; migration 0014), PostgreSQL's rule: the row
/// `$q` (prefix) requires no labels or the worker's labels `$labels` (a JSON object; NULL:
/// none) hold every pair, and it sticks to no worker, to the worker `$worker`, or its
/// sticky timeout is before the clock `$now`.
macro_rules! worker_routing {
    ($q:literal, $labels:literal, $worker:literal, $now:literal) => {
        concat!(
            "(",
            $q,
            "labels IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(",
            $q,
            "labels) r WHERE NOT EXISTS (SELECT 1 FROM json_each(",
            $labels,
            ") w WHERE w.key = r.key AND w.value = r.value))) AND (",
            $q,
            "sticky_worker IS NULL OR ",
            $q,
            "sticky_worker = ",
            $worker,
            " OR ",
            $q,
            "sticky_until <= ",
            $now,
            ")"
        )
    };
}
