//! `orbit batch start|list|describe|cancel`: server-side jobs that apply one action
//! (`--migrate-to`, `--reset-to-step`, `--cancel`, `--terminate`, `--signal`, `--delete`) to
//! every execution a selector (workflow, version, statuses, `--query`) matches (`WorkflowService.StartBatch` and
//! friends). The job runs in the server's scheduler; `--wait` follows it with a progress
//! line on stderr until it ends.

use clap::{Args, Subcommand};
use orbit_api::v1::{
    batch_action, BatchAction, BatchCancel, BatchDelete, BatchMigrate, BatchReset, BatchSelector,
    BatchSignal, BatchState, BatchTerminate, CancelBatchRequest, DescribeBatchRequest,
    ExecutionStatus, ListBatchItemsRequest, ListBatchesRequest, StartBatchRequest,
};
use orbit_server_kit::payload::json_to_proto;
use std::time::Duration;

use super::input::parse_json_arg;

use super::batch_view::{batch_json, dry_run_json, dry_run_text, item_json, print_batch, progress};
use super::error::Failure;
use super::listing::StatusFilter;
use super::output::{or_dash, print_json, print_text, ts, Format, Table};
use super::ConnectArgs;

/// How often `--wait` asks for the batch's progress (a display refresh, not a wait for an
/// event: the command only reads).
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// `orbit batch ...`
#[derive(Args, Debug)]
pub struct BatchArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    command: BatchCommand,
}

// Parsed once per process from the command line: the size of `Start` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum BatchCommand {
    /// Start a batch: apply an action to every execution of a workflow (and version) in
    /// the given statuses, or matching a --query.
    ///
    /// The action: --migrate-to VERSION (`orbit execution migrate`), --reset-to-step STEP
    /// (`orbit execution reset`; a repair of many executions that failed in one step, e.g.
    /// with --status failed once the worker is fixed), --cancel, --terminate, --signal NAME
    /// [--payload JSON] or --delete (finished executions only). A caller restricted to some
    /// workflows acts only on executions of those, whatever the query says.
    ///
    /// The server's scheduler walks the selected executions in id order, at most --rate per
    /// second, and records each one's outcome: SUCCEEDED, FAILED (the execution refused:
    /// MIGRATION_UNSAFE names the unsafe differences, RESET_POINT_INVALID a step that never
    /// started) or SKIPPED (nothing to do: already on
    /// the version, finished). A refusal never stops the batch. The job survives restarts
    /// and crashes of every process: it resumes where it stopped and never acts on an
    /// execution twice. --dry-run prints, per execution (the first 1,000), what would
    /// happen and starts nothing. Needs the `update` permission on the workflow. See
    /// docs/evolving.md, "Batches".
    #[command(after_long_help = long_help!(
        "orbit batch start --workflow orders --version 1 --migrate-to 2 --dry-run",
        "orbit batch start --workflow orders --version 1 --migrate-to 2 --rate 100 --wait",
        "orbit batch start --workflow orders --status running --status suspended --migrate-to 3",
        "orbit batch start --workflow orders --status failed --reset-to-step charge --dry-run",
        "orbit batch start --query \"workflow STARTS_WITH 'billing.' AND status = 'RUNNING'\" --cancel --reason outage --rate 200",
        "orbit batch start --workflow orders --signal approve --payload '{\"by\": \"ops\"}'",
        "orbit batch start --query \"status = 'FAILED' AND created < '2026-11-01'\" --delete",
    ))]
    Start {
        /// The workflow whose executions to act on (required unless --query).
        #[arg(long, value_name = "NAME", required_unless_present = "query")]
        workflow: Option<String>,
        /// A list query (docs/queries.md), ANDed with the other selectors; without
        /// --status the query alone decides the statuses.
        #[arg(long, value_name = "QUERY")]
        query: Option<String>,
        /// Only executions pinned to this version (requires --workflow).
        #[arg(long, value_name = "VERSION", requires = "workflow")]
        version: Option<String>,
        /// Only executions in these statuses (repeatable; default running, or with --delete
        /// every closed status; with --query: any).
        #[arg(long, value_enum)]
        status: Vec<StatusFilter>,
        #[command(flatten)]
        action: ActionArgs,
        #[command(flatten)]
        options: ActionOptions,
        /// At most this many executions per second (default 50, at most 1000).
        #[arg(long, value_name = "N", default_value_t = 0)]
        rate: u32,
        /// Why, for the server's logs and each execution's command.
        #[arg(long, value_name = "TEXT", default_value = "")]
        reason: String,
        /// Makes a retry start one batch (the first one answers).
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
        /// Only print what would happen to each execution; start nothing.
        #[arg(long)]
        dry_run: bool,
        /// Follow the batch until it ends, with a progress line on stderr; exits 1 unless it
        /// completed with no failed execution.
        #[arg(long)]
        wait: bool,
    },
    /// List batches, newest first.
    #[command(after_long_help = long_help!("orbit batch list"))]
    List,
    /// Show a batch's progress, and with --items each execution's outcome.
    #[command(after_long_help = long_help!(
        "orbit batch describe batch-0001700000000000-1a2b3c4d",
        "orbit batch describe batch-0001700000000000-1a2b3c4d --items --failed",
    ))]
    Describe {
        /// The batch id.
        id: String,
        /// Also list the per-execution outcomes.
        #[arg(long)]
        items: bool,
        /// With --items: only the executions that refused the action.
        #[arg(long)]
        failed: bool,
    },
    /// Cancel a running batch: no further execution is acted on (those already sent
    /// finish and are recorded).
    #[command(after_long_help = long_help!("orbit batch cancel batch-0001700000000000-1a2b3c4d --reason oops"))]
    Cancel {
        /// The batch id.
        id: String,
        /// Why, kept as the batch's reason.
        #[arg(long, value_name = "TEXT", default_value = "")]
        reason: String,
    },
}

