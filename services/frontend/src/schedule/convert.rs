//! `orbit.v1` schedule messages to and from the stored form (`orbit_schedule::ScheduleDef`)
//! and the store's rows. Validation happens here, once: a bad cron, interval, time zone or
//! window is `INVALID_ARGUMENT` naming the request field (`spec.cron`,
//! `spec.more[1].cron`, `spec.timezone`, ...).

use orbit_api::v1::recurrence::Trigger as MoreTrigger;
use orbit_api::v1::schedule_spec::Trigger;
use orbit_api::v1::{
    CatchUpPolicy, OverlapPolicy, Recurrence, Schedule, ScheduleAction, ScheduleSpec, ScheduleState,
};
use orbit_schedule::{ActionDef, CatchUp, IntervalDef, Overlap, ScheduleDef, Spec, SpecDef};
use orbit_server_kit::payload::{
    duration_to_ms, json_to_proto, ms_to_duration, ms_to_timestamp, opt_ms_to_timestamp,
    timestamp_to_ms,
};
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_server_kit::OrbitError;
use orbit_store::ScheduleRow;

/// The longest schedule id, in bytes.
const MAX_SCHEDULE_ID: usize = 128;

/// A schedule id: `[A-Za-z0-9_.-]`, 1 to 128 bytes.
pub(crate) fn schedule_id(value: &str) -> Result<&str, OrbitError> {
    if value.is_empty() {
        return Err(invalid("schedule_id", "is required"));
    }
    if value.len() > MAX_SCHEDULE_ID {
        return Err(invalid("schedule_id", format!("is longer than {MAX_SCHEDULE_ID} bytes")));
    }
    if !value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
        return Err(invalid("schedule_id", "may only hold letters, digits, `_`, `.` and `-`"));
    }
    Ok(value)
}

fn ms_of(field: &str, d: &prost_types::Duration) -> Result<u64, OrbitError> {
    duration_to_ms(d).map_err(|e| invalid(field, e.to_string()))
}

fn at_of(field: &str, t: Option<&prost_types::Timestamp>) -> Result<Option<u64>, OrbitError> {
    t.map(|t| timestamp_to_ms(t).map_err(|e| invalid(field, e.to_string()))).transpose()
}

pub(crate) fn overlap_of(raw: i32, field: &str) -> Result<Overlap, OrbitError> {
    Ok(match OverlapPolicy::try_from(raw) {
        Ok(OverlapPolicy::Unspecified | OverlapPolicy::Skip) => Overlap::Skip,
        Ok(OverlapPolicy::Allow) => Overlap::AllowAll,
        Ok(OverlapPolicy::CancelPrevious) => Overlap::CancelOther,
        Ok(OverlapPolicy::TerminatePrevious) => Overlap::TerminateOther,
        Ok(OverlapPolicy::BufferOne) => Overlap::BufferOne,
        Ok(OverlapPolicy::BufferAll) => Overlap::BufferAll,
        Err(_) => return Err(invalid(field, format!("{raw} is not an overlap policy"))),
    })
}

fn overlap_to(o: Overlap) -> OverlapPolicy {
    match o {
        Overlap::Skip => OverlapPolicy::Skip,
        Overlap::AllowAll => OverlapPolicy::Allow,
        Overlap::CancelOther => OverlapPolicy::CancelPrevious,
        Overlap::TerminateOther => OverlapPolicy::TerminatePrevious,
        Overlap::BufferOne => OverlapPolicy::BufferOne,
        Overlap::BufferAll => OverlapPolicy::BufferAll,
    }
}

/// The paths of the request fields each stored cron and interval came from, so a compile
/// error names the field the caller wrote.
#[derive(Default)]
struct Paths {
    crons: Vec<String>,
    intervals: Vec<String>,
}

