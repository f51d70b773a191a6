//! Operator actions of the poison quarantine, applied by the owner (the only writer) from
//! `resume` and `terminate` inbox entries, which the pass receives even for a parked
//! execution. Neither runs the decider on the execution's pending entries.
//!
//! * resume: unpark (fenced): the projection gets its status back, mark and count are
//!   deleted; the execution goes to recovery mode, so its pending entries are applied again
//!   alone and counted (a poison that still kills the process is parked again);
//! * terminate: `StepCancelled` for every unresolved unit, then `WorkflowFailed{TERMINATED}`,
//!   written directly; the effects are those of any closing run (queued tasks cancelled,
//!   running children sent a cancel, the parent told, the timer dropped); every pending
//!   entry of the execution is answered `EXECUTION_FINISHED`. Repeating it is a no-op;
//! * migrate: see `migrate`; reset: see `reset`.

use crate::batches::batches_for;
use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::hot::hot;
use crate::inbox::Control;
use crate::isolate;
use crate::operator::{committed, Woken};
use crate::work::Work;
use orbit_engine::event::{CompensationOutcome, Event};
use orbit_engine::ErrorCode;
use orbit_engine::{Status, TaskError};
use orbit_store::inbox::Timer;
use orbit_store::{CommitBatch, InboxDone, InboxEntry, InboxMessage, InboxReply};
use std::sync::atomic::Ordering;

/// The error code of a terminated execution.
pub(crate) const TERMINATED: &str = "TERMINATED";

/// Applies one control entry; its reply is recorded on the entry.
pub(crate) async fn apply(
    inner: &Inner,
    core: &mut Core,
    entry: &InboxEntry,
    control: Control,
    now: u64,
) -> Result<(), OwnerError> {
    let id = entry.execution_id.as_str();
    let outcome = match control {
        Control::Resume => resume(inner, core, id, now).await,
        Control::Terminate { reason } => terminate(inner, core, entry, &reason, now).await,
        Control::Migrate { to_version, reason } => {
            crate::migrate::migrate(inner, core, entry, &to_version, &reason, now).await
        }
        Control::Reset(req) => crate::reset::reset(inner, core, entry, &req, now).await,
    };
    let reply = match outcome {
        Ok(Some(reply)) => reply,
        // Done by the terminate commit itself.
        Ok(None) => return Ok(()),
        Err(e) if matches!(e.code, ErrorCode::Unavailable | ErrorCode::StorageError) => {
            return Err(e)
        }
        Err(e) => InboxReply::Refused { code: e.code, message: e.message },
    };
    done(inner, core, entry, reply).await
}

/// Records `reply` on a control entry that wrote nothing else (fenced like a commit).
async fn done(
    inner: &Inner,
    core: &mut Core,
    entry: &InboxEntry,
    reply: InboxReply,
) -> Result<(), OwnerError> {
    let (run, epoch) = match hot(inner, core, &entry.execution_id).await {
        Ok(h) => (h.state.run, h.epoch),
        Err(_) => (1, None),
    };
    let batch = CommitBatch {
        execution_id: entry.execution_id.clone(),
        run,
        expected_epoch: epoch,
        tasks_done: Vec::new(),
        inbox_done: vec![InboxDone { seq: entry.seq, result: Some(reply) }],
        ..CommitBatch::default()
    };
    inner.store.commit(batch).await?;
    inner.changes.publish([entry.execution_id.as_str()]);
    Ok(())
}

