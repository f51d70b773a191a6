//! A compiled [`Spec`] and its next occurrence, with the DST rules.
//!
//! Cron expressions are parsed by `croner` and evaluated on the *local wall clock* of the
//! spec's time zone (chrono-tz); each matching wall-clock time is then mapped to an
//! instant:
//! - a time that exists once maps to it;
//! - a time that does not exist (spring forward: 02:30 in Europe/Berlin on the last Sunday
//!   of March) maps to the first valid time after the gap (03:00), so the skipped times of
//!   the gap fire once, together, at the end of the gap;
//! - a time that exists twice (fall back) fires once, at its first (earlier) instant; the
//!   repeated hour does not fire again.
//!
//! Intervals are absolute (`offset + k * every` after the Unix epoch): DST does not move
//! them. A spec with several crons and intervals fires at the union of their occurrences,
//! each instant once.

use crate::def::{IntervalDef, SpecDef};
use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use sha2::{Digest, Sha256};

/// A spec that cannot be compiled, with the path of the offending field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The field path, for example `spec.crons[1]` or `spec.timezone`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for SpecError {}

fn error(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError { field: field.into(), message: message.into() }
}

/// The shortest interval.
const MIN_INTERVAL_MS: u64 = 1_000;

/// A compiled spec: parsed crons, the zone, the window.
#[derive(Debug, Clone)]
pub struct Spec {
    crons: Vec<Cron>,
    intervals: Vec<IntervalDef>,
    tz: Tz,
    start_at_ms: Option<u64>,
    end_at_ms: Option<u64>,
    jitter_ms: u64,
}

impl Spec {
    /// Compiles and checks a stored spec; errors name the field (`spec.crons[i]`, ...).
    ///
    /// # Errors
    /// A bad cron expression, interval, time zone or window.
    pub fn compile(def: &SpecDef) -> Result<Spec, SpecError> {
        if def.crons.is_empty() && def.intervals.is_empty() {
            return Err(error("spec", "needs at least one cron expression or interval"));
        }
        let parser =
            CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let mut crons = Vec::with_capacity(def.crons.len());
        for (i, text) in def.crons.iter().enumerate() {
            let cron = parser
                .parse(text)
                .map_err(|e| error(format!("spec.crons[{i}]"), format!("{text:?}: {e}")))?;
            crons.push(cron);
        }
        for (i, iv) in def.intervals.iter().enumerate() {
            if iv.every_ms < MIN_INTERVAL_MS {
                return Err(error(format!("spec.intervals[{i}]"), "must be at least one second"));
            }
            if iv.offset_ms >= iv.every_ms {
                return Err(error(
                    format!("spec.intervals[{i}].offset"),
                    "must be smaller than the interval",
                ));
            }
        }
        let tz = if def.timezone.is_empty() {
            Tz::UTC
        } else {
            def.timezone.parse::<Tz>().map_err(|_| {
                error("spec.timezone", format!("{:?} is not an IANA time zone", def.timezone))
            })?
        };
        if let (Some(s), Some(e)) = (def.start_at_ms, def.end_at_ms) {
            if e <= s {
                return Err(error("spec.end_at", "must be after start_at"));
            }
        }
        Ok(Spec {
            crons,
            intervals: def.intervals.clone(),
            tz,
            start_at_ms: def.start_at_ms,
            end_at_ms: def.end_at_ms,
            jitter_ms: def.jitter_ms,
        })
    }

    /// The first occurrence strictly after `after_ms` within the start/end window, or `None`
    /// when the schedule has ended.
    #[must_use]
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        let after = match self.start_at_ms {
            Some(s) if s > 0 && after_ms < s => s - 1,
            _ => after_ms,
        };
        let cron = self.crons.iter().filter_map(|c| cron_next(c, self.tz, after));
        let interval = self.intervals.iter().map(|iv| interval_next(*iv, after));
        let next = cron.chain(interval).min()?;
        match self.end_at_ms {
            Some(end) if next >= end => None,
            _ => Some(next),
        }
    }

    /// Up to `count` occurrences strictly after `after_ms`.
    #[must_use]
    pub fn preview(&self, after_ms: u64, count: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(count.min(1024));
        let mut at = after_ms;
        while out.len() < count {
            let Some(next) = self.next_after(at) else { break };
            out.push(next);
            at = next;
        }
        out
    }

    /// The jitter bound of this spec.
    #[must_use]
    pub fn jitter_bound_ms(&self) -> u64 {
        self.jitter_ms
    }
}

