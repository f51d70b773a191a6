//! The arguments of `orbit execution ...` ([`ExecutionArgs`]): every subcommand with its
//! flags and `--help` text. [`super::execution`] runs them.

use clap::{Args, Subcommand};

use super::input::{parse_priority, parse_workflow_ref, WorkflowRef};
use super::listing::StatusFilter;
use super::ConnectArgs;

/// `orbit execution ...`
#[derive(Args, Debug)]
pub struct ExecutionArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(subcommand)]
    pub(super) command: ExecutionCommand,
}

#[derive(Subcommand, Debug)]
pub(super) enum ExecutionCommand {
    /// Start an execution of a workflow, optionally waiting for its result.
    ///
    /// With `--id` the start is idempotent: rerunning it returns the existing execution. With
    /// `--wait` the command follows the execution (through continue-as-new) until it closes,
    /// shows its events on stderr as it goes, prints the output or the error, and exits 1
    /// unless the execution COMPLETED. `--input @file.json` reads the input from a file.
    /// `--priority` orders its tasks against other executions' queued tasks (see
    /// docs/flow-control.md).
    #[command(after_long_help = long_help!(
        "orbit execution start orders --input '{\"order_id\": \"A-1\", \"amount\": 42}'",
        "orbit execution start orders@2 --input @order.json --id order-A-1 --wait",
        "orbit execution start reindex --input '{}' --priority 5",
    ))]
    Start {
        /// The workflow, as NAME or NAME@VERSION (default: the latest version).
        #[arg(value_name = "NAME[@VERSION]", value_parser = parse_workflow_ref)]
        workflow: WorkflowRef,
        /// The input as JSON, or `@PATH` to read it from a file (`@-`: stdin). Default: null.
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
        /// A caller-chosen execution id, which makes the start idempotent.
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// The dispatch priority of the execution's tasks, 1 to 5: of the tasks queued for
        /// a worker, priority 1 is dispatched first and 5 last (a task that has waited long
        /// enough still goes before fresher ones, so none starves). Default: the workflow's
        /// `priority:`, else 3; a step that declares its own `priority:` keeps it.
        #[arg(long, value_name = "N", value_parser = parse_priority)]
        priority: Option<u32>,
        /// A free memo, a JSON object (or `@PATH`), shown by `execution describe`; never
        /// indexed.
        #[arg(long, value_name = "JSON")]
        memo: Option<String>,
        /// Wait until the execution closes and print its result.
        #[arg(long)]
        wait: bool,
    },
    /// Show one run of an execution: status, units, pending work and result.
    ///
    /// With `--at SEQ` the run is shown as it stood right after its history event SEQ (see
    /// `execution history`): folded from events 1..=SEQ, with the workflow version it ran
    /// then. A SEQ past the run's last event is refused, naming the last one.
    #[command(after_long_help = long_help!(
        "orbit execution describe order-A-1",
        "orbit execution describe order-A-1 --run 1 --output json",
        "orbit execution describe order-A-1 --at 7",
    ))]
    Describe {
        /// The execution id.
        id: String,
        /// The run (default: the latest).
        #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
        run: u32,
        /// Show the run as of this history seq (default: now).
        #[arg(long, value_name = "SEQ", default_value_t = 0, hide_default_value = true)]
        at: u64,
    },
    /// Print the full history of one run, oldest event first.
    #[command(after_long_help = long_help!(
        "orbit execution history order-A-1",
        "orbit execution history order-A-1 --run 2 --output json | jq '.events[].event_type'",
    ))]
    History {
        /// The execution id.
        id: String,
        /// The run (default: the latest).
        #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
        run: u32,
    },
    /// Print a run's events as they are committed, then its result.
    ///
    /// Starts with the events already in history and ends when the run closes. With
    /// `--output json` each event and the final result is one JSON document per line.
    #[command(after_long_help = long_help!(
        "orbit execution watch order-A-1",
        "orbit execution watch order-A-1 --follow --output json",
    ))]
    Watch {
        /// The execution id.
        id: String,
        /// The run (default: the latest).
        #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
        run: u32,
        /// Keep following through continue-as-new into the next runs.
        #[arg(long)]
        follow: bool,
    },
    /// Send a signal to a running execution.
    ///
    /// Returns once the signal is recorded in history, with its sequence number.
    #[command(after_long_help = long_help!(
        "orbit execution signal order-A-1 approve --payload '{\"by\": \"ana\"}'",
        "orbit execution signal order-A-1 cancel-requested",
    ))]
    Signal {
        /// The execution id.
        id: String,
        /// The signal name, as declared in the workflow's `signals`.
        name: String,
        /// The payload as JSON, or `@PATH` to read it from a file. Default: null.
        #[arg(long, value_name = "JSON")]
        payload: Option<String>,
        /// A caller-chosen id that makes a retry safe: the same id again records nothing
        /// and answers the first call's seq, even after the execution finished.
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
    },
    /// Apply an update declared by the workflow and print its reply.
    ///
    /// Returns once the reply is recorded in history (for a handler with steps: once they
    /// finished; `UPDATE_FAILED` if one failed) or the update was refused (`UPDATE_REJECTED`
    /// from the handler's validator, with nothing recorded). `--timeout` bounds the wait
    /// (`DEADLINE_EXCEEDED`; the update goes on: retry with the same `--request-id`).
    /// `--start-workflow` starts the execution first when it does not exist.
    #[command(after_long_help = long_help!(
        "orbit execution update order-A-1 add-item --args '{\"sku\": \"A1\"}' --request-id r-17",
        "orbit execution update cart-7 add-item --args '{\"sku\": \"A1\"}' --start-workflow cart --input '{}' --request-id r-18",
    ))]
    Update {
        /// The execution id.
        id: String,
        /// The update name, as declared in the workflow's `updates`.
        name: String,
        /// The argument as JSON, or `@PATH` to read it from a file. Default: null.
        #[arg(long, value_name = "JSON")]
        args: Option<String>,
        /// A caller-chosen id that makes a retry safe: the same id again applies nothing
        /// and answers the first call's reply.
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
        /// Update-with-start: start the execution with this workflow (NAME or
        /// NAME@VERSION) when it does not exist, then apply the update.
        #[arg(long, value_name = "NAME[@VERSION]", value_parser = parse_workflow_ref)]
        start_workflow: Option<WorkflowRef>,
        /// With `--start-workflow`: the input of the execution it starts, as JSON or `@PATH`.
        #[arg(long, value_name = "JSON", requires = "start_workflow")]
        input: Option<String>,
        /// With `--start-workflow`: the task priority of the execution it starts, 1
        /// (dispatched first) to 5 (last); default: the workflow's `priority:`, else 3.
        #[arg(
            long,
            value_name = "N",
            value_parser = parse_priority,
            requires = "start_workflow"
        )]
        priority: Option<u32>,
        /// How long to wait for the reply, e.g. `30s` (sent as the call's gRPC deadline).
        #[arg(long, value_name = "DURATION", value_parser = crate::flags::duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Evaluate a query declared by the workflow against the execution's current state.
    ///
    /// With `--at SEQ` it is evaluated against the state right after history event SEQ
    /// (events 1..=SEQ folded, with the workflow version the run had then).
    #[command(after_long_help = long_help!(
        "orbit execution query order-A-1 progress",
        "orbit execution query order-A-1 progress --output json | jq .result",
        "orbit execution query order-A-1 progress --at 7",
    ))]
    Query {
        /// The execution id.
        id: String,
        /// The query name, as declared in the workflow's `queries`.
        name: String,
        /// The run (default: the latest).
        #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
        run: u32,
        /// Evaluate it as of this history seq (default: now).
        #[arg(long, value_name = "SEQ", default_value_t = 0, hide_default_value = true)]
        at: u64,
    },
    /// Request cancellation of a running execution.
    ///
    /// Returns once the request is recorded; the execution then cancels in-flight work,
    /// compensates and ends CANCELLED (follow it with `execution watch`).
    #[command(after_long_help = long_help!(
        "orbit execution cancel order-A-1 --reason 'customer asked'",
    ))]
    Cancel {
        /// The execution id.
        id: String,
        /// Why, recorded in the `CancelRequested` event.
        #[arg(long, value_name = "TEXT", default_value = "")]
        reason: String,
        /// A caller-chosen id that makes a retry safe: the same id again records nothing
        /// and answers the first call's seq, even after the execution finished.
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
    },
    /// Resume an execution parked by the poison quarantine (status SUSPENDED).
    ///
    /// Clears its failure count and the mark on the offending inbox entry; the owner
    /// applies its pending entries again (alone, counted first: a poison that still fails is
    /// parked again).
    #[command(after_long_help = long_help!("orbit execution resume order-A-1",))]
    Resume {
        /// The execution id.
        id: String,
    },
    /// End an open (typically SUSPENDED) execution as FAILED with code TERMINATED.
    ///
    /// The workflow's logic does not run on its pending entries: the terminal event is
    /// written directly, unresolved units are cancelled (queued tasks withdrawn, running
    /// children cancelled), its timer is dropped. No compensation runs. Repeating it is a
    /// no-op.
    #[command(after_long_help = long_help!(
        "orbit execution terminate order-A-1 --reason 'poisoned by a bad definition'",
    ))]
    Terminate {
        /// The execution id.
        id: String,
        /// Why, recorded as the message of the TERMINATED error.
        #[arg(long, value_name = "TEXT", default_value = "")]
        reason: String,
    },
    /// Move a running execution to another version of its workflow, if that is safe.
    ///
    /// The server diffs the two versions' step graphs against the execution's state and
    /// lists each difference as safe or UNSAFE for it: a completed step may not change its
    /// kind or task nor disappear without `renamed_from`, a running step may not change what
    /// it runs; a removed running step is cancelled first; an added step whose needs are met
    /// becomes ready. Any UNSAFE difference refuses the migration (MIGRATION_UNSAFE) and
    /// nothing is written. --dry-run only prints the diff. See docs/evolving.md.
    #[command(after_long_help = long_help!(
        "orbit execution migrate order-A-1 --to 2 --dry-run",
        "orbit execution migrate order-A-1 --to 2 --reason 'fix the charge input'",
    ))]
    Migrate {
        /// The execution id.
        id: String,
        /// The version of its workflow to run from now on.
        #[arg(long, value_name = "VERSION")]
        to: String,
        /// Only print the diff; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Why, for the server's logs.
        #[arg(long, value_name = "TEXT", default_value = "")]
        reason: String,
        /// Makes a retry migrate once (the same id with other arguments is refused).
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
    },
    /// Go back to an earlier point of an execution's current run and go on from there.
    ///
    /// The current run ends (`WorkflowReset`; its open work is cancelled without
    /// compensation) and the execution goes on in the next run from the run's state at the
    /// point: just before a step first started (--to-step) or right after a history event
    /// (--to-seq). Kept, not run again: the steps that succeeded or were skipped by the
    /// point, with their outputs. Run again, with new idempotency keys: the work open at the
    /// point, the steps the old run's compensation undid, and every step depending on one
    /// of those. Signals received after the point are received again unless
    /// --drop-signals. A FAILED, CANCELLED, TIMED_OUT or COMPLETED execution is reopened;
    /// the old run stays readable (`execution history ID --run N`). --to-version also
    /// migrates the new run (checked like `execution migrate`). --dry-run only prints the
    /// plan. A step that never started, or a point where the run had ended or was winding
    /// down, is refused with RESET_POINT_INVALID. See docs/evolving.md ("Reset and fork").
    #[command(after_long_help = long_help!(
        "orbit execution reset order-A-1 --to-step charge --dry-run",
        "orbit execution reset order-A-1 --to-seq 7 --drop-signals --reason 'bad approval'",
        "orbit execution reset order-A-1 --to-step charge --to-version 2 --request-id r-1",
    ))]
    Reset(super::restore::ResetArgs),
    /// Create a new execution from another's state at a history seq of one of its runs.
    ///
    /// For debugging, what-if, or recovering a copy while the original stays as evidence
    /// (it is not touched). The fork's history begins with a copy of the source's events up
    /// to --at, then `RunRestored`. Kept, not run again: the steps that succeeded or were
    /// skipped by then, with their outputs. Run again in the fork: the work open at that
    /// seq and every step depending on it. Signals the source received later are not given
    /// to the fork. --version migrates the fork right away (checked like `execution
    /// migrate`). Forking to the same --new-id again answers the existing fork. --dry-run
    /// only prints the plan. See docs/evolving.md ("Reset and fork").
    #[command(after_long_help = long_help!(
        "orbit execution fork order-A-1 --at 7 --new-id order-A-1-copy --dry-run",
        "orbit execution fork order-A-1 --run 1 --at 12 --new-id order-A-1-v2 --version 2",
    ))]
    Fork(super::restore::ForkArgs),
    /// Delete a finished execution now, with its children and all their stored rows.
    ///
    /// Finished executions are deleted by retention anyway (the server's --retention or the
    /// workflow's `retention`); this deletes one at once. A running execution (or one with a
    /// running descendant) is refused with EXECUTION_NOT_FINISHED; deleting it again
    /// answers EXECUTION_NOT_FOUND.
    #[command(after_long_help = long_help!(
        "orbit execution delete order-A-1",
    ))]
    Delete {
        /// The execution id.
        id: String,
    },
    /// List executions (their latest run each), newest first.
    #[command(after_long_help = long_help!(
        "orbit execution list",
        "orbit execution list --status running --status compensating --workflow orders@2",
        "orbit execution list --status failed --limit 10 --output json",
        "orbit execution list --query \"workflow = 'billing' AND status = 'FAILED' AND created > '2026-11-24'\"",
    ))]
    List {
        /// Only these statuses (repeatable).
        #[arg(long, value_enum, ignore_case = true, value_name = "STATUS")]
        status: Vec<StatusFilter>,
        /// Only this workflow, as NAME or NAME@VERSION.
        #[arg(long, value_name = "NAME[@VERSION]", value_parser = parse_workflow_ref)]
        workflow: Option<WorkflowRef>,
        /// At most this many executions.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: u32,
        /// A list query, ANDed with the filters above (docs/queries.md):
        /// "workflow = 'billing' AND status IN ('FAILED', 'TIMED_OUT') ORDER BY created ASC".
        #[arg(long, value_name = "QUERY")]
        query: Option<String>,
    },
    /// Count the executions a list query matches, in total or grouped (largest group
    /// first).
    #[command(after_long_help = long_help!(
        "orbit execution count",
        "orbit execution count --group-by status",
        "orbit execution count --query \"workflow STARTS_WITH 'billing.'\" --group-by workflow,status",
    ))]
    Count {
        /// A list query (docs/queries.md); empty counts every execution.
        #[arg(long, value_name = "QUERY")]
        query: Option<String>,
        /// Group by these attributes, comma-separated, at most 3: workflow, version,
        /// status, schedule, parent, root.
        #[arg(long, value_name = "ATTR,...", value_delimiter = ',')]
        group_by: Vec<String>,
    },
    /// List the attributes a query may name: the system attributes and the search
    /// attributes registered workflows declare, with their types.
    #[command(after_long_help = long_help!(
        "orbit execution attributes",
        "orbit execution attributes --output json",
    ))]
    Attributes,
}
