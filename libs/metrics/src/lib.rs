//! Orbit's Prometheus metrics: one registry per process and every metric the services
//! record, defined in one place so names, units and labels stay consistent (they are
//! listed in docs/operations.md).
//!
//! Rules every metric here follows:
//! - the name starts with `orbit_` and ends with its unit (`_seconds`, `_total`, …);
//! - labels are bounded: workflow names, task names, gRPC methods of the served services,
//!   status and store-operation names — never an execution id, a token or a worker id;
//! - recording is a counter increment or a histogram observation (atomic adds inside the
//!   `prometheus` crate), so the hot path gains no locks and no queries of its own.
//!
//! [`get`] returns the metrics (created and registered on first use); [`render`] encodes
//! the registry in the Prometheus text format for the admin port's `/metrics`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::LazyLock;

/// Latency buckets in seconds: 0.5 ms to 60 s, dense where a healthy step lives.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];
/// Longer buckets for task run times: 1 ms to 1 hour.
const RUN_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
/// Counts (batch sizes): powers of two up to 1024.
const COUNT_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// Every metric of an Orbit process. Obtain it with [`get`].
pub struct Metrics {
    registry: Registry,
    /// `orbit_executions_started_total{workflow}`: executions created (owner commit).
    pub executions_started: IntCounterVec,
    /// `orbit_executions_closed_total{workflow,status}`: runs that reached a terminal status.
    pub executions_closed: IntCounterVec,
    /// `orbit_executions_migrated_total{workflow}`: executions migrated to another version
    /// of their workflow (`MigrateExecution`).
    pub executions_migrated: IntCounterVec,
    /// `orbit_executions_reset_total{workflow}`: executions reset to an earlier point
    /// (`ResetExecution`).
    pub executions_reset: IntCounterVec,
    /// `orbit_executions_forked_total{workflow}`: executions created by `ForkExecution`.
    pub executions_forked: IntCounterVec,
    /// `orbit_starts_collapsed_total{workflow,keep}`: starts a workflow's `dedupe:` collapsed
    /// into an existing or reserved execution (`keep`: `first`, `last`).
    pub starts_collapsed: IntCounterVec,
    /// `orbit_batch_items_total{action,outcome}`: executions a batch job recorded an outcome
    /// for (`StartBatch`), by action (`migrate`) and outcome (`succeeded`, `failed`,
    /// `skipped`).
    pub batch_items: IntCounterVec,
    /// `orbit_tasks_dispatched_total{task}`: attempts handed to a worker.
    pub tasks_dispatched: IntCounterVec,
    /// `orbit_tasks_handed_off_total{task}`: dispatches the owner handed straight to a
    /// session (queued already claimed, issue 14) instead of a claim.
    pub tasks_handed_off: IntCounterVec,
    /// `orbit_tasks_redelivered_total{task}`: dispatches of an attempt offered before.
    pub tasks_redelivered: IntCounterVec,
    /// `orbit_attempts_lost_total{workflow, reason}`: attempts whose worker went silent,
    /// as the owner recorded them (`SESSION_LOST`: redelivered; `HEARTBEAT_TIMEOUT`,
    /// `WORKER_LOST`: failed).
    pub attempts_lost: IntCounterVec,
    /// `orbit_tasks_completed_total{task}`: results recorded as success.
    pub tasks_completed: IntCounterVec,
    /// `orbit_tasks_failed_total{task}`: results recorded as failure.
    pub tasks_failed: IntCounterVec,
    /// `orbit_task_schedule_to_start_seconds{task}`: queued → claimed for a worker.
    pub schedule_to_start: HistogramVec,
    /// `orbit_task_run_seconds{task}`: claimed → result received by the frontend.
    pub task_run: HistogramVec,
    /// `orbit_task_wait_by_priority_seconds{priority}`: queued → claimed, by the attempt's
    /// priority (1..5; issue 27).
    pub wait_by_priority: HistogramVec,
    /// `orbit_flow_waiting_tasks{reason}`: queued attempts a flow limit holds
    /// (`concurrency`, `rate_limit`), sampled while any exist.
    pub flow_waiting: IntGaugeVec,
    /// `orbit_flow_keys_full`: concurrency keys with as many attempts running as their
    /// limit, sampled with `flow_waiting`.
    pub flow_keys_full: IntGauge,
    /// `orbit_executions_waiting_for_slot_total`: executions that had to wait for a slot of
    /// a workflow-level concurrency key (`concurrency:` with `on_limit: queue` or
    /// `cancel_in_progress`), counted by the commit that queued them.
    pub executions_waiting_for_slot: IntCounter,

