//! The server-side view `orbit bench` prints at the end: what the servers' own metrics say
//! about the run (task backlog, schedule-to-start p99, owner commit latency, and per task
//! what crossed a process or database boundary on a step's path), read from
//! the Prometheus text of `/metrics` before and after the run, so a long-running server's
//! earlier traffic does not count. The embedded server of `orbit bench` shares the
//! process's registry, so its text is rendered in process (the same text `/metrics`
//! serves).

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sums per series name and `le` over every scraped text.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// (metric name, `le` label or "") → value summed over the other labels and servers.
    values: BTreeMap<(String, String), f64>,
    /// (metric name, `label="value"`) → value summed over the other labels and servers,
    /// for every label but `le`.
    labelled: BTreeMap<(String, String), f64>,
}

/// Where the metrics come from.
pub enum Source {
    /// The embedded server of this process.
    InProcess,
    /// The admin ports (`host:port`) of running servers.
    Admin(Vec<String>),
}

impl Source {
    /// One reading of every server; servers that cannot be read are skipped (with a note).
    pub async fn read(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        match self {
            Source::InProcess => snap.add(&orbit_metrics::render()),
            Source::Admin(addrs) => {
                for addr in addrs {
                    match fetch(addr).await {
                        Some(text) => snap.add(&text),
                        None => eprintln!("note: cannot read http://{addr}/metrics"),
                    }
                }
            }
        }
        snap
    }
}

async fn fetch(addr: &str) -> Option<String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        // The server answers an HTTP/1.0 request as HTTP/1.0: look at the status code only.
        (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(5), get).await.ok().flatten()
}

