//! `orbit admin rate-limit set|list|delete`: the server-wide named rate limits that steps
//! take from (`rate_limit: {name: ...}` in a definition), over `AdminService.SetRateLimit`,
//! `ListRateLimits` and `DeleteRateLimit`. Like the other admin commands they need the
//! admin token when the server checks identities.

use clap::{Args, Subcommand};
use orbit_api::v1::{
    DeleteRateLimitRequest, ListRateLimitsRequest, ListRateLimitsResponse, RateLimit,
    SetRateLimitRequest,
};
use orbit_server_kit::payload::{duration_to_ms, ms_to_duration};
use serde_json::{json, Value as Json};

use super::error::Failure;
use super::output::{print_json, print_text, ts, ts_json, Fields, Format, Table};
use super::ConnectArgs;

/// The longest window the server accepts (`SetRateLimit`: 1 ms to 366 days).
const MAX_PERIOD_MS: u64 = 366 * 86_400_000;

/// `orbit admin ...`
#[derive(Args, Debug)]
pub struct AdminArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand, Debug)]
enum AdminCommand {
    /// Set, list and delete the server-wide named rate limits steps take from.
    ///
    /// A named limit allows at most LIMIT task starts per window of PERIOD, per bucket: the
    /// name, or the name and a step's evaluated `key:`. Windows are aligned to the Unix
    /// epoch. See docs/flow-control.md.
    #[command(subcommand)]
    RateLimit(RateLimitCommand),
}

#[derive(Subcommand, Debug)]
enum RateLimitCommand {
    /// Create or change a named rate limit: at most --limit task starts per window of --per.
    ///
    /// Steps use it with `rate_limit: {name: NAME}` in their definition (optionally with a
    /// `key:`, which gives each evaluated key its own bucket of the same size). In every
    /// window of --per at most --limit attempts of those steps start; the others stay
    /// queued for the next window. Windows are aligned to the Unix epoch (with `--per 1m`
    /// they start at every full minute), not to the first start, so up to twice --limit
    /// starts can fall within one period that straddles a window's edge. A change takes
    /// effect at each frontend's next claim; the starts already taken in the current window
    /// stay counted. Setting it again replaces the limit and the period.
    #[command(after_long_help = long_help!(
        "orbit admin rate-limit set payments-api --limit 10 --per 1s",
        "orbit admin rate-limit set nightly-export --limit 500 --per 1h --output json",
    ))]
    Set {
        /// The limit's name, as steps reference it: letters, digits, `_`, `.`, `-`, at
        /// most 128.
        name: String,
        /// Task starts per window, at least 1.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
        /// The window, e.g. `500ms`, `10s`, `1m`, `1h`, `1d` (1 ms to 366 days).
        #[arg(long, value_name = "DURATION", value_parser = parse_period)]
        per: prost_types::Duration,
    },
    /// List the named rate limits, by name: each one's limit, window and last change.
    #[command(after_long_help = long_help!(
        "orbit admin rate-limit list",
        "orbit admin rate-limit list --output json",
    ))]
    List,
    /// Delete a named rate limit.
    ///
    /// Attempts of steps that reference it stay queued (waiting on their rate limit) until
    /// it is set again. An unknown name is RATE_LIMIT_NOT_FOUND (exit 3).
    #[command(after_long_help = long_help!("orbit admin rate-limit delete payments-api"))]
    Delete {
        /// The limit's name.
        name: String,
    },
}

/// Parses `--per`: a duration in the syntax of every duration flag (`500ms`, `10s`,
/// `1m30s`, `1h`, `2d`; [`crate::flags::duration`]), from 1 ms to 366 days.
///
/// # Errors
///
/// Text that is not a duration, or one outside the range the server accepts.
fn parse_period(text: &str) -> Result<prost_types::Duration, String> {
    let ms = orbit_definition::parse_duration(text)?;
    if ms == 0 || ms > MAX_PERIOD_MS {
        return Err(format!("`{text}`: the window must be from 1ms to 366d"));
    }
    Ok(ms_to_duration(ms))
}

/// A window in the flags' own syntax (`1m`, `1h30m`, `500ms`), so what `list` prints can
/// be given to `--per` again.
fn period_text(period: Option<&prost_types::Duration>) -> String {
    period
        .and_then(|p| duration_to_ms(p).ok())
        .map_or_else(|| "-".to_owned(), orbit_definition::format_duration)
}

