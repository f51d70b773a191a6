//! `ResetExecution` and `ForkExecution`: an execution's run goes on from its state at an
//! earlier point — the same execution's next run (reset), or a new execution (fork) — see
//! `orbit_engine::restore`.
//!
//! Both are checked here first, against the run's history as the store holds it (the plan
//! and, with a target version, the migration's diff): a dry run answers that and writes
//! nothing; a refusal is answered before anything is sent. A reset then travels through
//! the inbox like a migration (an operator action the owner applies even to a parked or
//! closed execution) and the owner — the only writer — plans again against the history it
//! reads and commits both runs at once. A fork is a start (`OwnerService.StartExecution`
//! with `fork`) routed to the new id's owner, which reads the source's history itself.
//! A reset needs the `update` permission on the workflow; a fork `start` on the workflow
//! (the source is read within the caller's workflow patterns).

use super::commands::send;
use super::migrate::changes;
use super::reads::load_run;
use crate::error::{err, ApiResult, FrontendError};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::internal::v1 as internal;
use orbit_api::v1::reset_execution_request::To;
use orbit_api::v1::{
    ForkExecutionRequest, ForkExecutionResponse, ResetExecutionRequest, ResetExecutionResponse,
    RestorePlan,
};
use orbit_auth::Action;
use orbit_engine::event::HistoryEvent;
use orbit_engine::restore::{self, Point, Source};
use orbit_engine::CommandError;
use orbit_server_kit::payload::check_limits;
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use orbit_store::inbox::Reset;
use orbit_store::{InboxMessage, InboxReply};
use serde_json::{json, Value};

pub(crate) async fn reset(
    shared: &Shared,
    scope: &Scope,
    req: ResetExecutionRequest,
) -> ApiResult<ResetExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let to = match &req.to {
        Some(To::Step(step)) => Point::Step(rules::id("step", step)?.to_string()),
        Some(To::Seq(seq)) => Point::Seq(*seq),
        None => return Err(rules::invalid("to", "name a step or a seq to go back to").into()),
    };
    let to_version = rules::optional("to_version", &req.to_version)?;
    let request_id = rules::optional("request_id", &req.request_id)?;
    check_limits("reason", &json!(req.reason), shared.config.max_payload_bytes)?;
    let loaded = load_run(shared, scope, Action::Update, id, 0).await?;
    let through = restore::point(&loaded.history, &to).map_err(refused)?;
    let source = Source { execution_id: id, run: loaded.run };
    let plan = checked(shared, &loaded.history, through, source, to_version, req.dry_run).await?;
    if req.dry_run {
        return Ok(ResetExecutionResponse {
            plan: Some(restore_plan(&plan)),
            reset: false,
            run: loaded.run,
            seq: 0,
        });
    }
    let (to_step, to_seq) = match to {
        Point::Step(s) => (Some(s), None),
        Point::Seq(n) => (None, Some(n)),
    };
    let message = InboxMessage::Reset(Reset {
        to_step,
        to_seq,
        drop_signals: req.drop_signals,
        to_version: to_version.map(str::to_string),
        reason: req.reason,
        request_id: request_id.map(str::to_string),
    });
    match send(shared, id, &message).await? {
        Some(InboxReply::Reset { seq, run, plan }) => {
            Ok(ResetExecutionResponse { plan: Some(restore_plan(&plan)), reset: true, run, seq })
        }
        other => Err(err(
            ErrorCode::StorageError,
            format!("unexpected owner reply to a reset of `{id}`: {other:?}"),
        )),
    }
}

