//! One owner pass: take pending starts and inbox entries, apply them through the engine,
//! decide to the fixpoint, and commit every execution touched in ONE transaction; then
//! update memory, answer callers and wake whoever has new work.

use crate::effects::{self, ChildStart};
use crate::error::OwnerError;
use crate::hot::{definition, hot, Core, Hot};
use crate::inbox::{self, Request};
use crate::owner::{Inner, PendingStart, StartRequest, Started};
use crate::refused::on_commit_error;
use crate::resume::queue_children;
use orbit_engine::event::{Event, HistoryEvent, Origin};
use orbit_engine::{accept, advance, command::next_run, next_timer, State, Status};
use orbit_store::{CommitBatch, ExecutionRow, InboxDone, NewOwner, ProjectionUpdate};
use serde_json::json;
use std::collections::BTreeMap;

/// One execution's work in this pass.
pub(crate) struct Work {
    pub(crate) hot: Hot,
    /// Finished runs (continue-as-new) with their events, before the current one.
    done_runs: Vec<(State, Vec<HistoryEvent>)>,
    events: Vec<HistoryEvent>,
    inbox_done: Vec<InboxDone>,
    pub(crate) new_execution: Option<ExecutionRow>,
    pub(crate) replies: Vec<PendingStart>,
}

impl Work {
    fn record(&mut self, event: Event, origin: Origin, now: u64) -> u64 {
        let he =
            HistoryEvent { seq: self.hot.state.last_seq + 1, timestamp_ms: now, origin, event };
        self.hot.state.apply(&he);
        let seq = he.seq;
        self.events.push(he);
        seq
    }
}

