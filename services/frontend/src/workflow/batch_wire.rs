//! Batches on the wire ⇄ the store's batch rows (`orbit_store::batch_job`): the request's
//! selector (its query checked like `ListExecutions`' one) and action validated into a
//! [`BatchSpec`] on receipt, a stored row turned into the API's `Batch`.

use crate::error::ApiResult;
use crate::validate::payload;
use orbit_api::v1::{
    batch_action, Batch, BatchAction as WireAction, BatchCancel, BatchDelete,
    BatchItem as WireItem, BatchItemOutcome, BatchMigrate, BatchReset,
    BatchSelector as WireSelector, BatchSignal, BatchState as WireState, BatchTerminate,
    ExecutionStatus, StartBatchRequest,
};
use orbit_engine::Status;
use orbit_query::{parse_and_check, Catalog, QueryError};
use orbit_server_kit::payload::ms_to_timestamp;
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_server_kit::OrbitError;
use orbit_store::{
    BatchAction, BatchItem, BatchRow, BatchSelector, BatchSpec, BatchState, ItemOutcome,
};

/// The rate when a request names none (executions per second).
pub(crate) const DEFAULT_RATE_PER_SECOND: u32 = 50;

/// The highest rate a batch may ask for (executions per second).
pub(crate) const MAX_RATE_PER_SECOND: u32 = 1000;

/// The spec a `StartBatch` request asks for, validated (field paths in the refusals); the
/// query is checked (`INVALID_QUERY` with its position) and kept as text. `max_bytes` bounds
/// a signal's payload.
pub(crate) fn spec_of(
    req: &StartBatchRequest,
    catalog: &Catalog,
    max_bytes: u64,
) -> ApiResult<BatchSpec> {
    let Some(selector) = &req.selector else {
        return Err(
            invalid("selector", "is required (`selector.workflow` or `selector.query`)").into()
        );
    };
    let query = batch_query(&selector.query, catalog)?;
    let workflow = if query.is_some() {
        rules::optional("selector.workflow", &selector.workflow)?.unwrap_or_default().to_string()
    } else {
        rules::id("selector.workflow", &selector.workflow)?.to_string()
    };
    let version = rules::optional("selector.version", &selector.version)?.map(str::to_string);
    if version.is_some() && workflow.is_empty() {
        return Err(invalid("selector.version", "requires `selector.workflow`").into());
    }
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
    let action = action_of(req, max_bytes)?;
    if statuses.is_empty() && query.is_none() {
        statuses = default_statuses(&action);
    }
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
        selector: BatchSelector { workflow, version, statuses, query, workflows: None },
        action,
        rate_per_second,
        reason: req.reason.clone(),
    })
}

/// The statuses a selector without statuses or query means: `RUNNING`, and for `delete`
/// every closed status (an open execution cannot be deleted).
fn default_statuses(action: &BatchAction) -> Vec<String> {
    let statuses: &[Status] = match action {
        BatchAction::Delete {} => &[
            Status::Completed,
            Status::Failed,
            Status::Cancelled,
            Status::TimedOut,
            Status::ContinuedAsNew,
        ],
        _ => &[Status::Running],
    };
    statuses.iter().map(|s| s.as_str().to_string()).collect()
}

/// `selector.query` checked against `catalog` (the system attributes, and the declared
/// search attributes when the query names one; `None` when blank). A batch walks in
/// execution-id order, so `ORDER BY` is refused.
pub(crate) fn batch_query(text: &str, catalog: &Catalog) -> ApiResult<Option<String>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let refuse =
        |e: QueryError| OrbitError::invalid_query(&e.message, e.position, e.line, e.column);
    let checked = parse_and_check(text, catalog).map_err(refuse)?;
    if let Some(order) = &checked.order {
        let message = "a batch takes no ORDER BY: it walks its executions in execution-id order";
        return Err(refuse(QueryError::at_span(text, order.span, message)).into());
    }
    Ok(Some(text.to_string()))
}

/// The request's action, validated.
fn action_of(req: &StartBatchRequest, max_bytes: u64) -> ApiResult<BatchAction> {
    Ok(match req.action.as_ref().and_then(|a| a.action.as_ref()) {
        Some(batch_action::Action::Migrate(m)) => BatchAction::Migrate {
            to_version: rules::id("action.migrate.to_version", &m.to_version)?.to_string(),
        },
        Some(batch_action::Action::Reset(r)) => BatchAction::Reset {
            step: rules::id("action.reset.step", &r.step)?.to_string(),
            drop_signals: r.drop_signals,
            to_version: rules::optional("action.reset.to_version", &r.to_version)?
                .map(str::to_string),
        },
        Some(batch_action::Action::Cancel(c)) => BatchAction::Cancel { reason: c.reason.clone() },
        Some(batch_action::Action::Terminate(t)) => {
            BatchAction::Terminate { reason: t.reason.clone() }
        }
        Some(batch_action::Action::Signal(sig)) => BatchAction::Signal {
            name: rules::id("action.signal.name", &sig.name)?.to_string(),
            payload: payload("action.signal.payload", sig.payload.clone(), max_bytes)?,
        },
        Some(batch_action::Action::Delete(BatchDelete {})) => BatchAction::Delete {},
        None => {
            return Err(invalid(
                "action",
                "is required (`migrate`, `reset`, `cancel`, `terminate`, `signal` or `delete`)",
            )
            .into())
        }
    })
}