impl Snapshot {
    fn add(&mut self, text: &str) {
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let le = labels
                .split(',')
                .find_map(|l| l.strip_prefix("le=\""))
                .map(|v| v.trim_end_matches(['"', '}']).to_string())
                .unwrap_or_default();
            *self.values.entry((name.to_string(), le)).or_default() += value;
            let labels = labels.trim_end_matches('}');
            for label in labels.split(',').filter(|l| !l.is_empty() && !l.starts_with("le=")) {
                *self.labelled.entry((name.to_string(), label.to_string())).or_default() += value;
            }
        }
    }

    /// The value of the series of `name` whose `label` starts with `prefix`, summed.
    fn labelled(&self, name: &str, label: &str, prefix: &str) -> f64 {
        let start = format!("{label}=\"{prefix}");
        self.labelled
            .iter()
            .filter(|((n, l), _)| n == name && l.starts_with(&start))
            .map(|(_, v)| v)
            .sum()
    }

    /// The value of `name` summed over its labels and servers (0 when absent).
    pub fn get(&self, name: &str) -> f64 {
        self.values.get(&(name.to_string(), String::new())).copied().unwrap_or(0.0)
    }

    /// `self − before` for counters and histograms (gauges keep `self`).
    #[must_use]
    pub fn since(&self, before: &Snapshot) -> Snapshot {
        let is_total = |name: &str| {
            name.ends_with("_total")
                || name.ends_with("_bucket")
                || name.ends_with("_sum")
                || name.ends_with("_count")
        };
        let mut values = self.values.clone();
        for (key, v) in &mut values {
            if is_total(&key.0) {
                *v -= before.values.get(key).copied().unwrap_or(0.0);
            }
        }
        let mut labelled = self.labelled.clone();
        for (key, v) in &mut labelled {
            if is_total(&key.0) {
                *v -= before.labelled.get(key).copied().unwrap_or(0.0);
            }
        }
        Snapshot { values, labelled }
    }

    /// The `q` quantile of histogram `name` in seconds (linear inside a bucket, as
    /// PromQL's `histogram_quantile`); `None` without observations.
    fn quantile(&self, name: &str, q: f64) -> Option<f64> {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = self
            .values
            .iter()
            .filter(|((n, le), _)| *n == bucket && !le.is_empty())
            .map(|((_, le), v)| {
                (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::INFINITY) }, *v)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total = buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for (le, count) in buckets {
            if count >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let inside = (count - below).max(f64::MIN_POSITIVE);
                return Some(lower + (le - lower) * (rank - below) / inside);
            }
            (lower, below) = (le, count);
        }
        None
    }

    /// The server-side lines of the report, and the same as JSON; `tasks`: the tasks the
    /// run completed, for the per-task counts.
    #[must_use]
    pub fn report(&self, tasks: u64) -> (String, serde_json::Value) {
        let ms = |s: Option<f64>| s.map(|s| s * 1000.0);
        let s2s = ms(self.quantile("orbit_task_schedule_to_start_seconds", 0.99));
        let commit_p99 = ms(self.quantile("orbit_store_commit_seconds", 0.99));
        let commits = self.get("orbit_store_commit_seconds_count");
        let commit_mean =
            (commits > 0.0).then(|| self.get("orbit_store_commit_seconds_sum") * 1000.0 / commits);
        let backlog = self.get("orbit_task_backlog");
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2} ms"));
        let (path, per_task) = self.per_task(tasks);
        let text = format!(
            "  server       backlog {backlog:.0} queued   schedule-to-start p99 {}   commit mean {}   p99 {}   ({commits:.0} commits)\n{path}",
            show(s2s),
            show(commit_mean),
            show(commit_p99),
        );
        let json = serde_json::json!({
            "task_backlog": backlog,
            "schedule_to_start_p99_ms": s2s,
            "commit_mean_ms": commit_mean,
            "commit_p99_ms": commit_p99,
            "commits": commits,
            "per_task": per_task,
        });
        (text, json)
    }

    /// What a step's path crossed, per task, as the servers counted it: owner passes and
    /// commits (each commit one database round trip, a redone one two), claims and results
    /// that took the inbox route (each a database round trip of a frontend, and a pass of
    /// its own), internal calls between processes (frontend → owner), and the share of
    /// tasks handed off by the owner's commit rather than claimed from the queue.
    fn per_task(&self, tasks: u64) -> (String, serde_json::Value) {
        #[allow(clippy::cast_precision_loss)]
        let n = (tasks as f64).max(1.0);
        // A counter read across servers can step back by a rounding: never below zero.
        let per = |v: f64| (v / n).max(0.0);
        let tx = |kind: &str| self.labelled("orbit_store_transactions_total", "kind", kind);
        let passes = per(self.get("orbit_owner_pass_seconds_count"));
        let commits = per(self.get("orbit_store_commit_seconds_count"));
        let redone = per(tx("commit_redone"));
        let claims = per(tx("claim"));
        let inbox_results = per(tx("complete"));
        let internal = per(self.labelled("orbit_grpc_requests_total", "method", "orbit.internal."));
        let dispatched = self.get("orbit_tasks_dispatched_total");
        let handed = if dispatched > 0.0 {
            self.get("orbit_tasks_handed_off_total") / dispatched
        } else {
            0.0
        };
        let text = format!(
            "  per task     {passes:.2} owner passes   {commits:.2} commits ({redone:.2} redone)   {claims:.2} claims   {inbox_results:.2} results by the inbox   {internal:.2} internal calls   {:.0}% handed off",
            handed * 100.0
        );
        let json = serde_json::json!({
            "owner_passes": passes,
            "commits": commits,
            "commits_redone": redone,
            "claims": claims,
            "results_by_inbox": inbox_results,
            "internal_calls": internal,
            "handed_off": handed,
        });
        (text, json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "orbit_store_commit_seconds_bucket{backend=\"sqlite\",le=\"0.001\"} 1\n\
orbit_store_commit_seconds_bucket{backend=\"sqlite\",le=\"0.01\"} 1\n\
orbit_store_commit_seconds_bucket{backend=\"sqlite\",le=\"+Inf\"} 1\n\
orbit_store_commit_seconds_sum{backend=\"sqlite\"} 0.0005\n\
orbit_store_commit_seconds_count{backend=\"sqlite\"} 1\n";
    const AFTER: &str = "# TYPE x counter\n\
orbit_store_commit_seconds_bucket{backend=\"sqlite\",le=\"0.001\"} 1\n\
orbit_store_commit_seconds_bucket{backend=\"sqlite\",le=\"0.01\"} 101\n\
orbit_store_commit_seconds_bucket{backend=\"sqlite\",le=\"+Inf\"} 101\n\
orbit_store_commit_seconds_sum{backend=\"sqlite\"} 0.5005\n\
orbit_store_commit_seconds_count{backend=\"sqlite\"} 101\n\
orbit_task_backlog{task=\"a\"} 3\norbit_task_backlog{task=\"b\"} 4\n";

    #[test]
    fn the_run_is_what_changed_between_the_readings() {
        let (mut before, mut after) = (Snapshot::default(), Snapshot::default());
        before.add(BEFORE);
        after.add(AFTER);
        let run = after.since(&before);
        let (text, json) = run.report(100);
        assert_eq!(json["commits"], 100.0, "{text}");
        assert!((json["commit_mean_ms"].as_f64().unwrap_or(0.0) - 5.0).abs() < 1e-6, "{json}");
        // All 100 commits of the run sit in (1 ms, 10 ms]: p99 interpolates to 9.91 ms.
        let p99 = json["commit_p99_ms"].as_f64().unwrap_or(0.0);
        assert!((p99 - 9.91).abs() < 1e-6, "{p99}");
        assert_eq!(json["task_backlog"], 7.0);
        assert!(json["schedule_to_start_p99_ms"].is_null());
    }

    #[test]
    fn per_task_counts_are_the_runs_own_by_label() {
        let before = "orbit_store_transactions_total{backend=\"postgres\",kind=\"claim\"} 5\n\
orbit_grpc_requests_total{method=\"orbit.internal.v1.OwnerService/ReportResult\",code=\"OK\"} 10\n";
        let after = "orbit_store_transactions_total{backend=\"postgres\",kind=\"claim\"} 8\n\
orbit_store_transactions_total{backend=\"postgres\",kind=\"commit\"} 40\n\
orbit_grpc_requests_total{method=\"orbit.internal.v1.OwnerService/ReportResult\",code=\"OK\"} 28\n\
orbit_grpc_requests_total{method=\"orbit.internal.v1.OwnerService/ReportResult\",code=\"UNAVAILABLE\"} 2\n\
orbit_grpc_requests_total{method=\"orbit.v1.WorkflowService/StartExecution\",code=\"OK\"} 7\n\
orbit_tasks_dispatched_total{task=\"a\"} 20\norbit_tasks_handed_off_total{task=\"a\"} 15\n";
        let (mut b, mut a) = (Snapshot::default(), Snapshot::default());
        b.add(before);
        a.add(after);
        let (text, json) = a.since(&b).report(20);
        let per = &json["per_task"];
        assert_eq!(per["claims"], 3.0 / 20.0, "{text}");
        // 20 internal calls in the run (OK and not); the public start is not one.
        assert_eq!(per["internal_calls"], 1.0, "{text}");
        assert_eq!(per["handed_off"], 0.75, "{text}");
        assert!(text.contains("75% handed off"), "{text}");
    }
}
