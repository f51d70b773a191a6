//! The spec and action of a `schedule` command from its flags: durations (`90s`, `1h30m`,
//! `500ms`, `2d`), RFC 3339 times, repeatable `--cron` / `--every DUR[@OFFSET]`.

use orbit_api::v1::recurrence::Trigger as MoreTrigger;
use orbit_api::v1::schedule_spec::Trigger;
use orbit_api::v1::{CatchUpPolicy, Recurrence, ScheduleAction, ScheduleSpec};
use prost_types::{Duration, Timestamp};

use super::{overlap_value, ActionArgs, CatchUp, SpecArgs};
use crate::client::error::Failure;
use crate::client::input::parse_json_arg;

/// Parses `90s`, `15m`, `1h30m`, `500ms`, `2d`.
pub(super) fn duration(flag: &str, text: &str) -> Result<Duration, Failure> {
    let bad = || {
        Failure::Usage(format!("{flag}: {text:?} is not a duration (e.g. 1s, 15m, 1h30m, 500ms)"))
    };
    let mut ms: u64 = 0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        ms = ms.checked_add(n.checked_mul(per).ok_or_else(bad)?).ok_or_else(bad)?;
        rest = &rest[unit_len..];
    }
    Ok(orbit_server_kit::payload::ms_to_duration(ms))
}

pub(super) fn time(flag: &str, text: &str) -> Result<Timestamp, Failure> {
    text.parse::<Timestamp>()
        .map_err(|e| Failure::Usage(format!("{flag}: {text:?} is not an RFC 3339 time: {e}")))
}

pub(super) fn opt_time(flag: &str, text: Option<&String>) -> Result<Option<Timestamp>, Failure> {
    text.map(|t| time(flag, t)).transpose()
}

pub(super) fn spec(args: &SpecArgs) -> Result<ScheduleSpec, Failure> {
    let mut recurrences = Vec::new();
    for c in &args.cron {
        recurrences.push((Some(c.clone()), None, None));
    }
    for e in &args.every {
        let (every, offset) = match e.split_once('@') {
            Some((a, b)) => (a, Some(duration("--every", b)?)),
            None => (e.as_str(), None),
        };
        recurrences.push((None, Some(duration("--every", every)?), offset));
    }
    let mut rest = recurrences.into_iter();
    let Some(first) = rest.next() else {
        return Err(Failure::Usage("give at least one --cron or --every".into()));
    };
    let trigger = match first.0 {
        Some(c) => Trigger::Cron(c),
        None => Trigger::Interval(first.1.unwrap_or_default()),
    };
    let more = rest
        .map(|(c, iv, offset)| Recurrence {
            trigger: Some(match c {
                Some(c) => MoreTrigger::Cron(c),
                None => MoreTrigger::Interval(iv.unwrap_or_default()),
            }),
            offset,
        })
        .collect();
    Ok(ScheduleSpec {
        trigger: Some(trigger),
        timezone: args.timezone.clone(),
        jitter: args.jitter.as_deref().map(|j| duration("--jitter", j)).transpose()?,
        overlap: args.overlap.map_or(0, overlap_value),
        catch_up: args.catch_up.map_or(0, |c| {
            (match c {
                CatchUp::Skip => CatchUpPolicy::Skip,
                CatchUp::One => CatchUpPolicy::One,
                CatchUp::All => CatchUpPolicy::All,
            }) as i32
        }),
        catch_up_window: args
            .catch_up_window
            .as_deref()
            .map(|w| duration("--catch-up-window", w))
            .transpose()?,
        start_at: opt_time("--start-at", args.start_at.as_ref())?,
        end_at: opt_time("--end-at", args.end_at.as_ref())?,
        offset: first.2,
        more,
        pause_on_failure: args.pause_on_failure,
        remaining_actions: args.limit,
    })
}

pub(super) fn action(args: &ActionArgs) -> Result<ScheduleAction, Failure> {
    let input = parse_json_arg("--input", &args.input)?;
    Ok(ScheduleAction {
        workflow: args.workflow.name.clone(),
        version: args.workflow.version_or_empty(),
        input: Some(orbit_server_kit::payload::json_to_proto(input)),
    })
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_read_like_humans_write_them() {
        let ms = |t: &str| {
            let d = duration("--every", t).expect("valid");
            d.seconds * 1000 + i64::from(d.nanos / 1_000_000)
        };
        assert_eq!(ms("1s"), 1_000);
        assert_eq!(ms("1h30m"), 5_400_000);
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("2d"), 172_800_000);
        for bad in ["", "1", "s", "1x", "1h30"] {
            assert!(duration("--every", bad).is_err(), "{bad:?}");
        }
    }
}
