//! `orbit schedule create|get|list|update|pause|resume|trigger|backfill|preview|delete`:
//! a thin layer over `ScheduleService`. Specs come from flags (`--cron` and `--every` may
//! repeat: the schedule fires at the union); durations read `90s`, `15m`, `1h30m`, `500ms`,
//! `1d`; times are RFC 3339.

mod input;
mod view;

use clap::{Args, Subcommand, ValueEnum};
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use orbit_api::v1::{
    BackfillScheduleRequest, CreateScheduleRequest, DeleteScheduleRequest, GetScheduleRequest,
    ListSchedulesRequest, OverlapPolicy, PauseScheduleRequest, PreviewScheduleRequest,
    ResumeScheduleRequest, TriggerScheduleRequest, UpdateScheduleRequest,
};
use serde_json::json;

use super::error::Failure;
use super::input::{parse_workflow_ref, WorkflowRef};
use super::output::{or_dash, print_json, print_text, ts, Fields, Format, Table};
use super::{ConnectArgs, Transport};
use input::{action, opt_time, spec, time};
use view::{print_schedule, schedule_json};

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