fn add_trigger(
    def: &mut SpecDef,
    paths: &mut Paths,
    prefix: &str,
    cron: Option<&str>,
    interval: Option<&prost_types::Duration>,
    offset: Option<&prost_types::Duration>,
) -> Result<(), OrbitError> {
    let offset_ms = offset.map(|d| ms_of(&format!("{prefix}offset"), d)).transpose()?.unwrap_or(0);
    match (cron, interval) {
        (Some(c), None) => {
            def.crons.push(c.to_string());
            paths.crons.push(format!("{prefix}cron"));
        }
        (None, Some(d)) => {
            let every_ms = ms_of(&format!("{prefix}interval"), d)?;
            def.intervals.push(IntervalDef { every_ms, offset_ms });
            paths.intervals.push(format!("{prefix}interval"));
        }
        _ => return Err(invalid(&format!("{prefix}trigger"), "set `cron` or `interval`")),
    }
    Ok(())
}

/// A request's spec as stored, checked by compiling it.
pub(crate) fn spec_def(spec: Option<ScheduleSpec>) -> Result<(SpecDef, Spec), OrbitError> {
    let Some(s) = spec else { return Err(invalid("spec", "is required")) };
    let mut def = SpecDef::default();
    let mut paths = Paths::default();
    match &s.trigger {
        Some(Trigger::Cron(c)) => {
            add_trigger(&mut def, &mut paths, "spec.", Some(c), None, s.offset.as_ref())?;
        }
        Some(Trigger::Interval(d)) => {
            add_trigger(&mut def, &mut paths, "spec.", None, Some(d), s.offset.as_ref())?;
        }
        None if s.more.is_empty() => {
            return Err(invalid("spec.trigger", "set `cron` or `interval`"));
        }
        None => {}
    }
    for (i, r) in s.more.iter().enumerate() {
        let prefix = format!("spec.more[{i}].");
        let (cron, interval) = match &r.trigger {
            Some(MoreTrigger::Cron(c)) => (Some(c.as_str()), None),
            Some(MoreTrigger::Interval(d)) => (None, Some(d)),
            None => (None, None),
        };
        add_trigger(&mut def, &mut paths, &prefix, cron, interval, r.offset.as_ref())?;
    }
    def.timezone = s.timezone;
    def.jitter_ms = s.jitter.as_ref().map(|d| ms_of("spec.jitter", d)).transpose()?.unwrap_or(0);
    def.overlap = overlap_of(s.overlap, "spec.overlap")?;
    def.catch_up = match CatchUpPolicy::try_from(s.catch_up) {
        Ok(CatchUpPolicy::Unspecified | CatchUpPolicy::One) => CatchUp::One,
        Ok(CatchUpPolicy::Skip) => CatchUp::Skip,
        Ok(CatchUpPolicy::All) => CatchUp::All,
        Err(_) => return Err(invalid("spec.catch_up", "not a catch-up policy")),
    };
    def.catch_up_window_ms =
        s.catch_up_window.as_ref().map(|d| ms_of("spec.catch_up_window", d)).transpose()?;
    def.start_at_ms = at_of("spec.start_at", s.start_at.as_ref())?;
    def.end_at_ms = at_of("spec.end_at", s.end_at.as_ref())?;
    def.pause_on_failure = s.pause_on_failure;
    def.remaining_actions = s.remaining_actions;
    let compiled = Spec::compile(&def).map_err(|e| {
        // `spec.crons[i]` / `spec.intervals[i]...` back to the request's own path.
        let field = rename(&e.field, "spec.crons[", &paths.crons)
            .or_else(|| rename(&e.field, "spec.intervals[", &paths.intervals))
            .unwrap_or_else(|| e.field.clone());
        invalid(&field, e.message)
    })?;
    Ok((def, compiled))
}

fn rename(field: &str, prefix: &str, paths: &[String]) -> Option<String> {
    let rest = field.strip_prefix(prefix)?;
    let (index, tail) = rest.split_once(']')?;
    let path = paths.get(index.parse::<usize>().ok()?)?;
    // `.offset` follows an interval's index; the request names it beside the trigger.
    Some(match tail.strip_prefix('.') {
        Some(sub) => format!("{}{sub}", path.trim_end_matches("interval")),
        None => path.clone(),
    })
}

