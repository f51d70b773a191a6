//! The options of `orbit bench` and the `--mode` presets: a preset names the shape of a
//! run (executions, steps, executions in flight) that the issue 14 comparison table uses,
//! so two machines or two builds run the same workload; an explicit flag overrides the
//! preset's value.

/// A named workload shape.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 2,000 executions x 3 steps at 64 in flight: executions per second.
    Throughput,
    /// 200 executions x 3 steps one at a time (concurrency 1): unloaded end-to-end latency.
    Latency,
    /// 10,000 executions that sleep until one instant (no task, no worker), started 64 at
    /// a time: the owner's RSS while they sleep and the time to wake them all
    /// (`bench::sleepers`).
    Sleepers,
    /// Priority-1 schedule-to-start, unloaded and behind a backlog of 5,000 priority-5
    /// tasks on workers of bounded capacity (issue 27; `bench::priority`).
    Priority,
    /// A small tenant's queue wait behind a large one's 10,000 queued tasks, against its
    /// wait on idle workers (issue 27; `bench::fairness`).
    Fairness,
}

/// What a run does once the preset and the flags are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub executions: u64,
    pub steps: u32,
    pub concurrency: usize,
}

impl Mode {
    /// The preset's shape.
    pub fn shape(self) -> Shape {
        match self {
            Mode::Throughput => Shape { executions: 2000, steps: 3, concurrency: 64 },
            Mode::Latency => Shape { executions: 200, steps: 3, concurrency: 1 },
            Mode::Sleepers => Shape { executions: 10_000, steps: 0, concurrency: 64 },
            Mode::Priority => Shape { executions: 5000, steps: 1, concurrency: 64 },
            Mode::Fairness => Shape { executions: 10_000, steps: 1, concurrency: 64 },
        }
    }
}

