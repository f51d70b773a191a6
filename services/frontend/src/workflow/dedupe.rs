//! Debounce and singleton starts (`dedupe:`, docs/flow-control.md, "Debounce and singleton
//! starts"): what a start of a workflow that declares `dedupe:` does before (or instead of)
//! reaching the owner.
//!
//! Only starts without a caller's `execution_id` take this path (a caller who names the id
//! already chose how its starts collapse: by id). The key is claimed in the store
//! (`StartDedupe::claim_dedupe`, one statement, atomic across frontends):
//! - `keep: first`: the start that opens the window goes on to the owner as any start; a
//!   start inside the window answers the window's execution with `created: false`, after
//!   an idempotent start of it with the first start's stored request (so the execution
//!   exists even if the first start's frontend died between its claim and the owner);
//! - `keep: last`: nothing is created now; the first start of the key reserves the id
//!   (`created: true`), each later one replaces the input and pushes the fire time
//!   (`created: false`), and the scheduler creates the execution when it is due.

use crate::error::{err, ApiResult, FrontendError};
use crate::Shared;
use orbit_api::internal::v1 as internal;
use orbit_definition::{Dedupe, Definition, Keep};
use orbit_server_kit::ErrorCode;
use orbit_store::{DedupeClaim, DedupeStart, VersionRow};
use serde_json::Value;

/// What a start of a `dedupe:` workflow does next.
pub(crate) enum Deduped {
    /// It opened a `keep: first` window: create the execution as usual (with the input
    /// defaults applied).
    Create(Value),
    /// Answered without creating anything now.
    Answered(internal::StartExecutionResponse),
}

/// A start of a `dedupe:` workflow, as the caller sent it (input and memo already
/// size-checked).
pub(crate) struct Start<'a> {
    pub execution_id: &'a str,
    pub input: Value,
    pub memo: Option<&'a prost_types::Struct>,
    pub priority: u32,
}

/// Claims the key of a start of `def` (which declares `dedupe`). The memo goes with the
/// input: the start kept (the window's first, or a debounce's last) is the one whose memo
/// the execution records.
pub(crate) async fn start(
    shared: &Shared,
    def: &Definition,
    dedupe: &Dedupe,
    pinned: &VersionRow,
    start: Start<'_>,
) -> ApiResult<Deduped> {
    let Start { execution_id, input, memo, priority } = start;
    // The owner would refuse a bad input; refuse it before it claims a key.
    let input = match &def.input {
        Some(contract) => contract.apply(input).map_err(|v| {
            let list: Vec<String> = v.iter().map(ToString::to_string).collect();
            err(ErrorCode::InvalidInput, list.join("; "))
        })?,
        None => input,
    };
    let key = dedupe
        .key_of(&input)
        .map_err(|m| err(ErrorCode::InvalidInput, format!("dedupe.key: {m}")))?;
    let start = DedupeStart {
        workflow: def.name.clone(),
        key,
        keep: dedupe.keep,
        execution_id: execution_id.to_string(),
        version: pinned.version.clone(),
        definition_hash: pinned.definition_hash.clone(),
        input: input.clone(),
        memo: memo.map(|m| Value::Object(struct_json(m.clone()))),
        priority,
        window_ms: dedupe.window_ms,
        max_delay_ms: dedupe.max_delay_ms(),
    };
    let claim = shared.store.claim_dedupe(&start, shared.config.clock.now()).await?;
    if claim.claimed && claim.row.keep == Keep::First {
        return Ok(Deduped::Create(input));
    }
    if claim.claimed {
        tracing::debug!(workflow = %def.name, execution_id, fire_at = claim.row.window_end_ms, "debounced start reserved an execution");
        if let Some(wake) = &shared.config.scheduler_wake {
            wake.notify_one();
        }
        return Ok(Deduped::Answered(reserved(&claim, true)));
    }
    orbit_metrics::get()
        .starts_collapsed
        .with_label_values(&[def.name.as_str(), dedupe.keep.as_str()])
        .inc();
    if claim.row.keep == Keep::Last {
        return Ok(Deduped::Answered(reserved(&claim, false)));
    }
    let row = &claim.row;
    let request = internal::StartExecutionRequest {
        execution_id: row.execution_id.clone(),
        workflow: def.name.clone(),
        version: row.version.clone(),
        definition_hash: row.definition_hash.clone(),
        input: Some(orbit_server_kit::payload::json_to_proto(row.input.clone())),
        memo: row.memo.clone().and_then(orbit_server_kit::payload::object_to_struct),
        priority: row.priority,
        ..internal::StartExecutionRequest::default()
    };
    let started = shared.owner.start_execution(tonic::Request::new(request)).await;
    let started = started.map_err(FrontendError::Owner)?.into_inner();
    Ok(Deduped::Answered(internal::StartExecutionResponse { created: false, ..started }))
}

/// A memo as JSON (it came through `search::memo`, which checked it converts).
fn struct_json(memo: prost_types::Struct) -> serde_json::Map<String, Value> {
    orbit_server_kit::payload::struct_to_json_object(memo).unwrap_or_default()
}

/// The answer for a reserved (`keep: last`) execution: it will be created as run 1 of the
/// version its last start pinned.
fn reserved(claim: &DedupeClaim, created: bool) -> internal::StartExecutionResponse {
    internal::StartExecutionResponse {
        execution_id: claim.row.execution_id.clone(),
        run: 1,
        created,
        version: claim.row.version.clone(),
        definition_hash: claim.row.definition_hash.clone(),
        ..internal::StartExecutionResponse::default()
    }
}

/// `EXECUTION_PENDING_START` for an id reserved by a debounce not fired yet; `None` for
/// any other id (one read, made only after the execution was not found).
pub(crate) async fn pending(
    shared: &Shared,
    execution_id: &str,
) -> ApiResult<Option<FrontendError>> {
    let Some(fire_at) = shared.store.pending_start(execution_id).await? else {
        return Ok(None);
    };
    let at = orbit_server_kit::payload::opt_ms_to_timestamp(Some(fire_at))
        .map_or_else(|| fire_at.to_string(), |t| t.to_string());
    Ok(Some(err(
        ErrorCode::ExecutionPendingStart,
        format!(
            "execution {execution_id} is reserved by a debounced start (`dedupe: {{keep: \
             last}}`) and will be created at {at} ({fire_at} ms since the epoch), or later if \
             more starts of its key arrive; ask again then"
        ),
    )))
}
