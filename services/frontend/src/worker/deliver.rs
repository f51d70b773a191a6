//! Pushing tasks to a worker: each claimed or handed-off row becomes a `Task` on the
//! session's stream (with its workflow, timeouts and trace context), is counted in the
//! dispatch metrics and gets a supervisor; the owners of claimed rows are woken a little
//! later to record the dispatch.

use super::common::{msg, wake_owner, Tx};
use super::context::{context, Context};
use super::session::Session;
use super::supervise::{supervise, Supervised};
use crate::Shared;
use orbit_api::v1::server_message::{self, Task};
use orbit_api::v1::TraceContext;
use orbit_server_kit::payload::{json_to_proto, ms_to_duration, ms_to_timestamp};
use orbit_store::{TaskRow, DISPATCHED_APPLY_DELAY};
use std::collections::HashMap;
use std::sync::Arc;

/// Pushes claimed rows to the worker; their owners apply the `dispatched` entries the claim
/// wrote with the results, or when woken [`DISPATCHED_APPLY_DELAY`] later. A row whose push
/// fails stays in flight and is reported uncertain when the session ends. `handed`: the rows
/// were handed off by the owner (see `handoff`), their credits already taken; the commit
/// that queued them recorded their `StepDispatched` (`orbit_owner::handoff`), so they wake
/// no one here.
pub(super) async fn deliver(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    rows: Vec<TaskRow>,
    tx: &Tx,
    handed: bool,
) {
    let mut executions: HashMap<String, Option<Context>> = HashMap::new();
    let mut pushed = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(token) = row.token.clone() else { continue };
        if !handed {
            session.took(&token, &row.execution_id);
        }
        session.note_task(&token, &row.task, row.claimed_at_ms);
        if !executions.contains_key(&row.execution_id) {
            let ctx = context(shared, &row.execution_id, row.run).await;
            executions.insert(row.execution_id.clone(), ctx);
        }
        let ctx = executions.get(&row.execution_id).cloned().flatten();
        let timeouts = ctx
            .as_ref()
            .map(|c| orbit_wire::task_timeouts(&c.def, &row.unit_key))
            .unwrap_or_default();
        let started = row.claimed_at_ms.unwrap_or(row.created_at_ms);
        // The attempt's span (emitted by the owner) is the parent of the worker's task span;
        // `None`, and no work, while traces are off.
        let trace_context =
            orbit_telemetry::traceparent(&row.execution_id, &row.unit_key, row.attempt)
                .map(|traceparent| TraceContext { traceparent, tracestate: String::new() });
        // Both stamps come from the store's clock, so the latency is exact across nodes.
        let m = orbit_metrics::get();
        m.tasks_dispatched.with_label_values(&[&row.task]).inc();
        if handed {
            m.tasks_handed_off.with_label_values(&[&row.task]).inc();
        }
        if row.offer > 1 {
            m.tasks_redelivered.with_label_values(&[&row.task]).inc();
        }
        let waited = orbit_metrics::seconds_between_ms(row.created_at_ms, started);
        m.schedule_to_start.with_label_values(&[&row.task]).observe(waited);
        m.wait_by_priority.with_label_values(&[priority_label(row.priority)]).observe(waited);
        let task = Task {
            token,
            execution_id: row.execution_id.clone(),
            workflow: ctx.map(|c| c.workflow).unwrap_or_default(),
            step: row.unit_key,
            task: row.task,
            version: row.task_version,
            input: Some(json_to_proto(row.input)),
            idempotency_key: row.idempotency_key,
            attempt: row.attempt,
            redelivery: row.offer > 1,
            deadline: timeouts.attempt_ms.map(|t| ms_to_timestamp(started.saturating_add(t))),
            trace_context,
            heartbeat_timeout: timeouts.heartbeat_ms.map(ms_to_duration),
        };
        if let Some(ms) = timeouts.heartbeat_ms {
            session.set_heartbeat_ms(&task.token, ms);
        }
        let supervised = Supervised {
            token: task.token.clone(),
            execution_id: task.execution_id.clone(),
            unit: Some((row.run, task.step.clone())),
            heartbeat_ms: timeouts.heartbeat_ms,
        };
        if !handed {
            pushed.push((task.token.clone(), task.execution_id.clone()));
        }
        let _ = tx.send(msg(server_message::Kind::Task(task))).await;
        tokio::spawn(supervise(shared.clone(), session.clone(), tx.clone(), supervised));
    }
    wake_owner_later(shared, session, pushed);
}

/// Wakes the owners of the pushed attempts (token, execution) still in flight on `session`
/// after [`DISPATCHED_APPLY_DELAY`] (the owner records `StepDispatched` from the entry in its
/// next pass, whichever wakes it; a result arriving first is applied together with its
/// entry, in one commit: `pass::pass` reads the inbox after taking the handed results). An attempt no longer in flight had its result recorded
/// (applied with its `dispatched` entry), or was cancelled, timed out or lost with its
/// session; each of those woke its owner itself.
fn wake_owner_later(shared: &Arc<Shared>, session: &Arc<Session>, pushed: Vec<(String, String)>) {
    if pushed.is_empty() {
        return;
    }
    let (shared, session) = (shared.clone(), session.clone());
    tokio::spawn(async move {
        tokio::time::sleep(DISPATCHED_APPLY_DELAY).await;
        let mut executions: Vec<String> = pushed
            .into_iter()
            .filter(|(token, _)| session.execution_of(token).is_some())
            .map(|(_, execution)| execution)
            .collect();
        executions.sort_unstable();
        executions.dedup();
        wake_owner(&shared, executions);
    });
}

/// The label of a priority (no allocation per task).
fn priority_label(priority: u8) -> &'static str {
    ["1", "2", "3", "4", "5"].get(usize::from(priority.clamp(1, 5)) - 1).copied().unwrap_or("3")
}