    /// `orbit_task_backlog{task}`: queued rows, sampled periodically.
    pub task_backlog: IntGaugeVec,
    /// `orbit_task_oldest_queued_age_seconds{task}`: age of the oldest queued row.
    pub task_oldest_age: prometheus::GaugeVec,
    /// `orbit_timer_lag_seconds`: fired − due, per fired timer.
    pub timer_lag: Histogram,
    /// `orbit_owner_pass_seconds`: duration of an owner pass that had work.
    pub owner_pass: Histogram,
    /// `orbit_owner_pass_entries`: starts + inbox entries taken by a pass.
    pub owner_pass_entries: Histogram,
    /// `orbit_inbox_backlog`: pending inbox entries the last owner pass read (at most its
    /// batch size).
    pub inbox_backlog: IntGauge,
    /// `orbit_owner_executions_held`: open executions the owner holds in memory.
    pub owner_executions_held: IntGauge,
    /// `orbit_owner_executions_evicted`: open executions the owner dropped from memory
    /// while they sleep or await something (reloaded at their next event).
    pub owner_executions_evicted: IntGauge,
    /// `orbit_owner_evictions_total`: executions dropped from memory after a commit.
    pub owner_evictions: IntCounter,
    /// `orbit_owner_reloads_total`: evicted executions reloaded from their history.
    pub owner_reloads: IntCounter,
    /// `orbit_store_commit_seconds{backend}`: one group commit of owner batches.
    pub store_commit: HistogramVec,
    /// `orbit_store_transactions_total{kind,backend}`: store transactions on the hot path.
    pub store_transactions: IntCounterVec,
    /// `orbit_changes_received_total{via}`: changes of executions a frontend heard of, by
    /// route: `stream` (an owner's hand-off stream) or `notification` (`orbit_changes`).
    pub changes_received: IntCounterVec,
    /// `orbit_worker_sessions`: live worker sessions on this frontend.
    pub worker_sessions: IntGauge,
    /// `orbit_worker_credits`: unused credits of those sessions.
    pub worker_credits: IntGauge,
    /// `orbit_grpc_requests_total{method,code}`: finished gRPC calls.
    pub grpc_requests: IntCounterVec,
    /// `orbit_grpc_request_duration_seconds{method}`: call duration until the response
    /// ended (streams included).
    pub grpc_duration: HistogramVec,
    /// `orbit_node_membership{service}`: 1 while this node's heartbeats reach the store.
    pub node_membership: IntGaugeVec,
    /// `orbit_ready`: 1 while `/readyz` answers 200.
    pub ready: IntGauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics, registered on first use.
#[must_use]
pub fn get() -> &'static Metrics {
    &METRICS
}

/// The registry in the Prometheus text exposition format (version 0.0.4).
#[must_use]
pub fn render() -> String {
    let families = get().registry.gather();
    let mut out = Vec::with_capacity(16 * 1024);
    // Encoding into a Vec only fails on invalid metric data, which `Metrics` never holds.
    let _ = TextEncoder::new().encode(&families, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Every metric name, as documented in docs/operations.md.
pub const NAMES: &[&str] = &[
    "orbit_executions_started_total",
    "orbit_executions_closed_total",
    "orbit_executions_migrated_total",
    "orbit_executions_reset_total",
    "orbit_executions_forked_total",
    "orbit_starts_collapsed_total",
    "orbit_batch_items_total",
    "orbit_tasks_dispatched_total",
    "orbit_tasks_handed_off_total",
    "orbit_tasks_redelivered_total",
    "orbit_attempts_lost_total",
    "orbit_tasks_completed_total",
    "orbit_tasks_failed_total",
    "orbit_task_schedule_to_start_seconds",
    "orbit_task_run_seconds",
    "orbit_task_wait_by_priority_seconds",
    "orbit_flow_waiting_tasks",
    "orbit_flow_keys_full",
    "orbit_executions_waiting_for_slot_total",
    "orbit_task_backlog",
    "orbit_task_oldest_queued_age_seconds",
    "orbit_timer_lag_seconds",
    "orbit_owner_pass_seconds",
    "orbit_owner_pass_entries",
    "orbit_inbox_backlog",
    "orbit_owner_executions_held",
    "orbit_owner_executions_evicted",
    "orbit_owner_evictions_total",
    "orbit_owner_reloads_total",
    "orbit_store_commit_seconds",
    "orbit_store_transactions_total",
    "orbit_changes_received_total",
    "orbit_worker_sessions",
    "orbit_worker_credits",
    "orbit_grpc_requests_total",
    "orbit_grpc_request_duration_seconds",
    "orbit_node_membership",
    "orbit_ready",
];

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Seconds between two epoch-millisecond stamps, 0 when `to` is before `from` (clock
/// skew between processes).
#[must_use]
pub fn seconds_between_ms(from: u64, to: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let ms = to.saturating_sub(from) as f64;
    ms / 1000.0
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
    registry.register(Box::new(c.clone())).expect("unique metric name");
    c
}

fn plain_counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid counter");
    registry.register(Box::new(c.clone())).expect("unique metric name");
    c
}

fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels)
        .expect("valid histogram");
    registry.register(Box::new(h.clone())).expect("unique metric name");
    h
}

