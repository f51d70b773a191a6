//! Batches on the wire ⇄ the store's batch rows (`orbit_store::batch_job`): the request's
//! selector and action validated into a [`BatchSpec`] on receipt, a stored row turned into
//! the API's `Batch`.

use crate::error::ApiResult;
use orbit_api::v1::{
    batch_action, Batch, BatchAction as WireAction, BatchItem as WireItem, BatchItemOutcome,
    BatchMigrate, BatchReset, BatchSelector as WireSelector, BatchState as WireState,
    ExecutionStatus, StartBatchRequest,
};
use orbit_server_kit::payload::ms_to_timestamp;
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_store::{
    BatchAction, BatchItem, BatchRow, BatchSelector, BatchSpec, BatchState, ItemOutcome,
};

/// The rate when a request names none (executions per second).
pub(crate) const DEFAULT_RATE_PER_SECOND: u32 = 50;

/// The highest rate a batch may ask for (executions per second).
pub(crate) const MAX_RATE_PER_SECOND: u32 = 1000;

/// The spec a `StartBatch` request asks for, validated (field paths in the refusals).
pub(crate) fn spec_of(req: &StartBatchRequest) -> ApiResult<BatchSpec> {
    let Some(selector) = &req.selector else {
        return Err(invalid("selector", "is required (at least `selector.workflow`)").into());
    };
    let workflow = rules::id("selector.workflow", &selector.workflow)?.to_string();
    let version = rules::optional("selector.version", &selector.version)?.map(str::to_string);
    let mut statuses = Vec::new();
    for raw in &selector.statuses {
        let status = ExecutionStatus::try_from(*raw)
            .ok()
            .and_then(orbit_wire::status_of)
            .ok_or_else(|| invalid("selector.statuses", format!("{raw} is not a status")))?;
        if !statuses.contains(&status.as_str().to_string()) {
            statuses.push(status.as_str().to_string());
        }
    }
    if statuses.is_empty() {
        statuses.push(orbit_engine::Status::Running.as_str().to_string());
    }
    let action = match req.action.as_ref().and_then(|a| a.action.as_ref()) {
        Some(batch_action::Action::Migrate(m)) => BatchAction::Migrate {
            to_version: rules::id("action.migrate.to_version", &m.to_version)?.to_string(),
        },
        Some(batch_action::Action::Reset(r)) => BatchAction::Reset {
            step: rules::id("action.reset.step", &r.step)?.to_string(),
            drop_signals: r.drop_signals,
            to_version: rules::optional("action.reset.to_version", &r.to_version)?
                .map(str::to_string),
        },
        None => return Err(invalid("action", "is required (`migrate` or `reset`)").into()),
    };
    let rate_per_second = match req.rate_per_second {
        0 => DEFAULT_RATE_PER_SECOND,
        n if n > MAX_RATE_PER_SECOND => {
            return Err(invalid(
                "rate_per_second",
                format!("{n} is over the limit of {MAX_RATE_PER_SECOND} (MAX_RATE_PER_SECOND)"),
            )
            .into())
        }
        n => n,
    };
    Ok(BatchSpec {
        selector: BatchSelector { workflow, version, statuses },
        action,
        rate_per_second,
        reason: req.reason.clone(),
    })
}

fn selector(s: &BatchSelector) -> WireSelector {
    WireSelector {
        workflow: s.workflow.clone(),
        version: s.version.clone().unwrap_or_default(),
        statuses: s
            .statuses
            .iter()
            .filter_map(|name| orbit_engine::Status::parse(name))
            .map(|status| orbit_wire::execution_status(status) as i32)
            .collect(),
    }
}

fn action(a: &BatchAction) -> WireAction {
    let action = match a {
        BatchAction::Migrate { to_version } => {
            batch_action::Action::Migrate(BatchMigrate { to_version: to_version.clone() })
        }
        BatchAction::Reset { step, drop_signals, to_version } => {
            batch_action::Action::Reset(BatchReset {
                step: step.clone(),
                drop_signals: *drop_signals,
                to_version: to_version.clone().unwrap_or_default(),
            })
        }
    };
    WireAction { action: Some(action) }
}

fn state(s: BatchState) -> WireState {
    match s {
        BatchState::Running => WireState::Running,
        BatchState::Completed => WireState::Completed,
        BatchState::Cancelled => WireState::Cancelled,
        BatchState::Failed => WireState::Failed,
    }
}

/// A stored batch as the API shows it (a spec that does not parse shows no action).
pub(crate) fn batch(row: &BatchRow) -> Batch {
    let spec = BatchSpec::from_json(&row.spec).ok();
    Batch {
        batch_id: row.batch_id.clone(),
        action: spec.as_ref().map(|s| action(&s.action)),
        selector: spec.as_ref().map(|s| selector(&s.selector)),
        state: state(row.state) as i32,
        total: row.total,
        done: row.done,
        succeeded: row.succeeded,
        failed: row.failed,
        skipped: row.skipped,
        created_at: Some(ms_to_timestamp(row.created_at_ms)),
        updated_at: Some(ms_to_timestamp(row.updated_at_ms)),
        reason: row.reason.clone(),
        rate_per_second: spec.as_ref().map_or(0, |s| s.rate_per_second),
        cursor: row.cursor.clone().unwrap_or_default(),
    }
}

/// A stored item as the API shows it.
pub(crate) fn item(i: BatchItem) -> WireItem {
    let outcome = match i.outcome {
        ItemOutcome::Pending => BatchItemOutcome::Pending,
        ItemOutcome::Succeeded => BatchItemOutcome::Succeeded,
        ItemOutcome::Failed => BatchItemOutcome::Failed,
        ItemOutcome::Skipped => BatchItemOutcome::Skipped,
    };
    WireItem {
        execution_id: i.execution_id,
        outcome: outcome as i32,
        code: i.code,
        message: i.message,
        seq: i.seq,
    }
}
