//! The figures of `orbit bench --mode fairness` and their report: tenant B's queue waits
//! in each phase, the loaded/idle ratios, tenant A's progress meanwhile; a few human lines
//! or one JSON object (keys in the parent module's docs).

use super::super::args::BenchArgs;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::time::Duration;

/// Tenant B's tasks of one phase: queue waits in whole milliseconds (both clocks tick in
/// milliseconds).
pub struct Phase {
    pub measured: u64,
    waits: Histogram<u64>,
}

impl Phase {
    pub fn new() -> anyhow::Result<Self> {
        Ok(Phase { measured: 0, waits: Histogram::new(3)? })
    }

    pub fn record(&mut self, wait_ms: u64) {
        self.measured += 1;
        let _ = self.waits.record(wait_ms);
    }

    fn quantile(&self, q: f64) -> f64 {
        if self.waits.is_empty() {
            return 0.0;
        }
        self.waits.value_at_quantile(q) as f64
    }

    fn json(&self) -> Value {
        json!({
            "measured": self.measured,
            "p50_ms": self.quantile(0.5),
            "p95_ms": self.quantile(0.95),
            "max_ms": self.quantile(1.0),
        })
    }
}

/// What a fairness run measured.
pub struct Report {
    /// Tenant A's executions started.
    pub executions: u64,
    pub start_failures: u64,
    /// Tenant B's executions per phase.
    pub tenant_b: u64,
    pub idle: Phase,
    pub loaded: Phase,
    /// Tenant A's tasks not yet started when B's loaded phase began.
    pub a_queued_at_b: u64,
    /// Tenant A's tasks that started while B's loaded phase ran.
    pub a_started_during_b: u64,
    /// B's loaded phase: first start call to the last completion.
    pub b_window: Duration,
}

/// `loaded / idle`; `None` when the idle figure is 0.
fn ratio(loaded: f64, idle: f64) -> Option<f64> {
    (idle > 0.0).then(|| loaded / idle)
}

impl Report {
    pub fn json(&self, args: &BenchArgs) -> Value {
        json!({
            "mode": "fairness",
            "executions": self.executions,
            "start_failures": self.start_failures,
            "workers": args.workers,
            "worker_concurrency": args.worker_concurrency(),
            "task_delay_ms": args.task_delay_ms,
            "tenant_b": self.tenant_b,
            "ratio_p95": ratio(self.loaded.quantile(0.95), self.idle.quantile(0.95)),
            "ratio_p50": ratio(self.loaded.quantile(0.5), self.idle.quantile(0.5)),
            "a_queued_at_b": self.a_queued_at_b,
            "a_started_during_b": self.a_started_during_b,
            "b_window_ms": self.b_window.as_secs_f64() * 1000.0,
            "idle": self.idle.json(),
            "loaded": self.loaded.json(),
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
            "p50 {:>7.2} ms   p95 {:>7.2} ms   max {:>7.2} ms",
            f(&phase["p50_ms"]),
            f(&phase["p95_ms"]),
            f(&phase["max_ms"])
        )
    };
    let ratio = |key: &str| out[key].as_f64().map_or_else(|| "-".into(), |x| format!("{x:.2}"));
    println!(
        "orbit bench --mode fairness: tenant A {} executions queued ({} failed), tenant B {}; \
         {} workers x {} slots, tasks of {} ms, equal weights",
        r.executions,
        r.start_failures,
        r.tenant_b,
        args.workers,
        args.worker_concurrency(),
        args.task_delay_ms
    );
    println!("  queue wait of tenant B's tasks (StepScheduled to handler):");
    println!("  idle         {}   {} measured", times(&out["idle"]), r.idle.measured);
    println!(
        "  behind A     {}   {} measured, {} of A's queued",
        times(&out["loaded"]),
        r.loaded.measured,
        r.a_queued_at_b
    );
    println!(
        "  ratio        loaded / idle p95 {} (issue 27: under 2), p50 {}",
        ratio("ratio_p95"),
        ratio("ratio_p50")
    );
    println!(
        "  tenant A     {} tasks started while B's ran ({:.0} ms)",
        r.a_started_during_b,
        r.b_window.as_secs_f64() * 1000.0
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

    fn phase(waits: &[u64]) -> Phase {
        let mut p = Phase::new().expect("histogram");
        for &w in waits {
            p.record(w);
        }
        p
    }

    #[test]
    fn the_json_has_every_documented_key_and_the_ratios() {
        let args = Cli::try_parse_from(["orbit-bench", "--mode", "fairness", "--output", "json"])
            .expect("parses")
            .bench;
        let report = Report {
            executions: 10_000,
            start_failures: 0,
            tenant_b: 4,
            idle: phase(&[1, 2, 2, 4]),
            loaded: phase(&[2, 3, 3, 6]),
            a_queued_at_b: 9_992,
            a_started_during_b: 40,
            b_window: Duration::from_millis(25),
        };
        let out = report.json(&args);
        for key in [
            "mode",
            "executions",
            "start_failures",
            "workers",
            "worker_concurrency",
            "task_delay_ms",
            "tenant_b",
            "ratio_p95",
            "ratio_p50",
            "a_queued_at_b",
            "a_started_during_b",
            "b_window_ms",
        ] {
            assert!(out.get(key).is_some(), "{key} in {out}");
        }
        assert_eq!(out["idle"]["p95_ms"].as_f64(), Some(4.0));
        assert_eq!(out["loaded"]["p95_ms"].as_f64(), Some(6.0));
        assert_eq!(out["ratio_p95"].as_f64(), Some(1.5));
        assert_eq!(out["ratio_p50"].as_f64(), Some(1.5));
        assert_eq!(out["a_started_during_b"], 40);
        assert_eq!(out["worker_concurrency"], 4, "the fairness preset's slots");
    }

    #[test]
    fn an_idle_figure_of_zero_gives_no_ratio() {
        let args =
            Cli::try_parse_from(["orbit-bench", "--mode", "fairness"]).expect("parses").bench;
        let report = Report {
            executions: 1,
            start_failures: 0,
            tenant_b: 1,
            idle: phase(&[0]),
            loaded: phase(&[3]),
            a_queued_at_b: 0,
            a_started_during_b: 0,
            b_window: Duration::ZERO,
        };
        assert!(report.json(&args)["ratio_p95"].is_null());
    }
}
