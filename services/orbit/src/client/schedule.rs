//! `orbit schedule create|get|list|update|pause|resume|trigger|backfill|preview|delete`:
//! a thin layer over `ScheduleService`. Specs come from flags (`--cron` and `--every` may
//! repeat: the schedule fires at the union); durations read `90s`, `15m`, `1h30m`, `500ms`,
//! `1d`; times are RFC 3339.

use clap::{Args, Subcommand, ValueEnum};
use orbit_api::v1::recurrence::Trigger as MoreTrigger;
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use orbit_api::v1::schedule_spec::Trigger;
use orbit_api::v1::{
    BackfillScheduleRequest, CatchUpPolicy, CreateScheduleRequest, DeleteScheduleRequest,
    GetScheduleRequest, ListSchedulesRequest, OverlapPolicy, PauseScheduleRequest,
    PreviewScheduleRequest, Recurrence, ResumeScheduleRequest, Schedule, ScheduleAction,
    ScheduleSpec, TriggerScheduleRequest, UpdateScheduleRequest,
};
use prost_types::{Duration, Timestamp};
use serde_json::{json, Value as Json};

use super::error::Failure;
use super::input::{parse_json_arg, parse_workflow_ref, WorkflowRef};
use super::output::{or_dash, print_json, print_text, ts, ts_json, Fields, Format, Table};
use super::{ConnectArgs, Transport};

/// `orbit schedule ...`
#[derive(Args, Debug)]
pub struct ScheduleArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    command: ScheduleCommand,
}

/// The overlap policy flag.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Overlap {
    Skip,
    BufferOne,
    BufferAll,
    CancelOther,
    TerminateOther,
    AllowAll,
}

/// The catch-up policy flag.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CatchUp {
    Skip,
    One,
    All,
}

fn overlap_value(o: Overlap) -> i32 {
    (match o {
        Overlap::Skip => OverlapPolicy::Skip,
        Overlap::BufferOne => OverlapPolicy::BufferOne,
        Overlap::BufferAll => OverlapPolicy::BufferAll,
        Overlap::CancelOther => OverlapPolicy::CancelPrevious,
        Overlap::TerminateOther => OverlapPolicy::TerminatePrevious,
        Overlap::AllowAll => OverlapPolicy::Allow,
    }) as i32
}