/// The first instant strictly after `after_ms` whose local wall-clock time matches `cron`.
fn cron_next(cron: &Cron, tz: Tz, after_ms: u64) -> Option<u64> {
    let after = DateTime::<Utc>::from_timestamp_millis(i64::try_from(after_ms).ok()?)?;
    let mut local = after.with_timezone(&tz).naive_local();
    // Each round moves `local` forward; a fall-back hour is at most a few dozen rounds for
    // a seconds cron, so the bound only guards against a pathological zone.
    for _ in 0..100_000 {
        let matched = cron.find_next_occurrence(&local, false).ok()?;
        let instant = match tz.from_local_datetime(&matched) {
            LocalResult::Single(t) => t,
            // Repeated wall-clock time: only the first instant fires.
            LocalResult::Ambiguous(first, _) => first,
            // Skipped wall-clock time: the first valid time after the gap.
            LocalResult::None => gap_end(tz, matched)?,
        };
        let ms = u64::try_from(instant.timestamp_millis()).ok()?;
        if ms > after_ms {
            return Some(ms);
        }
        local = matched;
    }
    None
}

/// The first valid wall-clock minute after `inside`, a time in a DST gap, as an instant.
fn gap_end(tz: Tz, inside: NaiveDateTime) -> Option<DateTime<Tz>> {
    let mut t = inside.with_second(0)?.with_nanosecond(0)?;
    // Gaps are at most a day long (Pacific/Apia skipped 30 December 2011).
    for _ in 0..(48 * 60) {
        t += Duration::minutes(1);
        match tz.from_local_datetime(&t) {
            LocalResult::Single(x) | LocalResult::Ambiguous(x, _) => return Some(x),
            LocalResult::None => {}
        }
    }
    None
}

fn interval_next(iv: IntervalDef, after_ms: u64) -> u64 {
    if after_ms < iv.offset_ms {
        return iv.offset_ms;
    }
    let k = (after_ms - iv.offset_ms) / iv.every_ms + 1;
    iv.offset_ms.saturating_add(k.saturating_mul(iv.every_ms))
}

/// The delay added to occurrence `nominal_ms` of `schedule_id`: in `[0, bound_ms)`, derived
/// from a hash of both, so a fire retried after a crash picks the same time.
#[must_use]
pub fn jitter_ms(schedule_id: &str, nominal_ms: u64, bound_ms: u64) -> u64 {
    if bound_ms == 0 {
        return 0;
    }
    let mut h = Sha256::new();
    h.update(schedule_id.as_bytes());
    h.update([0]);
    h.update(nominal_ms.to_be_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) % bound_ms
}

/// `ms` as RFC 3339 in UTC with a `Z` and whole seconds unless the time has milliseconds.
#[must_use]
pub fn rfc3339(ms: u64) -> String {
    let t = i64::try_from(ms).ok().and_then(DateTime::<Utc>::from_timestamp_millis);
    let Some(t) = t else { return ms.to_string() };
    let format = if ms.is_multiple_of(1000) {
        chrono::SecondsFormat::Secs
    } else {
        chrono::SecondsFormat::Millis
    };
    t.to_rfc3339_opts(format, true)
}

/// The id of the execution a schedule starts for occurrence `nominal_ms`:
/// `<schedule-id>:<occurrence RFC 3339>`.
#[must_use]
pub fn execution_id(schedule_id: &str, nominal_ms: u64) -> String {
    format!("{schedule_id}:{}", rfc3339(nominal_ms))
}