fn selector(s: &BatchSelector) -> WireSelector {
    WireSelector {
        workflow: s.workflow.clone(),
        query: s.query.clone().unwrap_or_default(),
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
        BatchAction::Cancel { reason } => {
            batch_action::Action::Cancel(BatchCancel { reason: reason.clone() })
        }
        BatchAction::Terminate { reason } => {
            batch_action::Action::Terminate(BatchTerminate { reason: reason.clone() })
        }
        BatchAction::Signal { name, payload } => batch_action::Action::Signal(BatchSignal {
            name: name.clone(),
            payload: Some(orbit_server_kit::payload::json_to_proto(payload.clone())),
        }),
        BatchAction::Delete {} => batch_action::Action::Delete(BatchDelete {}),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FrontendError;

    fn start(selector: WireSelector, action: batch_action::Action) -> StartBatchRequest {
        StartBatchRequest {
            selector: Some(selector),
            action: Some(WireAction { action: Some(action) }),
            ..StartBatchRequest::default()
        }
    }

    fn refused(req: &StartBatchRequest) -> OrbitError {
        match spec_of(req, &Catalog::system(), 1024) {
            Err(FrontendError::Api(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_query_replaces_the_workflow_and_decides_the_statuses() {
        let cancel = batch_action::Action::Cancel(BatchCancel::default());
        let by_query = WireSelector { query: "status = 'FAILED'".into(), ..Default::default() };
        let spec = spec_of(&start(by_query, cancel.clone()), &Catalog::system(), 1024).unwrap();
        assert_eq!(spec.selector.workflow, "");
        assert!(spec.selector.statuses.is_empty(), "the query alone decides");
        assert_eq!(spec.selector.query.as_deref(), Some("status = 'FAILED'"));
        assert_eq!(spec.action, BatchAction::Cancel { reason: String::new() });
        // Without a query: the workflow is required, RUNNING by default (closed for delete).
        let none = WireSelector::default();
        assert_eq!(refused(&start(none, cancel.clone())).code.as_str(), "INVALID_ARGUMENT");
        let named = WireSelector { workflow: "w".into(), ..Default::default() };
        let spec = spec_of(&start(named.clone(), cancel), &Catalog::system(), 1024).unwrap();
        assert_eq!(spec.selector.statuses, ["RUNNING"]);
        let delete = batch_action::Action::Delete(BatchDelete {});
        let spec = spec_of(&start(named, delete), &Catalog::system(), 1024).unwrap();
        assert!(!spec.selector.statuses.contains(&"RUNNING".to_string()));
        assert!(spec.selector.statuses.contains(&"COMPLETED".to_string()));
    }

    #[test]
    fn bad_queries_and_actions_are_refused_with_where() {
        let cancel = batch_action::Action::Cancel(BatchCancel::default());
        let bad = WireSelector { query: "status = ".into(), ..Default::default() };
        let e = refused(&start(bad, cancel.clone()));
        assert_eq!(e.code.as_str(), "INVALID_QUERY");
        assert_eq!(e.query_position().map(|(_, line, _)| line), Some(1));
        let ordered = WireSelector {
            query: "status = 'RUNNING' ORDER BY created".into(),
            ..Default::default()
        };
        let e = refused(&start(ordered, cancel));
        assert!(e.message.contains("no ORDER BY"), "{}", e.message);
        let query = WireSelector { query: "status = 'RUNNING'".into(), ..Default::default() };
        let signal =
            batch_action::Action::Signal(BatchSignal { name: String::new(), payload: None });
        assert!(refused(&start(query.clone(), signal)).message.contains("action.signal.name"));
        let huge = prost_types::Value {
            kind: Some(prost_types::value::Kind::StringValue("x".repeat(2048))),
        };
        let signal =
            batch_action::Action::Signal(BatchSignal { name: "go".into(), payload: Some(huge) });
        assert_eq!(refused(&start(query, signal)).code.as_str(), "PAYLOAD_TOO_LARGE");
    }
}