/// The action of `orbit batch start`: exactly one.
#[derive(Args, Debug)]
#[group(required = true, multiple = false, id = "batch_action")]
struct ActionArgs {
    /// Migrate each execution to this version (`orbit execution migrate`).
    #[arg(long, value_name = "VERSION")]
    migrate_to: Option<String>,
    /// Reset each execution to just before this step first started in its current run
    /// (`orbit execution reset --to-step`): it goes on in its next run from there.
    #[arg(long, value_name = "STEP")]
    reset_to_step: Option<String>,
    /// Request each execution's cancellation (`orbit execution cancel`); a finished one
    /// is skipped.
    #[arg(long)]
    cancel: bool,
    /// Terminate each execution (`orbit execution terminate`); a finished one is skipped.
    #[arg(long)]
    terminate: bool,
    /// Send this signal to each execution (`orbit execution signal`), with --payload.
    #[arg(long, value_name = "NAME")]
    signal: Option<String>,
    /// Delete each finished execution and its descendants (`orbit execution delete`).
    #[arg(long)]
    delete: bool,
}

/// The options that go with some actions (outside the group, which takes one action).
#[derive(Args, Debug)]
struct ActionOptions {
    /// With --reset-to-step: leave out the signals received after the point.
    #[arg(long, requires = "reset_to_step")]
    drop_signals: bool,
    /// With --reset-to-step: migrate each new run to this version right away.
    #[arg(long, value_name = "VERSION", requires = "reset_to_step")]
    to_version: Option<String>,
    /// With --signal: the payload as JSON, or `@PATH` to read it from a file. Default: null.
    #[arg(long, value_name = "JSON", requires = "signal")]
    payload: Option<String>,
}

impl ActionArgs {
    /// The wire action (`reason` goes to cancel and terminate as the batch's reason does).
    fn wire(self, options: ActionOptions) -> Result<batch_action::Action, Failure> {
        let ActionOptions { drop_signals, to_version, payload } = options;
        Ok(if let Some(step) = self.reset_to_step {
            batch_action::Action::Reset(BatchReset {
                step,
                drop_signals,
                to_version: to_version.unwrap_or_default(),
            })
        } else if let Some(to_version) = self.migrate_to {
            batch_action::Action::Migrate(BatchMigrate { to_version })
        } else if self.cancel {
            batch_action::Action::Cancel(BatchCancel::default())
        } else if self.terminate {
            batch_action::Action::Terminate(BatchTerminate::default())
        } else if let Some(name) = self.signal {
            let payload =
                payload.as_deref().map(|text| parse_json_arg("--payload", text)).transpose()?;
            batch_action::Action::Signal(BatchSignal { name, payload: payload.map(json_to_proto) })
        } else {
            batch_action::Action::Delete(BatchDelete {})
        })
    }
}

