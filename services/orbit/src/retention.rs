//! The retention flags: how long finished executions are kept (read by the owner, which
//! records `delete_after` when an execution closes) and how the sweeper deletes what expired
//! and what was applied (run by the scheduler, and inside `orbit dev`).

use orbit_cli::flags::duration;
use orbit_scheduler::SweeperConfig;
use std::time::Duration;

/// Milliseconds of a flag's duration.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `--retention`: for the process that closes executions (owner, dev).
#[derive(clap::Args, Debug, Clone)]
pub struct RetentionArg {
    /// How long a finished execution (with its history, children and every row of theirs)
    /// is kept before the sweeper deletes it, unless its workflow sets `retention`. Recorded
    /// on the execution when it closes, so a change applies to executions closing after it.
    /// Example: --retention 30d
    #[arg(long, env = "ORBIT_RETENTION", default_value = "7d", value_parser = duration, value_name = "DURATION")]
    pub retention: Duration,
}

/// The sweeper's flags: for the process that runs it (scheduler, dev).
#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// How long applied inbox entries and done task rows are kept, and how long a closed
    /// execution tree keeps its owners rows. Must exceed the frontends' --reply-timeout-ms
    /// (a waiting caller reads its reply within it). Example: --done-grace 2m
    #[arg(long, env = "ORBIT_DONE_GRACE", default_value = "1m", value_parser = duration, value_name = "DURATION")]
    pub done_grace: Duration,
    /// How often the retention sweeper runs; each run deletes in batches of at most 500 rows
    /// (50 execution trees) per transaction, pausing between batches. Each run costs a few
    /// transactions even with nothing to delete, so the default is slow (idle cost, issue
    /// 14). Example: --sweep-interval 30s
    #[arg(long, env = "ORBIT_SWEEP_INTERVAL", default_value = "60s", value_parser = duration, value_name = "DURATION")]
    pub sweep_interval: Duration,
    /// How long a finished batch job (completed, cancelled or failed), with its per-execution
    /// items, is kept after its last change before the sweeper deletes it; GetBatch then
    /// answers BATCH_NOT_FOUND. Running jobs are never deleted. Example: --batch-retention 30d
    #[arg(long, env = "ORBIT_BATCH_RETENTION", default_value = "7d", value_parser = duration, value_name = "DURATION")]
    pub batch_retention: Duration,
}

impl SweepArgs {
    /// The sweeper's configuration.
    #[must_use]
    pub fn config(&self) -> SweeperConfig {
        SweeperConfig {
            interval: self.sweep_interval,
            done_grace: self.done_grace,
            batch_retention: self.batch_retention,
            ..SweeperConfig::default()
        }
    }

    /// Refuses a grace a waiting caller could outlive and a zero interval.
    pub fn check(&self, reply_timeout_ms: u64) -> Result<(), String> {
        if millis(self.done_grace) < reply_timeout_ms {
            return Err(format!(
                "--done-grace ({} ms) must be at least the reply timeout ({reply_timeout_ms} ms): \
                 a caller waiting for an owner's reply must find it",
                millis(self.done_grace)
            ));
        }
        if self.sweep_interval.is_zero() {
            return Err("--sweep-interval must be above zero".into());
        }
        Ok(())
    }
}

impl Default for RetentionArg {
    fn default() -> Self {
        RetentionArg { retention: Duration::from_millis(orbit_owner::DEFAULT_RETENTION_MS) }
    }
}

impl Default for SweepArgs {
    fn default() -> Self {
        let d = SweeperConfig::default();
        SweepArgs {
            done_grace: d.done_grace,
            sweep_interval: d.interval,
            batch_retention: d.batch_retention,
        }
    }
}