fn histogram(registry: &Registry, name: &str, help: &str, buckets: &[f64]) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .expect("valid histogram");
    registry.register(Box::new(h.clone())).expect("unique metric name");
    h
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid gauge");
    registry.register(Box::new(g.clone())).expect("unique metric name");
    g
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge");
    registry.register(Box::new(g.clone())).expect("unique metric name");
    g
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        let oldest = prometheus::GaugeVec::new(
            Opts::new(
                "orbit_task_oldest_queued_age_seconds",
                "Age of the oldest queued task row per task name (sampled).",
            ),
            &["task"],
        )
        .expect("valid gauge");
        r.register(Box::new(oldest.clone())).expect("unique metric name");
        Metrics {
            executions_started: counter(
                &r,
                "orbit_executions_started_total",
                "Executions created, by workflow.",
                &["workflow"],
            ),
            executions_closed: counter(
                &r,
                "orbit_executions_closed_total",
                "Execution runs closed, by workflow and terminal status.",
                &["workflow", "status"],
            ),
            executions_migrated: counter(
                &r,
                "orbit_executions_migrated_total",
                "Executions migrated to another version of their workflow, by workflow.",
                &["workflow"],
            ),
            executions_reset: counter(
                &r,
                "orbit_executions_reset_total",
                "Executions reset to an earlier point of their run, by workflow.",
                &["workflow"],
            ),
            executions_forked: counter(
                &r,
                "orbit_executions_forked_total",
                "Executions forked from another execution's state, by workflow.",
                &["workflow"],
            ),
            starts_collapsed: counter(
                &r,
                "orbit_starts_collapsed_total",
                "Starts a workflow's dedupe collapsed into an existing or reserved execution, \
                 by workflow and keep.",
                &["workflow", "keep"],
            ),
            batch_items: counter(
                &r,
                "orbit_batch_items_total",
                "Executions a batch job recorded an outcome for, by action and outcome.",
                &["action", "outcome"],
            ),
            tasks_dispatched: counter(
                &r,
                "orbit_tasks_dispatched_total",
                "Task attempts handed to a worker, by task name.",
                &["task"],
            ),
            tasks_handed_off: counter(
                &r,
                "orbit_tasks_handed_off_total",
                "Task attempts the owner handed straight to a worker session, by task name.",
                &["task"],
            ),
            tasks_redelivered: counter(
                &r,
                "orbit_tasks_redelivered_total",
                "Task attempts handed to a worker again (offered before), by task name.",
                &["task"],
            ),
            attempts_lost: counter(
                &r,
                "orbit_attempts_lost_total",
                "Attempts whose worker went silent, by workflow and reason: SESSION_LOST \
                 (redelivered), HEARTBEAT_TIMEOUT and WORKER_LOST (the attempt failed).",
                &["workflow", "reason"],
            ),
            tasks_completed: counter(
                &r,
                "orbit_tasks_completed_total",
                "Task results recorded as success, by task name.",
                &["task"],
            ),
            tasks_failed: counter(
                &r,
                "orbit_tasks_failed_total",
                "Task results recorded as failure, by task name.",
                &["task"],
            ),
            schedule_to_start: histogram_vec(
                &r,
                "orbit_task_schedule_to_start_seconds",
                "Time from a task row being queued to its claim for a worker (store clock).",
                &["task"],
                LATENCY_BUCKETS,
            ),
            task_run: histogram_vec(
                &r,
                "orbit_task_run_seconds",
                "Time from a task's claim to its result reaching a frontend.",
                &["task"],
                RUN_BUCKETS,
            ),
            wait_by_priority: histogram_vec(
                &r,
                "orbit_task_wait_by_priority_seconds",
                "Time from a task row being queued to its claim, by the attempt's priority \
                 (1 first .. 5 last).",
                &["priority"],
                LATENCY_BUCKETS,
            ),
            flow_waiting: gauge_vec(
                &r,
                "orbit_flow_waiting_tasks",
                "Queued task attempts a flow limit holds, by reason (concurrency, rate_limit).",
                &["reason"],
            ),
            flow_keys_full: gauge(
                &r,
                "orbit_flow_keys_full",
                "Concurrency keys with as many attempts running as their limit.",
            ),
            executions_waiting_for_slot: plain_counter(
                &r,
                "orbit_executions_waiting_for_slot_total",
                "Executions that waited for a slot of a workflow-level concurrency key.",
            ),
            task_backlog: gauge_vec(
                &r,
                "orbit_task_backlog",
                "Queued (unclaimed) task rows per task name (sampled).",
                &["task"],
            ),
            task_oldest_age: oldest,
            timer_lag: histogram(
                &r,
                "orbit_timer_lag_seconds",
                "Time from a timer's due time to its firing.",
                LATENCY_BUCKETS,
            ),
            owner_pass: histogram(
                &r,
                "orbit_owner_pass_seconds",
                "Duration of an owner pass that had work.",
                LATENCY_BUCKETS,
            ),
            owner_pass_entries: histogram(
                &r,
                "orbit_owner_pass_entries",
                "Starts and inbox entries taken by one owner pass.",
                COUNT_BUCKETS,
            ),
            inbox_backlog: gauge(
                &r,
                "orbit_inbox_backlog",
                "Pending inbox entries read by the owner's last pass (capped at its batch size).",
            ),
            owner_executions_held: gauge(
                &r,
                "orbit_owner_executions_held",
                "Open executions the owner holds in memory.",
            ),
            owner_executions_evicted: gauge(
                &r,
                "orbit_owner_executions_evicted",
                "Open executions dropped from the owner's memory while they sleep or await.",
            ),
            owner_evictions: plain_counter(
                &r,
                "orbit_owner_evictions_total",
                "Executions dropped from the owner's memory after a commit left them quiet.",
            ),
            owner_reloads: plain_counter(
                &r,
                "orbit_owner_reloads_total",
                "Evicted executions reloaded from their history at their next event.",
            ),
            store_commit: histogram_vec(
                &r,
                "orbit_store_commit_seconds",
                "Duration of one group commit of owner batches.",
                &["backend"],
                LATENCY_BUCKETS,
            ),
            store_transactions: counter(
                &r,
                "orbit_store_transactions_total",
                "Store transactions on the hot path, by kind and backend.",
                &["kind", "backend"],
            ),
            changes_received: counter(
                &r,
                "orbit_changes_received_total",
                "Changes of executions this frontend heard of, by route: an owner's hand-off \
                 stream or the orbit_changes notification.",
                &["via"],
            ),
            worker_sessions: gauge(
                &r,
                "orbit_worker_sessions",
                "Live worker sessions on this frontend.",
            ),
            worker_credits: gauge(
                &r,
                "orbit_worker_credits",
                "Unused credits of the worker sessions on this frontend.",
            ),
            grpc_requests: counter(
                &r,
                "orbit_grpc_requests_total",
                "Finished gRPC calls by method and status code.",
                &["method", "code"],
            ),
            grpc_duration: histogram_vec(
                &r,
                "orbit_grpc_request_duration_seconds",
                "gRPC call duration until the response ended, by method.",
                &["method"],
                LATENCY_BUCKETS,
            ),
            node_membership: gauge_vec(
                &r,
                "orbit_node_membership",
                "1 while this node's heartbeats reach the store, else 0.",
                &["service"],
            ),
            ready: gauge(&r, "orbit_ready", "1 while this process answers /readyz with 200."),
            registry: r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_prefixed_and_rendered() {
        let m = get();
        m.tasks_dispatched.with_label_values(&["greet"]).inc();
        m.schedule_to_start.with_label_values(&["greet"]).observe(0.01);
        m.ready.set(1);
        let text = render();
        assert!(text.contains("orbit_tasks_dispatched_total{task=\"greet\"} 1"), "{text}");
        assert!(text.contains("orbit_task_schedule_to_start_seconds_bucket{task=\"greet\""));
        assert!(text.contains("orbit_ready 1"));
        for line in text.lines().filter(|l| l.starts_with("# TYPE")) {
            let name = line.split_whitespace().nth(2).unwrap_or_default();
            assert!(name.starts_with("orbit_"), "{name}");
        }
    }

    /// Touches every metric (label vectors render only once a series exists).
    fn touch_all() {
        let m = get();
        let counters = [
            &m.tasks_dispatched,
            &m.tasks_handed_off,
            &m.tasks_redelivered,
            &m.tasks_completed,
            &m.tasks_failed,
        ];
        for c in counters {
            c.with_label_values(&["t"]).inc();
        }
        m.executions_started.with_label_values(&["w"]).inc();
        m.attempts_lost.with_label_values(&["w", "SESSION_LOST"]).inc();
        m.executions_closed.with_label_values(&["w", "COMPLETED"]).inc();
        m.executions_migrated.with_label_values(&["w"]).inc();
        m.executions_reset.with_label_values(&["w"]).inc();
        m.executions_forked.with_label_values(&["w"]).inc();
        m.starts_collapsed.with_label_values(&["w", "first"]).inc();
        m.batch_items.with_label_values(&["migrate", "succeeded"]).inc();
        m.schedule_to_start.with_label_values(&["t"]).observe(0.1);
        m.task_run.with_label_values(&["t"]).observe(0.1);
        m.wait_by_priority.with_label_values(&["3"]).observe(0.1);
        m.flow_waiting.with_label_values(&["concurrency"]).set(1);
        m.flow_keys_full.set(1);
        m.executions_waiting_for_slot.inc();
        m.task_backlog.with_label_values(&["t"]).set(1);
        m.task_oldest_age.with_label_values(&["t"]).set(1.0);
        m.store_commit.with_label_values(&["sqlite"]).observe(0.1);
        m.store_transactions.with_label_values(&["commit", "sqlite"]).inc();
        m.changes_received.with_label_values(&["stream"]).inc();
        m.grpc_requests.with_label_values(&["x", "OK"]).inc();
        m.grpc_duration.with_label_values(&["x"]).observe(0.1);
        m.node_membership.with_label_values(&["owner"]).set(1);
    }

    fn rendered_names() -> std::collections::BTreeSet<String> {
        touch_all();
        render()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    }

    #[test]
    fn names_lists_every_registered_metric() {
        let listed: std::collections::BTreeSet<String> =
            NAMES.iter().map(|n| (*n).to_string()).collect();
        assert_eq!(rendered_names(), listed);
    }

    /// Every `orbit_*` name the docs, the alert suggestions and the dashboard use is a
    /// metric, and every metric is documented.
    #[test]
    fn docs_alerts_and_dashboard_name_real_metrics() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).expect(p);
        let ops = read("docs/operations.md");
        for name in NAMES {
            assert!(ops.contains(&format!("`{name}`")), "{name} is not in docs/operations.md");
        }
        for file in
            ["docs/operations.md", "docker/prometheus-alerts.yml", "docker/grafana-dashboard.json"]
        {
            let text = read(file);
            let mut rest = text.as_str();
            while let Some(at) = rest.find("orbit_") {
                let word: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + word.len()..];
                if word == "orbit_" {
                    continue; // the prefix itself, named in prose
                }
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(&word);
                assert!(NAMES.contains(&base), "{file} names `{word}`, which is no metric");
            }
        }
    }

    #[test]
    fn skewed_clocks_give_zero_not_a_huge_value() {
        assert!((seconds_between_ms(2_000, 1_000)).abs() < f64::EPSILON);
        assert!((seconds_between_ms(1_000, 3_500) - 2.5).abs() < 1e-9);
    }
}