pub(crate) async fn fork(
    shared: &Shared,
    scope: &Scope,
    req: ForkExecutionRequest,
) -> ApiResult<ForkExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let new_id = rules::new_execution_id("new_execution_id", &req.new_execution_id)?;
    let version = rules::optional("version", &req.version)?;
    check_limits("reason", &json!(req.reason), shared.config.max_payload_bytes)?;
    if req.at_seq == 0 {
        return Err(rules::invalid("at_seq", "is required: the last seq the fork keeps").into());
    }
    let loaded = load_run(shared, scope, Action::Read, id, req.run).await?;
    scope.workflow(Action::Start, &loaded.row.workflow)?;
    let through = restore::point(&loaded.history, &Point::Seq(req.at_seq)).map_err(refused)?;
    let source = Source { execution_id: id, run: loaded.run };
    let plan = checked(shared, &loaded.history, through, source, version, req.dry_run).await?;
    let fork_version = plan["migration"]["to_version"]
        .as_str()
        .or(plan["version"].as_str())
        .unwrap_or_default()
        .to_string();
    if req.dry_run {
        return Ok(ForkExecutionResponse {
            plan: Some(restore_plan(&plan)),
            created: false,
            execution_id: new_id.to_string(),
            version: fork_version,
        });
    }
    let request = internal::StartExecutionRequest {
        memo: None,
        execution_id: new_id.to_string(),
        workflow: loaded.row.workflow.clone(),
        version: version.unwrap_or_default().to_string(),
        definition_hash: String::new(),
        input: None,
        parent_id: String::new(),
        root_id: String::new(),
        schedule_id: String::new(),
        trace_context: None,
        update: None,
        fork: Some(internal::ForkFrom {
            source_execution_id: id.to_string(),
            source_run: loaded.run,
            at_seq: through,
            reason: req.reason,
        }),
        priority: 0,
        versions_seen: 0,
    };
    let started = shared.owner.start_execution(tonic::Request::new(request)).await;
    let started = started.map_err(FrontendError::Owner)?.into_inner();
    if started.created {
        let metrics = orbit_metrics::get();
        metrics.executions_forked.with_label_values(&[loaded.row.workflow.as_str()]).inc();
    }
    Ok(ForkExecutionResponse {
        plan: Some(restore_plan(&plan)),
        created: started.created,
        execution_id: started.execution_id,
        version: started.version,
    })
}

/// The plan of a restoration from `history` through `through` (as JSON, the shape the
/// owner's reply stores), with the migration's plan under `migration` when `to_version` is
/// set; refused (the engine's code) when the point or the migration is not possible — an
/// unsafe migration only when it is not a dry run (a dry run answers its diff).
async fn checked(
    shared: &Shared,
    history: &[HistoryEvent],
    through: u64,
    source: Source<'_>,
    to_version: Option<&str>,
    dry_run: bool,
) -> ApiResult<Value> {
    let at = restore::state_at(history, through);
    let store = shared.store.as_ref();
    let def = shared.defs.pinned(store, &at.workflow, &at.version, &at.definition_hash).await?;
    let plan = restore::plan(&def, history, through).map_err(refused)?;
    let mut json = serde_json::to_value(&plan).unwrap_or(Value::Null);
    let Some(v) = to_version.filter(|v| *v != at.version) else { return Ok(json) };
    let Some(row) = shared.store.get_definition(&at.workflow, Some(v)).await? else {
        return Err(err(
            ErrorCode::WorkflowNotFound,
            format!("no workflow `{}` version {v} to go on with", at.workflow),
        ));
    };
    let to = shared.defs.pinned(store, &at.workflow, v, &row.definition_hash).await?;
    // The state the migration would meet: the restored run right after `RunRestored`.
    let created = restore::reset_created(&history[0].event, &at)
        .ok_or_else(|| err(ErrorCode::StorageError, "a run without WorkflowCreated"))?;
    let first = restore::first_events(created, &plan, source, "", false, 0);
    let state = orbit_engine::State::from_history(&first);
    // A dry run answers an unsafe diff (as `MigrateExecution`'s does); a reset is refused.
    let migration = match orbit_engine::migrate::migrate(&def, &to, &state) {
        Ok((plan, _)) => plan,
        Err((e, plan)) if dry_run && e.code == ErrorCode::MigrationUnsafe => plan,
        Err((e, _)) => return Err(refused(e)),
    };
    json["migration"] = serde_json::to_value(&migration).unwrap_or(Value::Null);
    Ok(json)
}

fn refused(e: CommandError) -> FrontendError {
    err(e.code, e.message)
}

/// The API's plan from the engine's (as JSON; see [`checked`] and the owner's reply).
fn restore_plan(plan: &Value) -> RestorePlan {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let migration = &plan["migration"];
    let changes = if migration.is_null() { Vec::new() } else { changes(migration) };
    RestorePlan {
        through_seq: plan["through_seq"].as_u64().unwrap_or(0),
        kept: strings(&plan["kept"]),
        forgotten: strings(&plan["forgotten"]),
        signals_after: plan["signals_after"].as_u64().map_or(0, |n| n.try_into().unwrap_or(0)),
        version: plan["version"].as_str().unwrap_or_default().to_string(),
        safe: changes.iter().all(|c| c.safe),
        changes,
    }
}