/// Options of `orbit bench`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Presets (--mode; an explicit --executions/--steps/--concurrency overrides):\n  throughput  2000 executions x 3 steps, 64 in flight (the default)\n  latency     200 executions x 3 steps, one at a time: unloaded end-to-end latency\n  sleepers    10000 executions sleeping until one instant, no worker: owner RSS while\n              they sleep, time to wake them all (--sleep-seconds, --owner-pid)\n  priority    p50/p95 schedule-to-start of priority-1 executions run one at a time, first\n              with idle workers, then behind a backlog of 5000 priority-5 tasks (the\n              executions) on 2 workers x 4 slots whose tasks take --task-delay-ms;\n              the loaded/unloaded p50 ratio is issue 27's figure (--probes, --min-backlog)\n  fairness    p50/p95 queue wait of tenant B's --probes tasks, first on idle workers,\n              then behind tenant A's 10000 queued tasks (the executions), equal fair\n              weights, 2 workers x 4 slots; the loaded/idle p95 ratio is issue 27's\n              figure, with A's tasks started while B's ran\n\nExample:\n  orbit bench --mode throughput\n  orbit bench --mode latency --executions 1000\n  orbit bench --address http://127.0.0.1:7233   # against a running server\n  orbit bench --address \"$ORBIT_FRONTENDS\" --database-url \"$ORBIT_DATABASE_URL\" --idle-seconds 30\n  orbit bench --address 127.0.0.1:7233 --workers 0   # external workers serve bench.step (per-SDK figures)\n  orbit bench --address localhost:7233 --tls-ca ca.pem --token \"$ADMIN_TOKEN\"   # with TLS and identities\n  orbit bench --mode priority\n  orbit bench --mode priority --address 127.0.0.1:7233 --output json\n  orbit bench --mode fairness\n  orbit bench --mode sleepers --executions 100000 --address 127.0.0.1:7233 --metrics 127.0.0.1:9233 --owner-pid \"$(pgrep -n orbit)\""
)]
pub struct BenchArgs {
    /// Workload preset: `throughput` (2000 executions x 3 steps, 64 in flight), `latency`
    /// (200 executions x 3 steps, one at a time), `sleepers`, `priority` or `fairness` (see
    /// below).
    /// Flags given explicitly override it.
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Executions to run [default: the preset's; 2000].
    #[arg(long)]
    pub executions: Option<u64>,
    /// Sequential task steps per execution [default: the preset's; 3].
    #[arg(long)]
    pub steps: Option<u32>,
    /// Executions in flight at once [default: the preset's; 64].
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Start executions at this fixed rate (per second) instead of as fast as the
    /// concurrency allows; for soak runs (see scripts/soak.sh). 0: no pacing.
    #[arg(long, env = "ORBIT_BENCH_RATE", default_value_t = 0.0)]
    pub rate: f64,
    /// Worker processes' worth of sessions (each one stream). 0 (only with `--address`):
    /// no in-process workers; external worker processes serve `bench.step` (version "1",
    /// returning its input), so the figures are those of those workers, e.g. one SDK's
    /// conformance worker (sdks/conformance/README.md). Tasks are then counted from the
    /// completed executions and the dispatch latency is not measured.
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Tasks each worker runs at once [default: 64; 4 with `--mode priority` and `fairness`, whose workers
    /// must stay busy while a backlog waits].
    #[arg(long)]
    pub worker_concurrency: Option<u32>,
    /// Benchmark a running server instead of starting an embedded one. Several frontends
    /// (comma-separated) share the load: worker `w` and execution `i` use frontend `w % n`
    /// and `i % n`.
    #[arg(long)]
    pub address: Option<String>,
    /// With `--address`: the cluster's PostgreSQL URL, to count the database transactions per
    /// completed task, writes and reads (read from the database's own counters before and
    /// after the run).
    #[arg(long, env = "ORBIT_DATABASE_URL")]
    pub database_url: Option<String>,
    /// With `--database-url`: after the run, with the benchmark's workers still connected but
    /// nothing to do, count the database's committed transactions for this many seconds and
    /// print them per second (the cluster's idle cost). 0: skip.
    #[arg(long, default_value_t = 0)]
    pub idle_seconds: u64,
    /// `--mode sleepers`: seconds from the first start to the common wake instant (it must
    /// leave time to start them all) [default: 20 + executions / 100].
    #[arg(long, value_name = "S")]
    pub sleep_seconds: Option<u64>,
    /// `--mode sleepers` with `--address`: the owner's process id, whose `VmRSS` is read
    /// (`orbit dev`'s own, or one `orbit owner`'s). The embedded server is this process.
    #[arg(long, value_name = "PID")]
    pub owner_pid: Option<u32>,
    /// `--mode priority`: priority-1 executions measured in each phase (unloaded, loaded);
    /// `--mode fairness`: tenant B's executions in each phase (idle, loaded).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub probes: u64,
    /// `--mode priority` and `fairness`: how long each task's handler sleeps, so that the workers' bounded
    /// capacity drains the backlog slowly enough to measure behind it.
    #[arg(long, default_value_t = 2, value_name = "MS")]
    pub task_delay_ms: u64,
    /// `--mode priority`: each priority-1 execution starts a random 0 to MS milliseconds
    /// after the previous one completed, in both phases, so that its arrival is not
    /// phase-locked to the workers' slot cycle (a closed loop starts each just after the
    /// slots were refilled, and waits a whole cycle). 0 starts each at once.
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub probe_gap_ms: u64,
    /// `--mode priority`: each priority-5 task's handler sleeps a random time within this
    /// percentage of `--task-delay-ms` either side (the mean stays `--task-delay-ms`), so
    /// that the slots do not finish in lockstep. 0 gives every task the same time.
    #[arg(long, default_value_t = 50, value_name = "PCT", value_parser = clap::value_parser!(u64).range(0..=100))]
    pub task_jitter_pct: u64,
    /// `--mode priority`: loaded measurements stop once fewer priority-5 tasks than this wait
    /// (not yet started): every loaded figure is taken behind at least this backlog.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub min_backlog: u64,
    /// After the run, replay every completed execution against the server's decider
    /// (`AdminService.Replay`, 16 at a time; the identity needs `admin` with `--token`) and
    /// report how many it reproduced; the command fails (exit 1) when one diverged or could
    /// not be replayed.
    #[arg(long)]
    pub replay: bool,
    /// SQLite file of the embedded server (a fresh temporary file by default).
    #[arg(long)]
    pub db: Option<std::path::PathBuf>,
    /// `human` or `json`.
    #[arg(long, default_value = "human")]
    pub output: String,
    /// With `--address`: a bearer token for a server that enforces an identities file
    /// (docs/security.md), sent by the benchmark's calls and by its workers; the identity
    /// needs `register`, `start` and `read` and may run workers, e.g. an `admin`.
    #[arg(long, env = "ORBIT_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// With `--address`: the servers' admin ports (`host:port`, comma-separated), whose
    /// `/metrics` give the server-side view at the end (backlog, schedule-to-start p99,
    /// commit latency). The embedded server is read in process.
    /// Example: --metrics 127.0.0.1:9233,127.0.0.1:9234
    #[arg(long, env = "ORBIT_BENCH_METRICS", value_name = "HOST:PORT,...")]
    pub metrics: Option<String>,
    /// With `--address`: TLS to the running server.
    #[command(flatten)]
    pub tls: orbit_cli::flags::ClientTlsArgs,
    /// Traces of the embedded server and the benchmark's workers (to measure their cost).
    #[command(flatten)]
    pub traces: crate::trace_args::TraceArgs,
}

impl BenchArgs {
    /// The run's shape: each explicit flag, else the preset's value (throughput when no
    /// preset is named, which is also what the flags defaulted to before presets existed).
    pub fn shape(&self) -> Shape {
        let preset = self.mode.unwrap_or(Mode::Throughput).shape();
        Shape {
            executions: self.executions.unwrap_or(preset.executions),
            steps: self.steps.unwrap_or(preset.steps),
            concurrency: self.concurrency.unwrap_or(preset.concurrency),
        }
    }

    /// Tasks each in-process worker runs at once: the flag, else 4 for `--mode priority`
    /// and `--mode fairness`
    /// (2 workers x 4: a backlog builds and lasts) and 64 otherwise.
    pub fn worker_concurrency(&self) -> u32 {
        let preset = match self.mode {
            Some(Mode::Priority | Mode::Fairness) => 4,
            _ => 64,
        };
        self.worker_concurrency.unwrap_or(preset)
    }
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

    fn parse(argv: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("orbit-bench").chain(argv.iter().copied()))
            .expect("parses")
            .bench
    }

    fn shape(argv: &[&str]) -> Shape {
        parse(argv).shape()
    }

    #[test]
    fn presets_resolve_to_the_issue_table_shapes() {
        let throughput = Shape { executions: 2000, steps: 3, concurrency: 64 };
        assert_eq!(shape(&[]), throughput, "no preset: the throughput shape");
        assert_eq!(shape(&["--mode", "throughput"]), throughput);
        assert_eq!(
            shape(&["--mode", "latency"]),
            Shape { executions: 200, steps: 3, concurrency: 1 }
        );
    }

    #[test]
    fn explicit_flags_override_only_their_own_value() {
        assert_eq!(
            shape(&["--mode", "latency", "--executions", "5"]),
            Shape { executions: 5, steps: 3, concurrency: 1 }
        );
        assert_eq!(
            shape(&["--concurrency", "8", "--mode", "throughput", "--steps", "1"]),
            Shape { executions: 2000, steps: 1, concurrency: 8 }
        );
        assert_eq!(
            shape(&["--executions", "10"]),
            Shape { executions: 10, steps: 3, concurrency: 64 }
        );
    }

    #[test]
    fn an_unknown_mode_is_refused() {
        assert!(Cli::try_parse_from(["orbit-bench", "--mode", "fast"]).is_err());
        let idle = Cli::try_parse_from(["orbit-bench", "--idle-seconds", "7"]).expect("parses");
        assert_eq!(idle.bench.idle_seconds, 7);
    }

    #[test]
    fn the_priority_preset_queues_5000_one_step_executions_on_8_slots() {
        let args = parse(&["--mode", "priority"]);
        assert_eq!(args.shape(), Shape { executions: 5000, steps: 1, concurrency: 64 });
        assert_eq!((args.workers, args.worker_concurrency()), (2, 4), "8 slots in all");
        assert_eq!((args.probes, args.task_delay_ms, args.min_backlog), (100, 2, 1000));
        assert_eq!((args.probe_gap_ms, args.task_jitter_pct), (10, 50));
        assert!(Cli::try_parse_from(["orbit-bench", "--task-jitter-pct", "101"]).is_err());
        // Other modes keep their wide workers; an explicit flag wins in every mode.
        assert_eq!(parse(&[]).worker_concurrency(), 64);
        assert_eq!(parse(&["--mode", "latency"]).worker_concurrency(), 64);
        let small = parse(&[
            "--mode",
            "priority",
            "--executions",
            "300",
            "--worker-concurrency",
            "1",
            "--probes",
            "5",
            "--min-backlog",
            "50",
            "--task-delay-ms",
            "10",
        ]);
        assert_eq!(small.shape().executions, 300);
        assert_eq!(small.worker_concurrency(), 1);
        assert_eq!((small.probes, small.task_delay_ms, small.min_backlog), (5, 10, 50));
    }
}
