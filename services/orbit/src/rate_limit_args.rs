//! `--rate-limit NAME=LIMIT/PERIOD` (issue 27; docs/flow-control.md): server-wide named rate
//! limits a frontend (or `orbit dev`) sets in the database each time it starts, so steps
//! that say `rate_limit: {name: NAME}` find them. `orbit admin rate-limit` changes them at
//! run time.

use orbit_cli::flags::duration;
use std::time::Duration;

/// The longest window a named limit may have (as `AdminService.SetRateLimit` allows).
const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

/// One `--rate-limit` flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitFlag {
    /// The name steps reference.
    pub name: String,
    /// Task starts per window.
    pub limit: u32,
    /// The window, milliseconds.
    pub period_ms: u64,
}

/// The flag, for the processes that serve the public API.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RateLimitArgs {
    /// A server-wide named rate limit, set in the database at every start (repeat the flag
    /// for several): at most LIMIT task starts per window of PERIOD, windows aligned to the
    /// epoch, for steps that declare `rate_limit: {name: NAME}`. Changed at run time with
    /// `orbit admin rate-limit set`. Example: --rate-limit partner-api=100/1m
    #[arg(long = "rate-limit", env = "ORBIT_RATE_LIMITS", value_delimiter = ',',
          value_name = "NAME=LIMIT/PERIOD", value_parser = parse_rate_limit)]
    pub rate_limits: Vec<RateLimitFlag>,
}

impl RateLimitArgs {
    /// Stores every flag's limit. A failure stops the start: the process would otherwise
    /// run steps against a limit it was told to set.
    ///
    /// # Errors
    /// The store's.
    pub async fn apply(&self, store: &dyn orbit_store::RateLimits) -> orbit_store::Result<()> {
        for flag in &self.rate_limits {
            store.set_rate_limit(&flag.name, flag.limit, flag.period_ms).await?;
            tracing::info!(name = %flag.name, limit = flag.limit, period_ms = flag.period_ms, "rate limit set");
        }
        Ok(())
    }
}

/// `NAME=LIMIT/PERIOD`, e.g. `partner-api=100/1m`.
fn parse_rate_limit(text: &str) -> Result<RateLimitFlag, String> {
    let usage = "expected NAME=LIMIT/PERIOD, e.g. partner-api=100/1m";
    let (name, rest) = text.split_once('=').ok_or(usage)?;
    let (limit, period) = rest.split_once('/').ok_or(usage)?;
    let name_ok = (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !name_ok {
        return Err(format!("name `{name}`: 1 to 128 of A-Z a-z 0-9 _ . -"));
    }
    let limit: u32 = limit.parse().map_err(|_| format!("limit `{limit}`: not a whole number"))?;
    if limit == 0 {
        return Err("limit: at least 1".into());
    }
    let period = duration(period).map_err(|e| format!("period `{period}`: {e}"))?;
    if period.is_zero() || period > MAX_PERIOD {
        return Err(format!(
            "period `{}`: from 1ms to 366d",
            rest.split_once('/').map_or("", |p| p.1)
        ));
    }
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
    Ok(RateLimitFlag { name: name.to_string(), limit, period_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_reads_name_limit_and_period() {
        let flag = parse_rate_limit("partner-api=100/1m").expect("valid");
        assert_eq!(
            flag,
            RateLimitFlag { name: "partner-api".into(), limit: 100, period_ms: 60_000 }
        );
        assert_eq!(parse_rate_limit("a.b_c=1/500ms").expect("valid").period_ms, 500);
    }

    #[test]
    fn a_bad_flag_says_what_is_wrong() {
        for (text, says) in [
            ("partner", "NAME=LIMIT/PERIOD"),
            ("p=100", "NAME=LIMIT/PERIOD"),
            ("=1/1s", "name"),
            ("a b=1/1s", "name"),
            ("p=0/1s", "at least 1"),
            ("p=x/1s", "whole number"),
            ("p=1/0s", "period"),
            ("p=1/400d", "period"),
        ] {
            let e = parse_rate_limit(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