/// Runs one pass; errors are logged (the next pass retries from the store).
pub(crate) async fn run_pass(inner: &Inner) {
    inner.passes.send_modify(|p| p.started += 1);
    let started = inner.passes.borrow().started;
    if let Err(e) = pass(inner).await {
        tracing::error!(error = %e, "owner pass failed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    inner.passes.send_modify(|p| p.finished = p.finished.max(started));
}

async fn pass(inner: &Inner) -> Result<(), OwnerError> {
    let mut core = inner.core.lock().await;
    let starts: Vec<PendingStart> =
        inner.starts.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default();
    // The entries of what this node owns, plus of what it holds in memory: if it lost one
    // of those, the commit is fenced and the execution dropped (see `on_commit_error`).
    let held: Vec<String> = core.hot.keys().cloned().collect();
    let entries =
        inner.store.pending_inbox_owned(&inner.cfg.node_id, &held, inner.cfg.max_batch).await?;
    if starts.is_empty() && entries.is_empty() {
        return Ok(());
    }
    let now = (inner.clock)();
    let limits = inner.cfg.limits.clone();
    let mut work: BTreeMap<String, Work> = BTreeMap::new();

    for mut start in starts {
        let id = start.request.execution_id.clone();
        if let Some(w) = work.get_mut(&id) {
            w.replies.push(start);
            continue;
        }
        match begin(inner, &mut core, &start.request, now).await {
            Ok(Begin::Exists(started)) => reply(&mut start, Ok(started)),
            Ok(Begin::New(new)) => {
                let (hot, created, row) = *new;
                let mut w = Work {
                    hot,
                    done_runs: vec![],
                    events: vec![],
                    inbox_done: vec![],
                    new_execution: Some(row),
                    replies: vec![],
                };
                w.record(created, Origin::Recorded, now);
                w.replies.push(start);
                work.insert(id, w);
            }
            Err(e) => reply(&mut start, Err(e)),
        }
    }

    for entry in entries {
        if !work.contains_key(&entry.execution_id) {
            match hot(inner, &mut core, &entry.execution_id).await {
                Ok(h) => {
                    let w = Work {
                        hot: h.clone(),
                        done_runs: vec![],
                        events: vec![],
                        inbox_done: vec![],
                        new_execution: None,
                        replies: vec![],
                    };
                    work.insert(entry.execution_id.clone(), w);
                }
                Err(e) => {
                    tracing::warn!(execution_id = %entry.execution_id, seq = entry.seq, error = %e, "inbox entry for an execution this owner cannot load");
                    continue;
                }
            }
        }
        let Some(w) = work.get_mut(&entry.execution_id) else { continue };
        let result = match inbox::request(&entry) {
            Ok(Request::Tick) => json!({"ok": true}),
            Ok(Request::Command(cmd)) => {
                match accept(&w.hot.def, &w.hot.state, *cmd, now, &limits) {
                    Ok(events) => {
                        // A result recorded as stale was kept but not applied: say so, so the frontend
                        // can answer the worker `accepted: false`.
                        let applied =
                            !events.iter().any(|e| matches!(e, Event::StaleResultIgnored { .. }));
                        let mut seq = w.hot.state.last_seq;
                        for e in events {
                            seq = w.record(e, Origin::Recorded, now);
                        }
                        json!({"ok": true, "seq": seq, "run": w.hot.state.run, "applied": applied})
                    }
                    Err(e) => json!({"error": {"code": e.code, "message": e.message}}),
                }
            }
            Err((code, message)) => json!({"error": {"code": code, "message": message}}),
        };
        w.inbox_done.push(InboxDone { seq: entry.seq, result: Some(result) });
    }

    for w in work.values_mut() {
        decide_all(w, now, &limits);
    }

    let mut batches = Vec::new();
    let mut children = Vec::new();
    let mut tasks = false;
    let mut timers = false;
    for (id, w) in &mut work {
        let (bs, fx_children, t, tm) = batches_for(inner, id, w, now);
        batches.extend(bs);
        children.extend(fx_children);
        tasks |= t;
        timers |= tm;
    }
    match inner.store.commit_all(batches).await {
        Ok(_) => {
            inner.changes.publish(work.keys().map(String::as_str));
            for (id, mut w) in work {
                let closed = w.hot.state.status().is_closed();
                w.hot.timer_at = Some(next_timer(&w.hot.def, &w.hot.state));
                let started = Started {
                    execution_id: id.clone(),
                    run: w.hot.state.run,
                    created: true,
                    version: w.hot.def.version.clone(),
                    definition_hash: w.hot.def.hash.clone(),
                };
                for (i, mut r) in w.replies.into_iter().enumerate() {
                    reply(
                        &mut r,
                        Ok(Started {
                            created: i == 0 && w.new_execution.is_some(),
                            ..started.clone()
                        }),
                    );
                }
                if closed {
                    core.hot.remove(&id);
                } else {
                    core.hot.insert(id, w.hot);
                }
            }
            drop(core);
            if tasks {
                inner.tasks_ready.notify_waiters();
            }
            if timers {
                inner.timers_changed.notify_one();
            }
            queue_children(inner, children);
            Ok(())
        }
        Err(e) => on_commit_error(inner, &mut core, work, e).await,
    }
}

pub(crate) fn reply(start: &mut PendingStart, result: Result<Started, OwnerError>) {
    if let Some(tx) = start.reply.take() {
        let _ = tx.send(result);
    }
}

/// Decides to the fixpoint, following continue-as-new into the next runs.
fn decide_all(w: &mut Work, now: u64, limits: &orbit_definition::Limits) {
    for _ in 0..100 {
        let decided = advance(&w.hot.def, &mut w.hot.state, now, limits);
        w.events.extend(decided);
        if refuse_http(w, now) {
            continue;
        }
        if w.hot.state.status() != Status::ContinuedAsNew {
            return;
        }
        let next = next_run(&w.hot.def, &w.hot.state);
        let finished = std::mem::take(&mut w.hot.state);
        let events = std::mem::take(&mut w.events);
        w.done_runs.push((finished, events));
        for e in next {
            w.record(e, Origin::Recorded, now);
        }
    }
}

/// Built-in HTTP steps run only where the server enables the adapter, which this server
/// does not: their offers fail at once with the non-retryable `ADAPTER_DISABLED` instead of
/// waiting in a queue no worker serves. Returns whether anything was recorded.
fn refuse_http(w: &mut Work, now: u64) -> bool {
    let offers: Vec<(String, u32)> = w
        .hot
        .state
        .units
        .iter()
        .filter(|(_, u)| u.status == orbit_engine::UnitStatus::Scheduled)
        .filter(|(k, _)| {
            effects::task_of(&w.hot.def, k).is_some_and(|(t, _)| t == effects::HTTP_TASK)
        })
        .map(|(k, u)| (k.clone(), u.attempt))
        .collect();
    for (step, attempt) in &offers {
        let error = orbit_engine::TaskError::fatal(
            "ADAPTER_DISABLED",
            "built-in http steps are disabled on this server",
        );
        w.record(
            Event::StepAttemptFailed { step: step.clone(), attempt: *attempt, error },
            Origin::Recorded,
            now,
        );
    }
    !offers.is_empty()
}

enum Begin {
    Exists(Started),
    New(Box<(Hot, Event, ExecutionRow)>),
}

async fn begin(
    inner: &Inner,
    core: &mut Core,
    req: &StartRequest,
    now: u64,
) -> Result<Begin, OwnerError> {
    if let Some(row) = inner.store.get_execution(&req.execution_id).await? {
        return Ok(Begin::Exists(Started {
            execution_id: row.execution_id,
            run: row.run,
            created: false,
            version: row.version,
            definition_hash: row.definition_hash,
        }));
    }
    let def = definition(inner, core, &req.workflow, req.version.as_deref()).await?;
    let created = orbit_engine::start(
        &def,
        &req.execution_id,
        req.input.clone(),
        req.parent.clone(),
        req.schedule_id.clone(),
        1,
        &inner.cfg.limits,
    )?;
    let root_id = req.root_id.clone().unwrap_or_else(|| req.execution_id.clone());
    let row = ExecutionRow {
        execution_id: req.execution_id.clone(),
        run: 1,
        root_id: root_id.clone(),
        parent_id: req.parent.as_ref().map(|p| p.execution_id.clone()),
        workflow: def.name.clone(),
        version: def.version.clone(),
        definition_hash: def.hash.clone(),
        status: "RUNNING".into(),
        schedule_id: req.schedule_id.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        closed_at_ms: None,
        last_seq: 0,
    };
    let hot = Hot { def, state: State::default(), root_id, epoch: Some(1), timer_at: Some(None) };
    Ok(Begin::New(Box::new((hot, created, row))))
}

/// The commit batches of one execution (one per run touched), the children to start after
/// the commit, and whether tasks or timers changed.
fn batches_for(
    inner: &Inner,
    id: &str,
    w: &mut Work,
    now: u64,
) -> (Vec<CommitBatch>, Vec<ChildStart>, bool, bool) {
    let mut batches = Vec::new();
    let mut children = Vec::new();
    let (mut tasks, mut timers) = (false, false);
    let mut runs: Vec<(&State, &Vec<HistoryEvent>)> =
        w.done_runs.iter().map(|(s, e)| (s, e)).collect();
    runs.push((&w.hot.state, &w.events));
    let last = runs.len() - 1;
    for (i, (state, events)) in runs.into_iter().enumerate() {
        let fx = effects::derive(&w.hot.def, state, events, &w.hot.root_id);
        let (upsert, delete) = if i == last {
            effects::timer_change(w.hot.timer_at, next_timer(&w.hot.def, state))
        } else {
            (Vec::new(), Vec::new())
        };
        tasks |= !fx.tasks.is_empty();
        timers |= !upsert.is_empty() || !delete.is_empty();
        children.extend(fx.children);
        let closed = state.status().is_closed();
        batches.push(CommitBatch {
            execution_id: id.to_string(),
            run: state.run,
            expected_epoch: if w.new_execution.is_some() { None } else { w.hot.epoch },
            new_execution: if i == 0 { w.new_execution.clone() } else { None },
            new_owner: (i == 0 && w.new_execution.is_some()).then(|| NewOwner {
                root_id: w.hot.root_id.clone(),
                node_id: inner.cfg.node_id.clone(),
            }),
            events: events.clone(),
            projection: Some(ProjectionUpdate {
                status: state.status().as_str().to_string(),
                updated_at_ms: now,
                closed_at_ms: closed.then_some(now),
                delete_after_ms: effects::delete_after(
                    &w.hot.def,
                    state.status(),
                    now,
                    inner.cfg.retention_ms,
                ),
            }),
            tasks_to_insert: fx.tasks,
            units_to_cancel: fx.cancel_units,
            inbox_to_insert: fx.inbox,
            timers_to_upsert: upsert,
            timers_to_delete: delete,
            inbox_done: if i == 0 { std::mem::take(&mut w.inbox_done) } else { Vec::new() },
            ..CommitBatch::default()
        });
    }
    (batches, children, tasks, timers)
}
