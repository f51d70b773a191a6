//! The store conformance suite, run against every backend.
//!
//! Each case in `conformance/suite/mod.rs` is a generic async fn over a [`Backend`] (something
//! that can open a fresh, migrated store at one location, again and again). The
//! `conformance_suite!` macro turns every case into a `#[tokio::test]` for one backend, and
//! `every_case!` hands it the full list, so each backend runs every case: SQLite (a temp
//! file) at the top level, PostgreSQL (a fresh database per case, see `conformance/pg.rs`)
//! in `mod postgres`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

#[path = "conformance/pg.rs"]
mod pg;
#[path = "conformance/suite/mod.rs"]
mod suite;
#[path = "conformance/support.rs"]
mod support;

use orbit_store::{Migrations, SqliteStore, Store};
use std::path::PathBuf;
use std::sync::Arc;
use support::Backend;

/// Expands to one test per case, each with a fresh backend made by `$make(case_name)`.
macro_rules! conformance_suite {
    ($make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let backend = $make(stringify!($case));
                suite::$case(&backend).await;
            }
        )*
    };
}

/// A SQLite file in the temp directory, deleted (with its WAL files) on drop.
struct SqliteBackend {
    path: PathBuf,
}

impl SqliteBackend {
    fn new(case: &str) -> SqliteBackend {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("orbit-store-{case}-{}-{nanos}.db", std::process::id());
        SqliteBackend { path: std::env::temp_dir().join(name) }
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

#[async_trait::async_trait]
impl Backend for SqliteBackend {
    async fn open(&self) -> Arc<dyn Store> {
        let store = SqliteStore::open(&self.path).await.expect("open sqlite store");
        store.migrate().await.expect("migrate sqlite store");
        Arc::new(store)
    }

    async fn execute(&self, sql: &str) {
        let (path, sql) = (self.path.clone(), sql.to_string());
        tokio::task::spawn_blocking(move || {
            let conn = rusqlite::Connection::open(&path).expect("open the sqlite file");
            conn.busy_timeout(std::time::Duration::from_secs(5)).expect("busy timeout");
            conn.execute_batch(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        })
        .await
        .expect("sqlite execute");
    }
}

/// Invokes `$suite!($make; <every case>)`.
macro_rules! every_case {
    ($suite:ident, $make:path) => {
        $suite!(
            $make;
            migrations_are_idempotent,
            applied_migrations_are_the_shipped_ones,
            definitions_are_immutable,
            commit_writes_everything_in_one_transaction,
            refused_batches_leave_nothing_behind,
            fencing_rejects_a_stale_epoch,
            duplicate_execution_is_refused,
            a_start_checks_the_versions_it_saw,
            concurrent_claimers_never_share_a_row,
            completing_a_task_records_the_result_once,
            only_the_claiming_worker_completes_a_task,
            history_survives_reopening,
            timers_come_due_in_order,
            inbox_replies_reach_waiting_callers,
            request_ids_make_inbox_commands_idempotent,
            executions_list_with_filters_and_pages,
            executions_list_with_a_query,
            executions_read_by_ids,
            executions_list_in_any_order_pages_without_loss_or_repeat,
            executions_count_and_group,
            failure_columns_are_set_kept_and_cleared,
            search_attributes_are_projected_replaced_and_deleted,
            search_attribute_catalog_keeps_one_type_per_name,
            query_status_names_are_the_engines,
            continue_as_new_starts_a_new_run,
            a_migration_moves_the_projection_to_the_new_definition,
            definitions_latest_is_the_highest_version,
            due_timers_fire_into_the_inbox_once,
            commit_all_is_all_or_nothing,
            units_are_cancelled_before_new_offers_and_inbox_entries_are_written,
            tasks_done_marks_only_claimed_rows_of_the_execution,
            a_failing_call_does_not_spoil_concurrent_ones,
            queue_backlog_counts_queued_rows_per_task,
            commit_all_applies_batches_of_one_execution_in_order,
            nodes_heartbeat_and_go_stale,
            node_sessions_follow_each_beat,
            a_beat_lists_the_live_nodes_it_leaves,
            a_new_incarnation_resets_started_at,
            pending_inbox_owned_is_the_nodes_and_the_also_entries,
            owned_executions_exclude_closed_ones,
            orphaned_roots_are_trees_of_silent_owners_with_work,
            take_over_root_moves_the_tree_and_fences_the_old_owner,
            resume_node_fences_every_row_of_the_node_page_by_page,
            release_claims_hands_back_each_row_once,
            a_reconnected_worker_s_claims_move_and_are_never_handed_back_twice,
            orphaned_claimers_are_claimers_without_a_live_node,
            faults_count_per_entry_and_restart_when_the_entry_moves,
            parking_suspends_skips_entries_and_unparking_restores,
            applied_rows_are_deleted_after_their_grace,
            owners_of_closed_quiet_trees_are_released,
            expired_trees_are_deleted_with_every_row,
            expired_trees_go_in_bounded_batches_each_once,
            delete_execution_refuses_open_trees_and_is_idempotent,
            schedules_are_managed_by_id,
            due_schedules_are_claimed_once_per_lease,
            a_fire_is_recorded_only_under_its_claim,
            executions_list_by_schedule,
            claims_route_by_language,
            claims_match_announced_versions,
            a_commit_queues_handed_off_tasks_already_claimed,
            a_result_applied_with_its_units_cancellation_stays_done,
            an_offer_queued_again_with_its_unit_cancelled_stays_cancelled,
            a_timer_set_and_deleted_by_one_batch_is_gone,
            a_new_execution_is_stored_as_its_first_commit_leaves_it,
            batches_are_created_once_and_cancelled,
            a_batch_is_leased_by_one_scheduler_at_a_time,
            batch_items_are_begun_and_recorded_once,
            finished_batches_past_retention_are_deleted_with_their_items,
            batch_targets_page_by_execution_id,
            batch_targets_walk_a_query_within_the_patterns,
            flow_columns_are_written_and_read_back,
            unlimited_rows_are_claimed_by_priority_then_age,
            concurrency_keys_hold_rows_until_a_slot_frees,
            rate_limits_take_starts_per_window,
            rate_limits_are_managed_by_name,
            fair_keys_take_turns_by_running_attempts,
            fair_keys_alternate_on_one_slot,
            one_claim_takes_ordinary_rows_then_limited_ones,
            idle_flow_rows_are_swept,
            a_claim_behind_a_long_fair_queue_reads_each_key_s_head,
            fair_keys_share_by_weight,
            rows_without_a_fair_key_are_still_claimed,
            a_limit_shared_by_fair_keys_is_shared_by_share,
            priority_orders_a_key_s_rows_not_its_share,
            labelled_rows_go_only_to_workers_with_the_labels,
            sticky_rows_wait_for_their_worker_until_the_timeout,
            dedupe_first_collapses_within_the_window,
            dedupe_last_keeps_the_latest_input_and_bounds_the_delay,
            due_debounces_are_fired_under_a_lease,
            ended_dedupe_windows_are_swept,
            concurrent_dedupe_claims_have_one_winner,
            slots_are_granted_in_start_order_and_released_to_the_next,
            cancel_modes_cancel_the_newest_or_the_oldest,
            racing_commits_never_both_take_the_last_slot,
        );
    };
}

every_case!(conformance_suite, SqliteBackend::new);

/// The same cases on PostgreSQL (`ORBIT_TEST_DATABASE_URL`, see `conformance/pg.rs`).
mod postgres {
    use super::{pg::PgBackend, suite};

    every_case!(conformance_suite, PgBackend::new);
}
