//! Server-wide limits (`--max-*`, each also an `ORBIT_MAX_*` variable). A workflow's own
//! `limits:` can only tighten them: the engine applies the stricter of the two
//! (`orbit_engine::effective_limits`), as SEMANTICS.md "Limits" says.

use orbit_definition::Limits;
use orbit_server_kit::payload::DEFAULT_MAX_PAYLOAD_BYTES;

/// The payload limit, for every process that accepts payloads (frontend and owner).
#[derive(clap::Args, Debug, Clone)]
pub struct PayloadLimitArg {
    /// Largest input, signal payload, task output or recorded value, in bytes (the larger
    /// of its JSON and protobuf length). At most the default 2 MiB: reads are sized for it.
    /// Example: --max-payload-bytes 65536
    #[arg(long, env = "ORBIT_MAX_PAYLOAD_BYTES", value_name = "BYTES",
          default_value_t = DEFAULT_MAX_PAYLOAD_BYTES,
          value_parser = clap::value_parser!(u64).range(1..=DEFAULT_MAX_PAYLOAD_BYTES))]
    pub max_payload_bytes: u64,
}

/// The limits an owner enforces (no limit where a flag is not given, except payloads and
/// history events).
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Open executions above which StartExecution answers RESOURCE_EXHAUSTED (counted once
    /// per start). Example: --max-active-executions 100000
    #[arg(long, env = "ORBIT_MAX_ACTIVE_EXECUTIONS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_executions: Option<u64>,
    /// Events one run's history may hold; over it the run fails with LIMIT_EXCEEDED
    /// (compensation and handlers still run). A long-lived execution continues as new
    /// before it gets there. `off`: no limit. Example: --max-history-events 20000
    #[arg(long, env = "ORBIT_MAX_HISTORY_EVENTS", value_name = "N|off",
          default_value = DEFAULT_MAX_HISTORY_EVENTS, value_parser = parse_history_limit)]
    pub max_history_events: HistoryLimit,
    /// Items one `for_each` may fan out to; more fails the step with LIMIT_EXCEEDED.
    /// Example: --max-fan-out 1000
    #[arg(long, env = "ORBIT_MAX_FAN_OUT", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_fan_out: Option<u64>,
    /// Durable timers (`sleep` and `until` steps) one run may start; the step that would
    /// start one more fails with LIMIT_EXCEEDED. Example: --max-timers 1000
    #[arg(long, env = "ORBIT_MAX_TIMERS", value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_timers: Option<u64>,
    #[command(flatten)]
    pub payload: PayloadLimitArg,
    /// Owner memory: an execution left only sleeping or awaiting (a signal, a child, a
    /// retry's backoff; no task in flight) whose next timer is at least this many
    /// milliseconds away is dropped from memory after its commit and reloaded from its
    /// history at its next event. `off` keeps every open execution in memory.
    /// Example: --evict-after-ms 5000
    #[arg(long, env = "ORBIT_EVICT_AFTER_MS", value_name = "MS|off",
          default_value = "1000", value_parser = parse_evict)]
    pub evict_after_ms: Evict,
}

/// The default of `--max-history-events`: a run's history is read whole when its
/// execution is reloaded, so a bound keeps a runaway loop of signals or steps from growing
/// it without end (Temporal's hard limit is of the same order, 51,200).
const DEFAULT_MAX_HISTORY_EVENTS: &str = "50000";

/// The value of `--max-history-events`: `None` is `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimit(pub Option<u64>);

fn parse_history_limit(s: &str) -> Result<HistoryLimit, String> {
    match s {
        "off" => Ok(HistoryLimit(None)),
        n => match n.parse::<u64>() {
            Ok(0) | Err(_) => Err(format!("`{n}`: a number of events (at least 1) or `off`")),
            Ok(events) => Ok(HistoryLimit(Some(events))),
        },
    }
}

/// The value of `--evict-after-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evict(pub Option<u64>);

fn parse_evict(s: &str) -> Result<Evict, String> {
    match s {
        "off" => Ok(Evict(None)),
        n => {
            n.parse().map(|ms| Evict(Some(ms))).map_err(|_| format!("`{n}`: milliseconds or `off`"))
        }
    }
}

impl LimitArgs {
    /// The engine's server-side limits.
    #[must_use]
    pub fn engine(&self) -> Limits {
        Limits {
            max_fan_out: self.max_fan_out,
            max_history_events: self.max_history_events.0,
            max_payload_bytes: Some(self.payload.max_payload_bytes),
            max_timers: self.max_timers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: LimitArgs,
    }

    fn history(args: &[&str]) -> Result<Option<u64>, String> {
        let argv = std::iter::once("orbit").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .map(|c| c.limits.engine().max_history_events)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn history_events_are_bounded_by_default_and_off_lifts_the_bound() {
        assert_eq!(history(&[]), Ok(Some(50_000)), "bounded without the flag");
        assert_eq!(history(&["--max-history-events", "300"]), Ok(Some(300)));
        assert_eq!(history(&["--max-history-events", "off"]), Ok(None));
        for bad in ["0", "-1", "lots"] {
            let refused = history(&["--max-history-events", bad]).unwrap_err();
            assert!(refused.contains("at least 1") || refused.contains(bad), "{refused}");
        }
    }
}
