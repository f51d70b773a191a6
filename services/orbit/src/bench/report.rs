//! The report of `orbit bench`: a few human lines or one JSON document.

use super::args::{BenchArgs, Shape};
use super::db::{Idle, RunCounts};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::Duration;

/// What a run measured.
pub struct Measured<'a> {
    pub elapsed: Duration,
    pub tasks: u64,
    pub failures: u64,
    pub e2e: &'a Mutex<Histogram<u64>>,
    pub dispatch: &'a Mutex<Histogram<u64>>,
}

/// The optional parts of the report.
pub struct Sections<'a> {
    /// Transactions counted by PostgreSQL over the run (`--database-url`).
    pub transactions: Option<RunCounts>,
    /// Transactions per second while idle after the run (`--idle-seconds`).
    pub idle: Option<Idle>,
    /// The servers' own view ([`crate::bench_server`]): the line and its JSON.
    pub server_view: Option<(String, Value)>,
    /// The replay check of the completed executions (`--replay`).
    pub replay: Option<&'a super::replay::Replayed>,
}

pub fn report(args: &BenchArgs, shape: Shape, m: Measured<'_>, sections: Sections<'_>) {
    let Sections { transactions, idle, server_view, replay } = sections;
    let Measured { elapsed, tasks, failures, e2e, dispatch } = m;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let pct = |h: &Mutex<Histogram<u64>>, q: f64| {
        h.lock().map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0)
    };
    let per_task = |n: u64| n as f64 / tasks.max(1) as f64;
    let mut out = json!({
        "mode": args.mode.map(|m| format!("{m:?}").to_lowercase()),
        "executions": shape.executions,
        "steps": shape.steps,
        "concurrency": shape.concurrency,
        "failures": failures,
        "seconds": secs,
        "executions_per_s": shape.executions as f64 / secs,
        "tasks_per_s": tasks as f64 / secs,
        "e2e_ms": { "p50": pct(e2e, 0.5), "p95": pct(e2e, 0.95), "p99": pct(e2e, 0.99) },
        "dispatch_ms": { "p50": pct(dispatch, 0.5), "p95": pct(dispatch, 0.95), "p99": pct(dispatch, 0.99) },
    });
    if let Some(t) = transactions {
        out["database"] = json!({
            "write_transactions": t.writes,
            "write_transactions_per_task": per_task(t.writes),
            "read_transactions": t.reads(),
            "read_transactions_per_task": per_task(t.reads()),
            "commits": t.commits,
            "commits_per_task": per_task(t.commits),
            "statements": t.statements,
            "statements_per_task": t.statements.map(per_task),
        });
    }
    if let Some(i) = idle {
        out["idle"] = json!({
            "seconds": i.seconds,
            "commits": i.commits,
            "transactions_per_s": i.per_second(),
            "statements": i.statements,
            "statements_per_s": i.statements_per_second(),
        });
    }
    if let Some((_, json)) = &server_view {
        out["server"] = json.clone();
    }
    if let Some(r) = replay {
        out["replay"] = r.json();
    }
    if args.output == "json" {
        println!("{out}");
        return;
    }
    println!(
        "orbit bench: {} executions x {} steps, {} in flight, {} failed",
        shape.executions, shape.steps, shape.concurrency, failures
    );
    println!(
        "  throughput   {:>9.1} executions/s   {:>9.1} tasks/s   ({secs:.2} s)",
        out["executions_per_s"].as_f64().unwrap_or(0.0),
        out["tasks_per_s"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  end-to-end   p50 {:>7.2} ms   p95 {:>7.2} ms   p99 {:>7.2} ms",
        pct(e2e, 0.5),
        pct(e2e, 0.95),
        pct(e2e, 0.99)
    );
    if args.workers > 0 {
        println!(
            "  dispatch     p50 {:>7.2} ms   p95 {:>7.2} ms   p99 {:>7.2} ms",
            pct(dispatch, 0.5),
            pct(dispatch, 0.95),
            pct(dispatch, 0.99)
        );
    } else {
        println!("  dispatch     not measured (external workers)");
    }
    if let Some(t) = transactions {
        println!(
            "  database     {:.2} transactions per task: {:.2} writes + {:.2} reads ({} commits, {} write transactions)",
            per_task(t.commits),
            per_task(t.writes),
            per_task(t.reads()),
            t.commits,
            t.writes
        );
        if let Some(s) = t.statements {
            println!(
                "               {:.2} statements per task (pg_stat_statements, BEGIN/COMMIT left out; {s} statements)",
                per_task(s)
            );
        }
    }
    if let Some(i) = idle {
        println!(
            "  idle         {:.2} transactions/s ({} commits in {:.1} s, workers connected)",
            i.per_second(),
            i.commits,
            i.seconds
        );
        match i.statements_per_second() {
            Some(s) => println!(
                "               {s:.2} statements/s (pg_stat_statements: counted at once; the \
                 transactions above are published late and can include a run's tail)"
            ),
            None => println!(
                "               (CREATE EXTENSION pg_stat_statements in the database for a \
                 statement count that is not published late)"
            ),
        }
    }
    if let Some((text, _)) = &server_view {
        println!("{text}");
    }
    for line in replay.map(super::replay::Replayed::lines).unwrap_or_default() {
        println!("{line}");
    }
}