/// A request's action as stored.
pub(crate) fn action_def(
    action: Option<ScheduleAction>,
    max_bytes: u64,
) -> Result<ActionDef, OrbitError> {
    let Some(a) = action else { return Err(invalid("action", "is required")) };
    rules::id("action.workflow", &a.workflow)?;
    rules::optional("action.version", &a.version)?;
    let input = crate::validate::payload("action.input", a.input, max_bytes)?;
    Ok(ActionDef { workflow: a.workflow, version: a.version, input })
}

/// The stored spec as the API's message (the first recurrence in `trigger`, the others in
/// `more`: crons first, then intervals).
pub(crate) fn spec_message(def: &SpecDef) -> ScheduleSpec {
    let mut all: Vec<(Option<String>, Option<IntervalDef>)> =
        def.crons.iter().map(|c| (Some(c.clone()), None)).collect();
    all.extend(def.intervals.iter().map(|iv| (None, Some(*iv))));
    let mut rest = all.into_iter();
    let (trigger, offset) = match rest.next() {
        Some((Some(c), _)) => (Some(Trigger::Cron(c)), None),
        Some((None, Some(iv))) => (
            Some(Trigger::Interval(ms_to_duration(iv.every_ms))),
            (iv.offset_ms > 0).then(|| ms_to_duration(iv.offset_ms)),
        ),
        _ => (None, None),
    };
    let more = rest
        .map(|(c, iv)| match (c, iv) {
            (Some(c), _) => Recurrence { trigger: Some(MoreTrigger::Cron(c)), offset: None },
            (None, iv) => {
                let iv = iv.unwrap_or(IntervalDef { every_ms: 1_000, offset_ms: 0 });
                Recurrence {
                    trigger: Some(MoreTrigger::Interval(ms_to_duration(iv.every_ms))),
                    offset: (iv.offset_ms > 0).then(|| ms_to_duration(iv.offset_ms)),
                }
            }
        })
        .collect();
    ScheduleSpec {
        trigger,
        timezone: def.timezone.clone(),
        jitter: (def.jitter_ms > 0).then(|| ms_to_duration(def.jitter_ms)),
        overlap: overlap_to(def.overlap) as i32,
        catch_up: match def.catch_up {
            CatchUp::Skip => CatchUpPolicy::Skip,
            CatchUp::One => CatchUpPolicy::One,
            CatchUp::All => CatchUpPolicy::All,
        } as i32,
        catch_up_window: def.catch_up_window_ms.map(ms_to_duration),
        start_at: opt_ms_to_timestamp(def.start_at_ms),
        end_at: opt_ms_to_timestamp(def.end_at_ms),
        offset,
        more,
        pause_on_failure: def.pause_on_failure,
        remaining_actions: def.remaining_actions,
    }
}

/// A stored row as the API's message.
pub(crate) fn schedule_message(row: &ScheduleRow) -> Schedule {
    let def = ScheduleDef::from_json(&row.spec).unwrap_or_default();
    Schedule {
        schedule_id: row.schedule_id.clone(),
        spec: Some(spec_message(&def.spec)),
        action: Some(ScheduleAction {
            workflow: def.action.workflow,
            version: def.action.version,
            input: Some(json_to_proto(def.action.input)),
        }),
        state: Some(ScheduleState {
            paused: row.paused,
            next_fire_at: opt_ms_to_timestamp(row.next_fire_at_ms),
            last_fire_at: opt_ms_to_timestamp(row.last_fire_at_ms),
            last_execution_id: row.last_execution_id.clone().unwrap_or_default(),
            fired_count: row.fired_count,
            skipped_count: row.skipped_count,
            last_error: row.last_error.clone().unwrap_or_default(),
            remaining_actions: row.remaining,
            note: row.note.clone(),
            buffered_count: row.buffered.len() as u64,
        }),
        created_at: Some(ms_to_timestamp(row.created_at_ms)),
        updated_at: Some(ms_to_timestamp(row.updated_at_ms)),
    }
}
