//! The figures of `orbit bench --mode priority` and their report: the percentiles of each
//! phase, the loaded/unloaded ratio, a few human lines or one JSON object (keys in the
//! parent module's docs).

use super::super::args::BenchArgs;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::time::Duration;

/// One priority-1 execution's wait.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// `StepScheduled` to the handler's start, in whole milliseconds (both clocks tick in
    /// milliseconds).
    pub schedule_to_start_ms: u64,
    /// The start call to the handler's start, on one monotonic clock.
    pub start_to_task: Duration,
}

/// The priority-1 executions of one phase.
pub struct Phase {
    pub measured: u64,
    /// Whole milliseconds, as measured: a histogram of microseconds would round 21 ms to
    /// its bucket's edge.
    schedule_to_start: Histogram<u64>,
    /// Microseconds.
    start_to_task: Histogram<u64>,
}

impl Phase {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Phase {
            measured: 0,
            schedule_to_start: Histogram::new(3)?,
            start_to_task: Histogram::new(3)?,
        })
    }

    pub fn record(&mut self, s: Sample) {
        self.measured += 1;
        let _ = self.schedule_to_start.record(s.schedule_to_start_ms);
        let _ = self
            .start_to_task
            .record(u64::try_from(s.start_to_task.as_micros()).unwrap_or(u64::MAX));
    }

    fn json(&self) -> Value {
        json!({
            "measured": self.measured,
            "p50_ms": quantile(&self.schedule_to_start, 0.5, 1.0),
            "p95_ms": quantile(&self.schedule_to_start, 0.95, 1.0),
            "max_ms": quantile(&self.schedule_to_start, 1.0, 1.0),
            "start_to_task_p50_ms": quantile(&self.start_to_task, 0.5, 1000.0),
            "start_to_task_p95_ms": quantile(&self.start_to_task, 0.95, 1000.0),
        })
    }
}

/// What a priority run measured.
pub struct Report {
    /// Priority-5 executions started (the backlog).
    pub executions: u64,
    pub start_failures: u64,
    pub unloaded: Phase,
    pub loaded: Phase,
    /// Priority-5 tasks not yet started at the first and at the last loaded measurement.
    pub backlog: [Option<u64>; 2],
    /// The priority-5 tasks, start call to handler (µs).
    pub bulk: Histogram<u64>,
}

/// Quantile `q` of a histogram whose unit is `1 / per_ms` millisecond, in milliseconds (0
/// when empty).
fn quantile(h: &Histogram<u64>, q: f64, per_ms: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    h.value_at_quantile(q) as f64 / per_ms
}

/// `loaded / unloaded`; `None` when the unloaded figure is 0 (no ratio to speak of).
fn ratio(loaded: f64, unloaded: f64) -> Option<f64> {
    (unloaded > 0.0).then(|| loaded / unloaded)
}

impl Report {
    pub fn json(&self, args: &BenchArgs) -> Value {
        let (unloaded, loaded) = (self.unloaded.json(), self.loaded.json());
        let of = |v: &Value, key: &str| v[key].as_f64().unwrap_or(0.0);
        json!({
            "mode": "priority",
            "executions": self.executions,
            "start_failures": self.start_failures,
            "workers": args.workers,
            "worker_concurrency": args.worker_concurrency(),
            "task_delay_ms": args.task_delay_ms,
            "task_jitter_pct": args.task_jitter_pct,
            "probe_gap_ms": args.probe_gap_ms,
            "min_backlog": args.min_backlog,
            "ratio_p50": ratio(of(&loaded, "p50_ms"), of(&unloaded, "p50_ms")),
            "start_to_task_ratio_p50": ratio(
                of(&loaded, "start_to_task_p50_ms"),
                of(&unloaded, "start_to_task_p50_ms"),
            ),
            "measured": self.loaded.measured,
            "backlog_first": self.backlog[0],
            "backlog_last": self.backlog[1],
            "bulk_p50_ms": quantile(&self.bulk, 0.5, 1000.0),
            "bulk_p95_ms": quantile(&self.bulk, 0.95, 1000.0),
            "unloaded": unloaded,
            "loaded": loaded,
        })
    }
}