/// Runs one `orbit batch` command.
pub async fn run(args: BatchArgs) -> Result<(), Failure> {
    let format = args.connect.output;
    let mut c = args.connect.workflow_client().await?;
    match args.command {
        BatchCommand::Start {
            workflow,
            query,
            version,
            status,
            action,
            options,
            rate,
            reason,
            request_id,
            dry_run,
            wait,
        } => {
            let request = StartBatchRequest {
                selector: Some(BatchSelector {
                    workflow: workflow.unwrap_or_default(),
                    version: version.unwrap_or_default(),
                    statuses: status.into_iter().map(|s| ExecutionStatus::from(s) as i32).collect(),
                    query: query.unwrap_or_default(),
                }),
                action: Some(BatchAction { action: Some(action.wire(options)?) }),
                rate_per_second: rate,
                reason,
                request_id: request_id.unwrap_or_default(),
                dry_run,
            };
            let r = c.start_batch(request).await?.into_inner();
            if dry_run {
                match format {
                    Format::Json => print_json(&dry_run_json(&r)),
                    Format::Human => print_text(&dry_run_text(&r)),
                }
                return Ok(());
            }
            let mut batch = r.batch.unwrap_or_default();
            if wait {
                let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
                while batch.state() == BatchState::Running {
                    eprint!("{}{}", progress(&batch), if stderr_is_terminal { "\r" } else { "\n" });
                    tokio::time::sleep(PROGRESS_EVERY).await;
                    let request = DescribeBatchRequest { batch_id: batch.batch_id.clone() };
                    batch = c.describe_batch(request).await?.into_inner().batch.unwrap_or_default();
                }
                eprintln!("{}", progress(&batch));
            }
            print_batch(format, &batch, Some(("created", serde_json::json!(r.created))));
            if wait && (batch.state() != BatchState::Completed || batch.failed > 0) {
                return Err(Failure::Unsuccessful);
            }
        }
        BatchCommand::List => {
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let request = ListBatchesRequest { page_size: 1000, page_token };
                let page = c.list_batches(request).await?.into_inner();
                all.extend(page.batches);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match format {
                Format::Json => print_json(
                    &serde_json::json!({"batches": all.iter().map(batch_json).collect::<Vec<_>>()}),
                ),
                Format::Human => {
                    let mut table =
                        Table::new(&["BATCH", "WORKFLOW", "STATE", "DONE", "FAILED", "CREATED"]);
                    for b in &all {
                        let j = batch_json(b);
                        table.row(vec![
                            b.batch_id.clone(),
                            b.selector.as_ref().map(|s| s.workflow.clone()).unwrap_or_default(),
                            j["state"].as_str().unwrap_or_default().to_string(),
                            format!("{}/{}", b.done, b.total),
                            b.failed.to_string(),
                            ts(b.created_at.as_ref()),
                        ]);
                    }
                    print_text(&if table.is_empty() {
                        "no batches".into()
                    } else {
                        table.render()
                    });
                }
            }
        }
        BatchCommand::Describe { id, items, failed } => {
            let request = DescribeBatchRequest { batch_id: id.clone() };
            let batch = c.describe_batch(request).await?.into_inner().batch.unwrap_or_default();
            if !items {
                print_batch(format, &batch, None);
                return Ok(());
            }
            let mut all = Vec::new();
            let mut page_token = String::new();
            loop {
                let request = ListBatchItemsRequest {
                    batch_id: id.clone(),
                    page_size: 1000,
                    page_token,
                    only_failed: failed,
                };
                let page = c.list_batch_items(request).await?.into_inner();
                all.extend(page.items);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            match format {
                Format::Json => {
                    let mut j = batch_json(&batch);
                    j["items"] = all.iter().map(item_json).collect();
                    print_json(&j);
                }
                Format::Human => {
                    print_batch(format, &batch, None);
                    let mut table = Table::new(&["EXECUTION", "OUTCOME", "SEQ", "CODE", "MESSAGE"]);
                    for i in &all {
                        let j = item_json(i);
                        table.row(vec![
                            i.execution_id.clone(),
                            j["outcome"].as_str().unwrap_or_default().to_string(),
                            i.seq.to_string(),
                            or_dash(&i.code).to_string(),
                            or_dash(&i.message).to_string(),
                        ]);
                    }
                    print_text(&if table.is_empty() { "no items".into() } else { table.render() });
                }
            }
        }
        BatchCommand::Cancel { id, reason } => {
            let r = c.cancel_batch(CancelBatchRequest { batch_id: id, reason }).await?.into_inner();
            let extra = Some(("cancelled", serde_json::json!(r.cancelled)));
            print_batch(format, &r.batch.unwrap_or_default(), extra);
        }
    }
    Ok(())
}
