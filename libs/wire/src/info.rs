//! Execution summaries: the store projection → `ExecutionInfo`, a folded run →
//! `ExecutionInfo` (for runs older than the projection's) and a closed run →
//! `ExecutionResult`.

use crate::status::execution_status;
use crate::task::{opt_value, task_error};
use orbit_api::v1 as wire;
use orbit_engine::{State, Status, TaskCode, TaskError};
use orbit_server_kit::payload::{ms_to_timestamp, opt_ms_to_timestamp};
use orbit_store::ExecutionRow;

/// The wire summary of an execution's projection (its latest run).
#[must_use]
pub fn execution_info(row: &ExecutionRow) -> wire::ExecutionInfo {
    wire::ExecutionInfo {
        execution_id: row.execution_id.clone(),
        run: row.run,
        root_id: row.root_id.clone(),
        parent_id: row.parent_id.clone().unwrap_or_default(),
        workflow: row.workflow.clone(),
        version: row.version.clone(),
        definition_hash: row.definition_hash.clone(),
        status: execution_status(row.status).into(),
        schedule_id: row.schedule_id.clone().unwrap_or_default(),
        created_at: Some(ms_to_timestamp(row.created_at_ms)),
        updated_at: Some(ms_to_timestamp(row.updated_at_ms)),
        closed_at: opt_ms_to_timestamp(row.closed_at_ms),
        last_seq: row.last_seq,
        failed_step: row.failed_step.clone().unwrap_or_default(),
        error_code: row.error_code.clone().unwrap_or_default(),
    }
}

/// The wire summary of one run folded from its history, for runs the projection no
/// longer describes. `root_id` comes from the projection (it never changes between runs);
/// `last_event_ms` is the timestamp of the run's last event.
#[must_use]
pub fn info_from_state(state: &State, root_id: &str, last_event_ms: u64) -> wire::ExecutionInfo {
    let closed = state.status().is_closed();
    wire::ExecutionInfo {
        execution_id: state.execution_id.clone(),
        run: state.run,
        root_id: root_id.to_string(),
        parent_id: state.parent.as_ref().map(|p| p.execution_id.clone()).unwrap_or_default(),
        workflow: state.workflow.clone(),
        version: state.version.clone(),
        definition_hash: state.definition_hash.clone(),
        status: execution_status(state.status()).into(),
        schedule_id: state.schedule_id.clone().unwrap_or_default(),
        created_at: Some(ms_to_timestamp(state.created_at)),
        updated_at: Some(ms_to_timestamp(last_event_ms)),
        closed_at: closed.then(|| ms_to_timestamp(last_event_ms)),
        last_seq: state.last_seq,
        failed_step: failed(state)
            .then(|| state.winding.as_ref().and_then(|w| w.step.clone()))
            .flatten()
            .unwrap_or_default(),
        error_code: failed(state)
            .then(|| run_error(state))
            .flatten()
            .map(|e| e.code)
            .unwrap_or_default(),
    }
}

/// Whether the run ended FAILED or TIMED_OUT (the runs with a failed step and code).
fn failed(state: &State) -> bool {
    matches!(state.status(), Status::Failed | Status::TimedOut)
}

/// The error a closed run reports: the recorded failure, or `CANCELLED` / `TIMEOUT` for a
/// cancelled or timed-out run. `None` for running, completed and continued runs.
pub(crate) fn run_error(state: &State) -> Option<TaskError> {
    let winding = state.winding.as_ref().map(|w| w.error.clone());
    match state.status() {
        Status::Failed => state.error.clone().or(winding),
        Status::Cancelled => Some(winding.unwrap_or_else(|| {
            TaskCode::Cancelled
                .fatal(state.cancel_requested.clone().unwrap_or_else(|| "cancelled".into()))
        })),
        Status::TimedOut => Some(
            winding.unwrap_or_else(|| TaskCode::Timeout.fatal("the workflow timeout was reached")),
        ),
        _ => None,
    }
}