/// The spec flags shared by create, update and preview.
#[derive(Args, Debug, Clone)]
struct SpecArgs {
    /// A cron expression (5 or 6 fields, or `@daily`-style), in --timezone. Repeatable.
    #[arg(long, value_name = "EXPR")]
    cron: Vec<String>,
    /// An interval, optionally with an offset: `1h`, `1h@15m`. Repeatable.
    #[arg(long, value_name = "DUR[@OFFSET]")]
    every: Vec<String>,
    /// The IANA time zone of the crons (default UTC).
    #[arg(long, value_name = "ZONE", default_value = "")]
    timezone: String,
    /// The largest random delay of an occurrence (deterministic per occurrence).
    #[arg(long, value_name = "DUR")]
    jitter: Option<String>,
    /// What an occurrence does while the previous execution still runs (default skip).
    #[arg(long, value_enum)]
    overlap: Option<Overlap>,
    /// What happens to occurrences missed while no scheduler ran (default one).
    #[arg(long, value_enum)]
    catch_up: Option<CatchUp>,
    /// How far back missed occurrences count (default 1d).
    #[arg(long, value_name = "DUR")]
    catch_up_window: Option<String>,
    /// No occurrence before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    start_at: Option<String>,
    /// No occurrence at or after this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    end_at: Option<String>,
    /// Pause the schedule when an execution it started fails.
    #[arg(long)]
    pause_on_failure: bool,
    /// Stop after this many scheduled starts.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

/// The action flags of create and update.
#[derive(Args, Debug, Clone)]
struct ActionArgs {
    /// The workflow to start: `NAME` or `NAME@VERSION`.
    #[arg(long, value_parser = parse_workflow_ref, value_name = "NAME[@VERSION]")]
    workflow: WorkflowRef,
    /// The input of every execution: JSON, or `@file` (`@-` for stdin).
    #[arg(long, value_name = "JSON", default_value = "null")]
    input: String,
}

#[derive(Subcommand, Debug)]
enum ScheduleCommand {
    /// Create a schedule (idempotent by id: the same spec again is not an error).
    #[command(after_long_help = long_help!(
        "orbit schedule create nightly --workflow report --cron '0 2 * * *' --timezone Europe/Berlin",
        "orbit schedule create tick --workflow ping --every 1s --catch-up all --overlap allow-all",
    ))]
    Create {
        /// The schedule id (`[A-Za-z0-9_.-]`).
        id: String,
        #[command(flatten)]
        action: ActionArgs,
        #[command(flatten)]
        spec: SpecArgs,
        /// Create it paused.
        #[arg(long)]
        paused: bool,
    },
    /// Show one schedule and its progress.
    #[command(after_long_help = long_help!("orbit schedule get nightly --output json"))]
    Get {
        /// The schedule id.
        id: String,
    },
    /// List schedules by id.
    #[command(after_long_help = long_help!("orbit schedule list --workflow report"))]
    List {
        /// Only schedules of this workflow.
        #[arg(long, value_name = "NAME")]
        workflow: Option<String>,
    },
    /// Replace a schedule's spec and action (progress counters stay).
    #[command(after_long_help = long_help!(
        "orbit schedule update nightly --workflow report --cron '30 2 * * *'"
    ))]
    Update {
        /// The schedule id.
        id: String,
        #[command(flatten)]
        action: ActionArgs,
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Pause a schedule.
    #[command(after_long_help = long_help!("orbit schedule pause nightly --note 'db maintenance'"))]
    Pause {
        /// The schedule id.
        id: String,
        /// Why.
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Resume a paused schedule (missed occurrences follow its catch-up policy).
    #[command(after_long_help = long_help!("orbit schedule resume nightly"))]
    Resume {
        /// The schedule id.
        id: String,
    },
    /// Start one execution of the schedule's action now.
    #[command(after_long_help = long_help!("orbit schedule trigger nightly"))]
    Trigger {
        /// The schedule id.
        id: String,
        /// The execution id (makes the call idempotent).
        #[arg(long, value_name = "ID", default_value = "")]
        execution_id: String,
    },
    /// Start the occurrences of a past range, oldest first.
    #[command(after_long_help = long_help!(
        "orbit schedule backfill nightly --from 2026-01-01T00:00:00Z --to 2026-01-08T00:00:00Z"
    ))]
    Backfill {
        /// The schedule id.
        id: String,
        /// The first occurrence considered (RFC 3339, inclusive).
        #[arg(long, value_name = "TIME")]
        from: String,
        /// The end of the range (RFC 3339, exclusive).
        #[arg(long, value_name = "TIME")]
        to: String,
        /// The overlap policy of the backfill (default allow-all; no buffering).
        #[arg(long, value_enum)]
        overlap: Option<Overlap>,
    },
    /// The next fire times of a spec, without creating anything.
    #[command(after_long_help = long_help!(
        "orbit schedule preview --cron '30 2 * * *' --timezone Europe/Berlin --count 5"
    ))]
    Preview {
        #[command(flatten)]
        spec: SpecArgs,
        /// How many fire times.
        #[arg(long, default_value_t = 10)]
        count: u32,
        /// Fire times after this time (RFC 3339; default now).
        #[arg(long, value_name = "TIME")]
        after: Option<String>,
    },
    /// Delete a schedule (its executions stay).
    #[command(after_long_help = long_help!("orbit schedule delete nightly"))]
    Delete {
        /// The schedule id.
        id: String,
    },
}

