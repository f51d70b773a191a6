//! `orbit execution ...`: starting, inspecting, following and steering executions over
//! `WorkflowService`.
//!
//! The one-call commands live here (their arguments in [`super::execution_args`]); following a run is in
//! [`super::follow`], paged reads (`history`, `list`) in [`super::listing`].

use orbit_api::v1::{
    CancelExecutionRequest, DescribeExecutionRequest, ExecutionStatus, QueryExecutionRequest,
    ResumeExecutionRequest, SignalExecutionRequest, StartExecutionRequest,
    TerminateExecutionRequest, UpdateExecutionRequest,
};
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::json;

use super::convert::{payload, result_json};
use super::describe::{description_json, description_text};
use super::error::Failure;
pub use super::execution_args::ExecutionArgs;
use super::execution_args::ExecutionCommand;
use super::follow::{event_line, follow_run, result_text};
use super::input::{parse_json_arg, WorkflowRef};
use super::listing::{history, list, ListFilters};
use super::output::{pretty, print_json, print_json_line, print_text, Fields, Format};
use super::Client;

/// Runs an `execution` subcommand.
pub async fn run(args: ExecutionArgs) -> Result<(), Failure> {
    let format = args.connect.output;
    let connect = &args.connect;
    match args.command {
        ExecutionCommand::Start { workflow, input, id, priority, memo, wait } => {
            // Parse before connecting: bad JSON is a usage error whether or not a server runs.
            let input = input.as_deref().map(|text| parse_json_arg("--input", text)).transpose()?;
            let memo = memo.as_deref().map(super::search::memo_arg).transpose()?;
            let request = StartExecutionRequest {
                memo,
                workflow: workflow.name.clone(),
                version: workflow.version_or_empty(),
                input: input.map(json_to_proto),
                execution_id: id.unwrap_or_default(),
                // 0: the workflow's `priority:`, else 3.
                priority: priority.unwrap_or(0),
            };
            start(connect.workflow_client().await?, format, &workflow, request, wait).await
        }
        ExecutionCommand::Describe { id, run, at } => {
            let request = DescribeExecutionRequest { execution_id: id, run, at_seq: at };
            let response =
                connect.workflow_client().await?.describe_execution(request).await?.into_inner();
            let description = response.execution.clone().unwrap_or_default();
            match format {
                Format::Json => print_json(&super::search::with_search_json(
                    description_json(&description),
                    &response,
                )),
                Format::Human => print_text(&format!(
                    "{}{}",
                    description_text(&description),
                    super::search::search_text(&response)
                )),
            }
            Ok(())
        }
        ExecutionCommand::History { id, run } => {
            history(connect.workflow_client().await?, format, id, run).await
        }
        ExecutionCommand::Watch { id, run, follow } => {
            let mut client = connect.workflow_client().await?;
            let result = follow_run(&mut client, &id, run, false, follow, |event| match format {
                Format::Json => print_json_line(&json!({"event": event})),
                Format::Human => print_text(&event_line(&event)),
            })
            .await?;
            let result = result_json(result);
            match format {
                Format::Json => print_json_line(&json!({"result": result})),
                Format::Human => print_text(&format!("\n{}", result_text(&result).render())),
            }
            Ok(())
        }
        ExecutionCommand::Signal { id, name, payload, request_id } => {
            let payload =
                payload.as_deref().map(|text| parse_json_arg("--payload", text)).transpose()?;
            let request = SignalExecutionRequest {
                execution_id: id,
                name,
                payload: payload.map(json_to_proto),
                request_id: request_id.unwrap_or_default(),
            };
            let response =
                connect.workflow_client().await?.signal_execution(request).await?.into_inner();
            match format {
                Format::Json => print_json(&json!({"seq": response.seq, "run": response.run})),
                Format::Human => print_text(
                    &Fields::new()
                        .add("recorded", "yes")
                        .add("seq", response.seq)
                        .add("run", response.run)
                        .render(),
                ),
            }
            Ok(())
        }
        ExecutionCommand::Update {
            id,
            name,
            args,
            request_id,
            start_workflow,
            input,
            priority,
            timeout,
        } => {
            let args = args.as_deref().map(|text| parse_json_arg("--args", text)).transpose()?;
            let input = input.as_deref().map(|text| parse_json_arg("--input", text)).transpose()?;
            let start = start_workflow.map(|w| StartExecutionRequest {
                memo: None,
                workflow: w.name.clone(),
                version: w.version_or_empty(),
                input: input.map(json_to_proto),
                execution_id: String::new(),
                priority: priority.unwrap_or(0),
            });
            let mut request = tonic::Request::new(UpdateExecutionRequest {
                execution_id: id,
                name,
                args: args.map(json_to_proto),
                request_id: request_id.unwrap_or_default(),
                start,
            });
            if let Some(t) = timeout {
                request.set_timeout(t);
            }
            let response =
                connect.workflow_client().await?.update_execution(request).await?.into_inner();
            let result = payload(response.result.map(proto_to_json));
            match format {
                Format::Json => print_json(&json!({"result": result, "seq": response.seq})),
                Format::Human => print_text(&format!("{}\n", pretty(&result))),
            }
            Ok(())
        }
        ExecutionCommand::Query { id, name, run, at } => {
            let request = QueryExecutionRequest { execution_id: id, name, run, at_seq: at };
            let response =
                connect.workflow_client().await?.query_execution(request).await?.into_inner();
            let result = payload(response.result.map(proto_to_json));
            match format {
                Format::Json => {
                    print_json(&json!({"result": result, "as_of_seq": response.as_of_seq}));
                }
                Format::Human => print_text(&format!("{}\n", pretty(&result))),
            }
            Ok(())
        }
        ExecutionCommand::Cancel { id, reason, request_id } => {
            let request = CancelExecutionRequest {
                execution_id: id,
                reason,
                request_id: request_id.unwrap_or_default(),
            };
            let response =
                connect.workflow_client().await?.cancel_execution(request).await?.into_inner();
            match format {
                Format::Json => {
                    print_json(&json!({"seq": response.seq, "recorded": response.seq != 0}));
                }
                Format::Human if response.seq == 0 => {
                    print_text("already winding down; nothing recorded\n");
                }
                Format::Human => print_text(&format!("cancel requested (seq {})\n", response.seq)),
            }
            Ok(())
        }
        ExecutionCommand::Resume { id } => {
            let request = ResumeExecutionRequest { execution_id: id };
            let response =
                connect.workflow_client().await?.resume_execution(request).await?.into_inner();
            match format {
                Format::Json => print_json(&json!({
                    "resumed": true,
                    "entry_seq": response.entry_seq,
                    "failures": response.failures,
                })),
                Format::Human => print_text(&format!(
                    "resumed (inbox entry {} is applied again; {} failures cleared)\n",
                    response.entry_seq, response.failures
                )),
            }
            Ok(())
        }
        ExecutionCommand::Delete { id } => {
            let request = orbit_api::v1::DeleteExecutionRequest { execution_id: id.clone() };
            let response =
                connect.workflow_client().await?.delete_execution(request).await?.into_inner();
            match format {
                Format::Json => print_json(&json!({
                    "execution_id": id,
                    "executions": response.executions,
                    "events": response.events,
                })),
                Format::Human => print_text(&format!(
                    "deleted {id} ({} executions, {} history events)\n",
                    response.executions, response.events
                )),
            }
            Ok(())
        }
        ExecutionCommand::Terminate { id, reason } => {
            let request = TerminateExecutionRequest { execution_id: id, reason };
            let response =
                connect.workflow_client().await?.terminate_execution(request).await?.into_inner();
            match format {
                Format::Json => {
                    print_json(&json!({"seq": response.seq, "terminated": response.terminated}));
                }
                Format::Human if !response.terminated => {
                    print_text(&format!("already terminated (seq {})\n", response.seq));
                }
                Format::Human => {
                    print_text(&format!("terminated: FAILED, TERMINATED (seq {})\n", response.seq));
                }
            }
            Ok(())
        }
        ExecutionCommand::Migrate { id, to, dry_run, reason, request_id } => {
            let m = super::migrate::Migration { id, to, dry_run, reason, request_id };
            super::migrate::migrate(connect.workflow_client().await?, format, m).await
        }
        ExecutionCommand::Reset(args) => {
            super::restore::reset(connect.workflow_client().await?, format, args).await
        }
        ExecutionCommand::Fork(args) => {
            super::restore::fork(connect.workflow_client().await?, format, args).await
        }
        ExecutionCommand::List { status, workflow, limit, query } => {
            let filters = ListFilters { statuses: status, workflow, query };
            list(connect.workflow_client().await?, format, filters, limit).await
        }
        ExecutionCommand::Count { query, group_by } => {
            super::counting::count(connect.workflow_client().await?, format, query, group_by).await
        }
        ExecutionCommand::Attributes => {
            super::counting::attributes(connect.workflow_client().await?, format).await
        }
    }
}