async fn resume(
    inner: &Inner,
    core: &mut Core,
    id: &str,
    now: u64,
) -> Result<Option<InboxReply>, OwnerError> {
    let h = hot(inner, core, id).await?;
    if h.state.status().is_closed() {
        return Err(OwnerError::new(
            ErrorCode::ExecutionFinished,
            format!("execution `{id}` has ended"),
        ));
    }
    let epoch = h.epoch;
    let Some(row) = inner.store.unpark_execution(id, epoch, now).await? else {
        return Err(OwnerError::new(
            ErrorCode::ExecutionNotSuspended,
            format!("execution `{id}` is not SUSPENDED: nothing to resume"),
        ));
    };
    core.suspects.insert(id.to_string());
    // Decide again even when nothing else is pending (a start parked before its first
    // decision): a `timer` entry is exactly "decide again".
    inner.store.enqueue_inbox(id, &InboxMessage::Timer(Timer::default())).await?;
    inner.quarantine.resumed.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(id), seq = ?row.inbox_seq, failures = row.failures, "resumed a parked execution: its pending entries are applied again");
    inner.kick_inbox();
    Ok(Some(InboxReply::Resumed { entry_seq: row.inbox_seq.unwrap_or(0), failures: row.failures }))
}

async fn terminate(
    inner: &Inner,
    core: &mut Core,
    entry: &InboxEntry,
    reason: &str,
    now: u64,
) -> Result<Option<InboxReply>, OwnerError> {
    let id = entry.execution_id.clone();
    let h = hot(inner, core, &id).await?.clone();
    if h.state.status().is_closed() {
        if h.state.status() == Status::Failed
            && h.state.error.as_ref().is_some_and(|e| e.code == TERMINATED)
        {
            return Ok(Some(InboxReply::Terminated { seq: h.state.last_seq, terminated: false }));
        }
        return Err(OwnerError::new(
            ErrorCode::ExecutionFinished,
            format!("execution `{id}` has ended"),
        ));
    }
    let pending = inner.store.pending_inbox(Some(&id), u32::MAX).await?;
    let node_id = inner.cfg.node_id.clone();
    let retention_ms = inner.cfg.retention_ms;
    let caps = inner.cfg.capabilities;
    let (reason, entry_seq, job_id) = (reason.to_string(), entry.seq, id.clone());
    let job: isolate::Job<_> = Box::new(move || {
        let mut w = Work::new(h, caps);
        let mut open: Vec<String> = w
            .hot
            .state
            .units
            .iter()
            .filter(|(_, u)| !u.status.is_resolved())
            .map(|(k, _)| k.clone())
            .collect();
        open.sort();
        for step in open {
            w.record(Event::StepCancelled { step }, now);
        }
        let message = if reason.is_empty() { "terminated by an operator".into() } else { reason };
        let error = TaskError::fatal(TERMINATED, message);
        let seq =
            w.record(Event::WorkflowFailed { error, compensation: CompensationOutcome::None }, now);
        for p in &pending {
            let result = if p.seq == entry_seq {
                InboxReply::Terminated { seq, terminated: true }
            } else {
                InboxReply::Refused {
                    code: ErrorCode::ExecutionFinished,
                    message: "the execution was terminated".into(),
                }
            };
            w.inbox_done.push(InboxDone { seq: p.seq, result: Some(result) });
        }
        let runs = w.undecided();
        let out = batches_for(&node_id, retention_ms, &job_id, &mut w, runs, now);
        (w, out)
    });
    let mut results = isolate::run(vec![(id.clone(), job)]).await?;
    let (_, outcome) =
        results.pop().ok_or_else(|| OwnerError::unavailable("no terminate outcome"))?;
    let (w, (batches, children, tasks, timers)) = outcome.map_err(|m| {
        OwnerError::new(ErrorCode::StorageError, format!("terminating `{id}` panicked: {m}"))
    })?;
    inner.store.commit_all(batches).await?;
    let status = w.hot.state.status();
    if status.is_closed() {
        let labels = [w.hot.def.name.as_str(), status.as_str()];
        orbit_metrics::get().executions_closed.with_label_values(&labels).inc();
    }
    inner.store.clear_faults(std::slice::from_ref(&id)).await?;
    core.suspects.remove(&id);
    committed(inner, core, &id, &w, Woken { tasks, timers, children });
    inner.quarantine.terminated.fetch_add(1, Ordering::Relaxed);
    tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(&id), "terminated the execution (FAILED, TERMINATED) by an operator's request");
    Ok(None)
}