/// Parses `90s`, `15m`, `1h30m`, `500ms`, `2d`.
fn duration(flag: &str, text: &str) -> Result<Duration, Failure> {
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

fn time(flag: &str, text: &str) -> Result<Timestamp, Failure> {
    text.parse::<Timestamp>()
        .map_err(|e| Failure::Usage(format!("{flag}: {text:?} is not an RFC 3339 time: {e}")))
}

fn opt_time(flag: &str, text: Option<&String>) -> Result<Option<Timestamp>, Failure> {
    text.map(|t| time(flag, t)).transpose()
}

fn spec(args: &SpecArgs) -> Result<ScheduleSpec, Failure> {
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

fn action(args: &ActionArgs) -> Result<ScheduleAction, Failure> {
    let input = parse_json_arg("--input", &args.input)?;
    Ok(ScheduleAction {
        workflow: args.workflow.name.clone(),
        version: args.workflow.version_or_empty(),
        input: Some(orbit_server_kit::payload::json_to_proto(input)),
    })
}

fn enum_text(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix).unwrap_or(full).to_owned()
}

/// A schedule as one JSON document.
fn schedule_json(s: &Schedule) -> Json {
    let spec = s.spec.clone().unwrap_or_default();
    let action = s.action.clone().unwrap_or_default();
    let state = s.state.clone().unwrap_or_default();
    let recurrence = |cron: Option<&String>, iv: Option<&Duration>, offset: Option<&Duration>| {
        match (cron, iv) {
            (Some(c), _) => json!({"cron": c}),
            (None, iv) => json!({
                "every": iv.map(ToString::to_string),
                "offset": offset.map(ToString::to_string),
            }),
        }
    };
    let mut recurrences = Vec::new();
    match &spec.trigger {
        Some(Trigger::Cron(c)) => recurrences.push(recurrence(Some(c), None, None)),
        Some(Trigger::Interval(d)) => {
            recurrences.push(recurrence(None, Some(d), spec.offset.as_ref()))
        }
        None => {}
    }
    for r in &spec.more {
        match &r.trigger {
            Some(MoreTrigger::Cron(c)) => recurrences.push(recurrence(Some(c), None, None)),
            Some(MoreTrigger::Interval(d)) => {
                recurrences.push(recurrence(None, Some(d), r.offset.as_ref()));
            }
            None => {}
        }
    }
    json!({
        "schedule_id": s.schedule_id,
        "spec": {
            "recurrences": recurrences,
            "timezone": if spec.timezone.is_empty() { "UTC" } else { spec.timezone.as_str() },
            "jitter": spec.jitter.as_ref().map(ToString::to_string),
            "overlap": enum_text(spec.overlap().as_str_name(), "OVERLAP_POLICY_"),
            "catch_up": enum_text(spec.catch_up().as_str_name(), "CATCH_UP_POLICY_"),
            "catch_up_window": spec.catch_up_window.as_ref().map(ToString::to_string),
            "start_at": ts_json(spec.start_at.as_ref()),
            "end_at": ts_json(spec.end_at.as_ref()),
            "pause_on_failure": spec.pause_on_failure,
            "remaining_actions": spec.remaining_actions,
        },
        "action": {
            "workflow": action.workflow,
            "version": action.version,
            "input": super::convert::payload(action.input.map(orbit_server_kit::payload::proto_to_json)),
        },
        "state": {
            "paused": state.paused,
            "note": state.note,
            "next_fire_at": ts_json(state.next_fire_at.as_ref()),
            "last_fire_at": ts_json(state.last_fire_at.as_ref()),
            "last_execution_id": state.last_execution_id,
            "fired_count": state.fired_count,
            "skipped_count": state.skipped_count,
            "last_error": state.last_error,
            "remaining_actions": state.remaining_actions,
            "buffered_count": state.buffered_count,
        },
        "created_at": ts_json(s.created_at.as_ref()),
        "updated_at": ts_json(s.updated_at.as_ref()),
    })
}

fn schedule_text(s: &Schedule) -> String {
    let doc = schedule_json(s);
    let state = s.state.clone().unwrap_or_default();
    let action = s.action.clone().unwrap_or_default();
    Fields::new()
        .add("schedule", &s.schedule_id)
        .add(
            "workflow",
            format!(
                "{}{}",
                action.workflow,
                if action.version.is_empty() {
                    String::new()
                } else {
                    format!("@{}", action.version)
                }
            ),
        )
        .add("spec", doc["spec"]["recurrences"].to_string())
        .add("timezone", doc["spec"]["timezone"].as_str().unwrap_or("UTC"))
        .add("overlap", doc["spec"]["overlap"].as_str().unwrap_or("-"))
        .add("catch up", doc["spec"]["catch_up"].as_str().unwrap_or("-"))
        .add("paused", if state.paused { "yes" } else { "no" })
        .add_nonempty("note", &state.note)
        .add("next fire", ts(state.next_fire_at.as_ref()))
        .add("last fire", ts(state.last_fire_at.as_ref()))
        .add("last execution", or_dash(&state.last_execution_id))
        .add("fired", state.fired_count)
        .add("skipped", state.skipped_count)
        .add_nonempty("last error", &state.last_error)
        .render()
}

fn print_schedule(format: Format, s: &Schedule, extra: Option<(&str, Json)>) {
    match format {
        Format::Json => {
            let mut doc = json!({"schedule": schedule_json(s)});
            if let Some((k, v)) = extra {
                doc[k] = v;
            }
            print_json(&doc);
        }
        Format::Human => print_text(&schedule_text(s)),
    }
}

async fn client(connect: &ConnectArgs) -> Result<ScheduleServiceClient<Transport>, Failure> {
    Ok(ScheduleServiceClient::new(connect.connect().await?))
}

/// Runs one `schedule` command.
pub async fn run(args: ScheduleArgs) -> Result<(), Failure> {
    let format = args.connect.output;
    let mut c = client(&args.connect).await?;
    match args.command {
        ScheduleCommand::Create { id, action: a, spec: s, paused } => {
            let request = CreateScheduleRequest {
                schedule_id: id,
                spec: Some(spec(&s)?),
                action: Some(action(&a)?),
                paused,
            };
            let r = c.create_schedule(request).await?.into_inner();
            print_schedule(
                format,
                &r.schedule.unwrap_or_default(),
                Some(("created", json!(r.created))),
            );
        }
        ScheduleCommand::Get { id } => {
            let r = c.get_schedule(GetScheduleRequest { schedule_id: id }).await?.into_inner();
            print_schedule(format, &r.schedule.unwrap_or_default(), None);
        }
        ScheduleCommand::List { workflow } => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let request = ListSchedulesRequest {
                    workflow: workflow.clone().unwrap_or_default(),
                    page_size: 1000,
                    page_token,
                };
                let page = c.list_schedules(request).await?.into_inner();
                all.extend(page.schedules);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match format {
                Format::Json => print_json(
                    &json!({"schedules": all.iter().map(schedule_json).collect::<Vec<_>>()}),
                ),
                Format::Human => {
                    let mut table = Table::new(&[
                        "SCHEDULE",
                        "WORKFLOW",
                        "PAUSED",
                        "NEXT FIRE",
                        "FIRED",
                        "SKIPPED",
                        "LAST ERROR",
                    ]);
                    for s in &all {
                        let state = s.state.clone().unwrap_or_default();
                        table.row(vec![
                            s.schedule_id.clone(),
                            s.action.clone().unwrap_or_default().workflow,
                            if state.paused { "yes" } else { "no" }.to_owned(),
                            ts(state.next_fire_at.as_ref()),
                            state.fired_count.to_string(),
                            state.skipped_count.to_string(),
                            or_dash(&state.last_error).to_owned(),
                        ]);
                    }
                    print_text(&table.render());
                }
            }
        }
        ScheduleCommand::Update { id, action: a, spec: s } => {
            let request = UpdateScheduleRequest {
                schedule_id: id,
                spec: Some(spec(&s)?),
                action: Some(action(&a)?),
            };
            let r = c.update_schedule(request).await?.into_inner();
            print_schedule(format, &r.schedule.unwrap_or_default(), None);
        }
        ScheduleCommand::Pause { id, note } => {
            let r = c
                .pause_schedule(PauseScheduleRequest { schedule_id: id, note })
                .await?
                .into_inner();
            print_schedule(format, &r.schedule.unwrap_or_default(), None);
        }
        ScheduleCommand::Resume { id } => {
            let r =
                c.resume_schedule(ResumeScheduleRequest { schedule_id: id }).await?.into_inner();
            print_schedule(format, &r.schedule.unwrap_or_default(), None);
        }
        ScheduleCommand::Trigger { id, execution_id } => {
            let r = c
                .trigger_schedule(TriggerScheduleRequest { schedule_id: id, execution_id })
                .await?
                .into_inner();
            match format {
                Format::Json => {
                    print_json(&json!({"execution_id": r.execution_id, "created": r.created}))
                }
                Format::Human => print_text(
                    &Fields::new()
                        .add("execution", &r.execution_id)
                        .add("created", r.created)
                        .render(),
                ),
            }
        }
        ScheduleCommand::Backfill { id, from, to, overlap } => {
            let request = BackfillScheduleRequest {
                schedule_id: id,
                start_at: Some(time("--from", &from)?),
                end_at: Some(time("--to", &to)?),
                overlap: overlap.map_or(0, overlap_value),
            };
            let r = c.backfill_schedule(request).await?.into_inner();
            match format {
                Format::Json => print_json(
                    &json!({"execution_ids": r.execution_ids, "started": r.started, "skipped": r.skipped}),
                ),
                Format::Human => {
                    let mut text =
                        Fields::new().add("started", r.started).add("skipped", r.skipped).render();
                    for id in &r.execution_ids {
                        text.push_str(id);
                        text.push('\n');
                    }
                    print_text(&text);
                }
            }
        }
        ScheduleCommand::Preview { spec: s, count, after } => {
            let request = PreviewScheduleRequest {
                spec: Some(spec(&s)?),
                count,
                after: opt_time("--after", after.as_ref())?,
                schedule_id: String::new(),
            };
            let r = c.preview_schedule(request).await?.into_inner();
            match format {
                Format::Json => print_json(&json!({
                    "fire_times": r.fire_times.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "due_times": r.due_times.iter().map(ToString::to_string).collect::<Vec<_>>(),
                })),
                Format::Human => {
                    let text: String = r.fire_times.iter().map(|t| format!("{t}\n")).collect();
                    print_text(&text);
                }
            }
        }
        ScheduleCommand::Delete { id } => {
            c.delete_schedule(DeleteScheduleRequest { schedule_id: id.clone() }).await?;
            match format {
                Format::Json => print_json(&json!({"schedule_id": id, "deleted": true})),
                Format::Human => print_text(&format!("deleted schedule {id}\n")),
            }
        }
    }
    Ok(())
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
