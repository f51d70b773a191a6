//! Resetting an execution to an earlier point of its current run (`reset` inbox entries,
//! an operator action applied like `migrate`, see `control`).
//!
//! The owner — the only writer — reads the current run's history from the store (the
//! events up to any seq are immutable), finds the point (`orbit_engine::restore::point`),
//! loads the definition in effect there (and the `to_version` one, if asked), and in the
//! execution's engine job asks the engine for the plan and the runs
//! (`orbit_engine::restore::reset`): the current run closes with `WorkflowReset` (its open
//! units cancelled, no compensation; a closed run gets only that event) and the next run
//! begins with the copied prefix, `RunRestored`, the re-received signals and the decider's
//! first round — all in ONE commit, which also moves the projection to the new run (and
//! version). A refusal (`RESET_POINT_INVALID`, `INVALID_ARGUMENT`, `MIGRATION_UNSAFE`)
//! writes nothing but the entry's reply. The execution leaves memory after the commit and
//! is rebuilt from the store at its next event.

use crate::batches::batches_for;
use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::hot::{definition, hot};
use crate::isolate;
use crate::operator::{committed, Woken};
use crate::work::Work;
use orbit_engine::restore::{self, Point, Restored, Source};
use orbit_engine::run::Pass;
use orbit_engine::ErrorCode;
use orbit_store::inbox::Reset;
use orbit_store::{DefinitionChange, InboxDone, InboxEntry, InboxReply};
use serde_json::Value;

/// Applies one `reset` entry. `Ok(None)`: the commit recorded the reply itself.
pub(crate) async fn reset(
    inner: &Inner,
    core: &mut Core,
    entry: &InboxEntry,
    req: &Reset,
    now: u64,
) -> Result<Option<InboxReply>, OwnerError> {
    let id = entry.execution_id.clone();
    let h = hot(inner, core, &id).await?.clone();
    let to = match (&req.to_step, req.to_seq) {
        (Some(step), None) => Point::Step(step.clone()),
        (None, Some(seq)) => Point::Seq(seq),
        _ => {
            return Err(OwnerError::new(
                ErrorCode::InvalidArgument,
                "a reset names exactly one of a step and a seq",
            ))
        }
    };
    let history = inner.store.load_history(&id, h.state.run).await?;
    let through = restore::point(&history, &to)?;
    let at = restore::state_at(&history, through);
    let def = definition(inner, core, &h.def.name, Some(&at.version)).await?;
    let target = match &req.to_version {
        Some(v) => Some(definition(inner, core, &h.def.name, Some(v)).await?),
        None => None,
    };
    let limits = inner.cfg.limits.clone();
    let node_id = inner.cfg.node_id.clone();
    let retention_ms = inner.cfg.retention_ms;
    let caps = inner.cfg.capabilities;
    let reason = req.reason.clone();
    let (entry_seq, job_id, req) = (entry.seq, id.clone(), req.clone());
    let job: isolate::Job<_> = Box::new(move || {
        let mut w = Work::new(h, caps);
        let plan = match restore::plan(&def, &history, through) {
            Ok(plan) => plan,
            Err(e) => return (w, Err(e)),
        };
        let Some(created) = restore::reset_created(&history[0].event, &w.hot.state) else {
            let e = orbit_engine::CommandError::new(ErrorCode::StorageError, "no WorkflowCreated");
            return (w, Err(e));
        };
        let source = Source { execution_id: &job_id, run: w.hot.state.run };
        let r = Restored {
            def: &def,
            to: target.as_deref(),
            restore: &plan,
            source,
            reason: &req.reason,
            keep_signals: !req.drop_signals,
        };
        let pass = Pass { now, limits: &limits, caps };
        let current = w.hot.def.clone();
        let timer = w.hot.timer_at;
        let (runs, migration) =
            match restore::reset(&current, &mut w.hot.state, &r, created, timer, &pass) {
                Ok(done) => done,
                Err(e) => return (w, Err(e)),
            };
        let new_run = w.hot.state.run;
        let final_def = target.clone().unwrap_or_else(|| def.clone());
        let seq = plan.through_seq + 1;
        let mut reply_plan = serde_json::to_value(&plan).unwrap_or(Value::Null);
        if let Some(migration) = &migration {
            reply_plan["migration"] = serde_json::to_value(migration).unwrap_or(Value::Null);
        }
        let reply = InboxReply::Reset { seq, run: new_run, plan: reply_plan };
        w.inbox_done.push(InboxDone { seq: entry_seq, result: Some(reply) });
        w.hot.def = final_def.clone();
        let (mut batches, children, tasks, timers) =
            batches_for(&node_id, retention_ms, &job_id, &mut w, runs, now);
        let change = DefinitionChange {
            version: final_def.version.clone(),
            definition_hash: final_def.hash.clone(),
        };
        if let Some(b) = batches.iter_mut().find(|b| b.run == new_run) {
            b.definition = Some(change);
        }
        (w, Ok((batches, children, tasks, timers)))
    });
    let mut results = isolate::run(vec![(id.clone(), job)]).await?;
    let (_, outcome) = results.pop().ok_or_else(|| OwnerError::unavailable("no reset outcome"))?;
    let (w, done) = outcome.map_err(|m| {
        OwnerError::new(ErrorCode::StorageError, format!("resetting `{id}` panicked: {m}"))
    })?;
    let (batches, children, tasks, timers) =
        done.map_err(|refused| OwnerError::new(refused.code, refused.message))?;
    inner.store.commit_all(batches).await?;
    inner.store.clear_faults(std::slice::from_ref(&id)).await?;
    core.suspects.remove(&id);
    committed(inner, core, &id, &w, Woken { tasks, timers, children });
    orbit_metrics::get().executions_reset.with_label_values(&[w.hot.def.name.as_str()]).inc();
    tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(&id), run = w.hot.state.run, reason = %reason, "reset the execution to an earlier point by an operator's request");
    Ok(None)
}
