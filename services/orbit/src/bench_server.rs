//! The server-side view `orbit bench` prints at the end: what the servers' own metrics say
//! about the run (task backlog, schedule-to-start p99, owner commit latency), read from
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
        }
    }

    /// The value of `name` summed over its labels and servers (0 when absent).
    pub fn get(&self, name: &str) -> f64 {
        self.values.get(&(name.to_string(), String::new())).copied().unwrap_or(0.0)
    }

    /// `self − before` for counters and histograms (gauges keep `self`).
    #[must_use]
    pub fn since(&self, before: &Snapshot) -> Snapshot {
        let mut values = self.values.clone();
        for (key, v) in &mut values {
            let is_total = key.0.ends_with("_total")
                || key.0.ends_with("_bucket")
                || key.0.ends_with("_sum")
                || key.0.ends_with("_count");
            if is_total {
                *v -= before.values.get(key).copied().unwrap_or(0.0);
            }
        }
        Snapshot { values }
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

    /// The server-side lines of the report, and the same as JSON.
    #[must_use]
    pub fn report(&self) -> (String, serde_json::Value) {
        let ms = |s: Option<f64>| s.map(|s| s * 1000.0);
        let s2s = ms(self.quantile("orbit_task_schedule_to_start_seconds", 0.99));
        let commit_p99 = ms(self.quantile("orbit_store_commit_seconds", 0.99));
        let commits = self.get("orbit_store_commit_seconds_count");
        let commit_mean =
            (commits > 0.0).then(|| self.get("orbit_store_commit_seconds_sum") * 1000.0 / commits);
        let backlog = self.get("orbit_task_backlog");
        let show = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2} ms"));
        let text = format!(
            "  server       backlog {backlog:.0} queued   schedule-to-start p99 {}   commit mean {}   p99 {}   ({commits:.0} commits)",
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
        let (text, json) = run.report();
        assert_eq!(json["commits"], 100.0, "{text}");
        assert!((json["commit_mean_ms"].as_f64().unwrap_or(0.0) - 5.0).abs() < 1e-6, "{json}");
        // All 100 commits of the run sit in (1 ms, 10 ms]: p99 interpolates to 9.91 ms.
        let p99 = json["commit_p99_ms"].as_f64().unwrap_or(0.0);
        assert!((p99 - 9.91).abs() < 1e-6, "{p99}");
        assert_eq!(json["task_backlog"], 7.0);
        assert!(json["schedule_to_start_p99_ms"].is_null());
    }
}