/// Whether the request names its execution id (then `created: false` means it existed).
fn names_its_id(request: &StartExecutionRequest) -> bool {
    !request.execution_id.is_empty()
}

/// `execution start`, and with `wait` the result of the execution.
async fn start(
    mut client: Client,
    format: Format,
    workflow: &WorkflowRef,
    request: StartExecutionRequest,
    wait: bool,
) -> Result<(), Failure> {
    // Without a caller's id, an answer that created nothing is a start the workflow's
    // `dedupe:` collapsed into the execution of its key's window.
    let collapsed = !names_its_id(&request);
    let started = client.start_execution(request).await?.into_inner();
    let collapsed = collapsed && !started.created;
    let mut document = json!({
        "execution_id": started.execution_id,
        "run": started.run,
        "created": started.created,
        "collapsed": collapsed,
        "version": started.version,
        "definition_hash": started.definition_hash,
    });
    let mut fields = Fields::new();
    fields
        .add("execution", &started.execution_id)
        .add("run", started.run)
        .add(
            "started",
            match (started.created, collapsed) {
                (true, _) => "now",
                (false, true) => "collapsed into an existing execution (the workflow's dedupe)",
                (false, false) => "earlier (already existed)",
            },
        )
        .add("workflow", format!("{}@{}", workflow.name, started.version))
        .add("hash", &started.definition_hash);
    if !wait {
        match format {
            Format::Json => print_json(&document),
            Format::Human => print_text(&fields.render()),
        }
        return Ok(());
    }
    if format == Format::Human {
        // Show what was started before the (possibly long) wait.
        eprint!("{}", fields.render());
    }
    let result = follow_run(
        &mut client,
        &started.execution_id,
        started.run,
        format == Format::Json,
        true,
        |event| eprint!("{}", event_line(&event)),
    )
    .await?;
    let completed = result.status() == ExecutionStatus::Completed;
    let result = result_json(result);
    match format {
        Format::Json => {
            document["result"] = result;
            print_json(&document);
        }
        Format::Human => print_text(&result_text(&result).render()),
    }
    if completed {
        Ok(())
    } else {
        Err(Failure::Unsuccessful)
    }
}