/// The outcome of a closed run; `None` while the run is open. `closed_at_ms` is the time
/// of its terminal event.
#[must_use]
pub fn execution_result(state: &State, closed_at_ms: u64) -> Option<wire::ExecutionResult> {
    if !state.status().is_closed() {
        return None;
    }
    Some(wire::ExecutionResult {
        execution_id: state.execution_id.clone(),
        run: state.run,
        status: execution_status(state.status()).into(),
        output: if state.status() == Status::Completed {
            opt_value(state.output.as_ref())
        } else {
            None
        },
        error: run_error(state).as_ref().map(task_error),
        closed_at: Some(ms_to_timestamp(closed_at_ms)),
    })
}

/// The result of run `run` of `execution_id`, which a change said completed (see
/// `orbit_store::Completed`): what [`execution_result`] answers for that run's history.
#[must_use]
pub fn completed_result(
    execution_id: &str,
    run: u32,
    completed: &orbit_store::Completed,
) -> wire::ExecutionResult {
    wire::ExecutionResult {
        execution_id: execution_id.to_string(),
        run,
        status: execution_status(Status::Completed).into(),
        output: opt_value(Some(&completed.output)),
        error: None,
        closed_at: Some(ms_to_timestamp(completed.closed_at_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::ExecutionStatus;

    #[test]
    fn a_completed_change_answers_what_the_history_does() {
        use orbit_engine::{Event, HistoryEvent, Origin};
        let ev = |seq, timestamp_ms, event| HistoryEvent {
            seq,
            timestamp_ms,
            origin: Origin::Decided,
            event,
        };
        let output = serde_json::json!({"sum": 3, "items": ["a", null]});
        let history = vec![
            ev(
                1,
                10,
                Event::WorkflowCreated {
                    execution_id: "e9".into(),
                    workflow: "wf".into(),
                    version: "1".into(),
                    definition_hash: "sha256:ab".into(),
                    input: serde_json::json!({}),
                    parent: None,
                    schedule_id: None,
                    run: 2,
                    update_ids: vec![],
                    priority: None,
                    memo: None,
                    resume: None,
                },
            ),
            ev(2, 11, Event::WorkflowStarted {}),
            ev(3, 25, Event::WorkflowCompleted { output: output.clone() }),
        ];
        let state = State::from_history(&history);
        let read = execution_result(&state, 25).expect("closed");
        let batch = orbit_store::CommitBatch {
            execution_id: "e9".into(),
            run: 2,
            events: history[1..].to_vec(),
            ..orbit_store::CommitBatch::default()
        };
        let change = orbit_store::Change::of_batch(&batch);
        let completed =
            change.detail.as_ref().and_then(|d| d.completed.clone()).expect("completed");
        assert_eq!(completed_result("e9", 2, &completed), read);
    }

    #[test]
    fn rows_map_field_by_field() {
        let row = ExecutionRow {
            execution_id: "e1".into(),
            run: 2,
            root_id: "e1".into(),
            parent_id: None,
            workflow: "wf".into(),
            version: "1".into(),
            definition_hash: "sha256:ab".into(),
            status: orbit_engine::Status::ContinuedAsNew,
            schedule_id: Some("nightly".into()),
            created_at_ms: 1_000,
            updated_at_ms: 2_500,
            closed_at_ms: Some(2_500),
            last_seq: 9,
            failed_step: None,
            error_code: None,
        };
        let info = execution_info(&row);
        assert_eq!(info.status(), ExecutionStatus::ContinuedAsNew);
        assert_eq!(info.parent_id, "");
        assert_eq!(info.schedule_id, "nightly");
        assert_eq!(info.updated_at.unwrap().nanos, 500_000_000);
        assert_eq!(info.closed_at.unwrap().seconds, 2);
        assert_eq!((info.run, info.last_seq), (2, 9));
    }
}