/// Prints the report: JSON with `--output json`, else a few lines.
pub fn print(args: &BenchArgs, r: &Report) {
    let out = r.json(args);
    if args.output == "json" {
        println!("{out}");
        return;
    }
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let times = |phase: &Value| {
        format!(
            "p50 {:>7.2} ms   p95 {:>7.2} ms   (start-to-task p50 {:.2} ms, p95 {:.2} ms)",
            f(&phase["p50_ms"]),
            f(&phase["p95_ms"]),
            f(&phase["start_to_task_p50_ms"]),
            f(&phase["start_to_task_p95_ms"]),
        )
    };
    let ratio = |key: &str| out[key].as_f64().map_or_else(|| "-".into(), |x| format!("{x:.2}"));
    println!(
        "orbit bench --mode priority: {} priority-5 executions queued ({} failed), {} workers x {} \
         slots, tasks of {} ms (priority-5: +/- {}%), probes {} ms apart at most",
        r.executions,
        r.start_failures,
        args.workers,
        args.worker_concurrency(),
        args.task_delay_ms,
        args.task_jitter_pct,
        args.probe_gap_ms
    );
    println!("  schedule-to-start of priority-1 executions, one at a time:");
    println!("  unloaded     {}   {} measured", times(&out["unloaded"]), r.unloaded.measured);
    println!(
        "  loaded       {}   {} measured, backlog {} -> {}",
        times(&out["loaded"]),
        r.loaded.measured,
        r.backlog[0].map_or_else(|| "-".into(), |b| b.to_string()),
        r.backlog[1].map_or_else(|| "-".into(), |b| b.to_string()),
    );
    println!(
        "  ratio        loaded / unloaded p50 {} (issue 27: at most 2; start-to-task {})",
        ratio("ratio_p50"),
        ratio("start_to_task_ratio_p50")
    );
    println!(
        "  backlog      priority-5 tasks, start call to handler: p50 {:.2} ms   p95 {:.2} ms",
        f(&out["bulk_p50_ms"]),
        f(&out["bulk_p95_ms"])
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn phase(samples: &[(u64, u64)]) -> Phase {
        let mut p = Phase::new().expect("histogram");
        for &(ms, us) in samples {
            p.record(Sample { schedule_to_start_ms: ms, start_to_task: Duration::from_micros(us) });
        }
        p
    }

    #[test]
    fn the_ratio_divides_the_loaded_p50_by_the_unloaded_one() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None, "no ratio over an unloaded 0");
    }

    #[test]
    fn the_json_has_every_documented_key_with_the_phases_percentiles() {
        let args = Cli::try_parse_from(["orbit-bench", "--mode", "priority", "--output", "json"])
            .expect("parses")
            .bench;
        let mut bulk = Histogram::new(3).expect("histogram");
        for us in [1_000_000, 2_000_000, 3_000_000] {
            bulk.record(us).expect("in range");
        }
        let report = Report {
            executions: 5000,
            start_failures: 0,
            // p50 14 ms, p95 40 ms; start-to-task p50 2.5 ms.
            unloaded: phase(&[(10, 1500), (14, 2500), (14, 2500), (40, 4000)]),
            // p50 21 ms (whole milliseconds read back exactly): a ratio of 1.5.
            loaded: phase(&[(21, 5000), (21, 5000), (35, 9000)]),
            backlog: [Some(4990), Some(4200)],
            bulk,
        };
        let out = report.json(&args);
        for key in [
            "mode",
            "executions",
            "start_failures",
            "workers",
            "worker_concurrency",
            "task_delay_ms",
            "task_jitter_pct",
            "probe_gap_ms",
            "min_backlog",
            "ratio_p50",
            "start_to_task_ratio_p50",
            "measured",
            "backlog_first",
            "backlog_last",
            "bulk_p50_ms",
            "bulk_p95_ms",
        ] {
            assert!(out.get(key).is_some(), "{key} in {out}");
        }
        assert_eq!(out["unloaded"]["measured"], 4);
        assert_eq!(out["unloaded"]["p50_ms"].as_f64(), Some(14.0));
        assert_eq!(out["unloaded"]["p95_ms"].as_f64(), Some(40.0));
        assert_eq!(out["loaded"]["p50_ms"].as_f64(), Some(21.0));
        assert_eq!(out["loaded"]["max_ms"].as_f64(), Some(35.0));
        assert_eq!(out["ratio_p50"].as_f64(), Some(1.5));
        let start_ratio = out["start_to_task_ratio_p50"].as_f64().expect("a ratio");
        assert!((start_ratio - 2.0).abs() < 0.01, "5 ms / 2.5 ms: {start_ratio}");
        assert_eq!(out["measured"], 3);
        assert_eq!(
            (out["backlog_first"].as_u64(), out["backlog_last"].as_u64()),
            (Some(4990), Some(4200))
        );
        let bulk_p50 = out["bulk_p50_ms"].as_f64().expect("a figure");
        assert!((bulk_p50 - 2000.0).abs() < 2.0, "the middle of 1, 2, 3 s: {bulk_p50}");
        assert_eq!(out["worker_concurrency"], 4);
    }

    #[test]
    fn an_empty_phase_reports_zeros_and_no_ratio() {
        let args =
            Cli::try_parse_from(["orbit-bench", "--mode", "priority"]).expect("parses").bench;
        let report = Report {
            executions: 10,
            start_failures: 0,
            unloaded: phase(&[]),
            loaded: phase(&[]),
            backlog: [None, None],
            bulk: Histogram::new(3).expect("histogram"),
        };
        let out = report.json(&args);
        assert_eq!(out["unloaded"]["p50_ms"].as_f64(), Some(0.0));
        assert!(out["ratio_p50"].is_null() && out["backlog_first"].is_null(), "{out}");
        assert_eq!(out["measured"], 0);
    }
}