fn rate_limit_json(r: &RateLimit) -> Json {
    json!({
        "name": r.name,
        "limit": r.limit,
        "period": period_text(r.period.as_ref()),
        "period_ms": r.period.as_ref().and_then(|p| duration_to_ms(p).ok()),
        "updated_at": ts_json(r.updated_at.as_ref()),
    })
}

/// Runs `admin rate-limit ...`.
pub async fn run(args: AdminArgs) -> Result<(), Failure> {
    let AdminCommand::RateLimit(command) = args.command;
    let format = args.connect.output;
    let mut client = args.connect.admin_client().await?;
    match command {
        RateLimitCommand::Set { name, limit, per } => {
            let rate_limit = RateLimit { name, limit, period: Some(per), updated_at: None };
            let request = SetRateLimitRequest { rate_limit: Some(rate_limit) };
            let stored = client.set_rate_limit(request).await?.into_inner().rate_limit;
            let stored = stored.unwrap_or_default();
            match format {
                Format::Json => print_json(&json!({"rate_limit": rate_limit_json(&stored)})),
                Format::Human => print_text(
                    &Fields::new()
                        .add("rate limit", &stored.name)
                        .add(
                            "allows",
                            format!(
                                "{} task starts per {} (windows aligned to the epoch)",
                                stored.limit,
                                period_text(stored.period.as_ref())
                            ),
                        )
                        .add("updated", ts(stored.updated_at.as_ref()))
                        .render(),
                ),
            }
        }
        RateLimitCommand::List => {
            let mut limits = ListRateLimitsResponse::default();
            loop {
                let request =
                    ListRateLimitsRequest { page_size: 1000, page_token: limits.next_page_token };
                let page = client.list_rate_limits(request).await?.into_inner();
                limits.rate_limits.extend(page.rate_limits);
                limits.next_page_token = page.next_page_token;
                if limits.next_page_token.is_empty() {
                    break;
                }
            }
            match format {
                Format::Json => print_json(&json!({
                    "rate_limits": limits.rate_limits.iter().map(rate_limit_json).collect::<Vec<_>>(),
                })),
                Format::Human if limits.rate_limits.is_empty() => {
                    print_text(
                        "no rate limits (orbit admin rate-limit set NAME --limit N --per 1m)\n",
                    );
                }
                Format::Human => print_text(&limits_table(&limits.rate_limits).render()),
            }
        }
        RateLimitCommand::Delete { name } => {
            let request = DeleteRateLimitRequest { name: name.clone() };
            client.delete_rate_limit(request).await?;
            match format {
                Format::Json => print_json(&json!({"name": name, "deleted": true})),
                Format::Human => print_text(&format!("deleted rate limit {name}\n")),
            }
        }
    }
    Ok(())
}

fn limits_table(limits: &[RateLimit]) -> Table {
    let mut table = Table::new(&["NAME", "LIMIT", "PER", "UPDATED"]);
    for r in limits {
        table.row(vec![
            r.name.clone(),
            r.limit.to_string(),
            period_text(r.period.as_ref()),
            ts(r.updated_at.as_ref()),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_parse_in_the_flags_syntax_and_print_back() {
        for (text, seconds, nanos, back) in [
            ("500ms", 0, 500_000_000, "500ms"),
            ("10s", 10, 0, "10s"),
            ("1m", 60, 0, "1m"),
            ("90s", 90, 0, "1m30s"),
            ("1h", 3_600, 0, "1h"),
            ("366d", 366 * 86_400, 0, "366d"),
        ] {
            let period = parse_period(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((period.seconds, period.nanos), (seconds, nanos), "{text}");
            assert_eq!(period_text(Some(&period)), back, "{text}");
        }
        assert_eq!(period_text(None), "-");
    }

    #[test]
    fn periods_outside_the_servers_range_are_refused() {
        for bad in ["0s", "0ms", "367d", "10", "1 minute", ""] {
            assert!(parse_period(bad).is_err(), "{bad}");
        }
        assert!(parse_period("0s").unwrap_err().contains("from 1ms to 366d"));
    }

    #[test]
    fn limits_convert_for_json_and_the_table() {
        let limit = RateLimit {
            name: "payments-api".into(),
            limit: 10,
            period: Some(ms_to_duration(1_000)),
            updated_at: None,
        };
        let j = rate_limit_json(&limit);
        assert_eq!(j["period"], "1s");
        assert_eq!(j["period_ms"], 1000);
        assert_eq!(j["updated_at"], Json::Null);
        let text = limits_table(&[limit]).render();
        assert_eq!(text, "NAME          LIMIT  PER  UPDATED\npayments-api  10     1s   -\n");
    }
}
