//! Applying one set of starts and inbox entries: load the executions, run each one's engine
//! work isolated (see `isolate`): apply the entries, then `orbit_engine::settle`, whose
//! effects `effects::rows` maps onto commit batches; commit the executions whose work
//! succeeded in ONE transaction, then update memory, answer callers and wake whoever has
//! new work.
//!
//! An execution whose engine work panicked is left out of the commit (its entries stay
//! pending, memory keeps its previous state) and reported as [`Failed`]; counting and
//! parking are the caller's (see `quarantine`).

use crate::effects::{self, ChildStart};
use crate::error::OwnerError;
use crate::handed::{self, Handed};
use crate::hot::{definition, hot, Core, Hot};
use crate::inbox::{self, Request};
use crate::isolate;
use crate::owner::{Inner, PendingStart, StartRequest, Started};
use crate::refused::on_commit_error;
use crate::resume::queue_children;
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::run::{effects_of, Pass, Run};
use orbit_engine::{accept, settle, Capabilities, Command, ErrorCode, State, Status};
use orbit_store::{
    CommitBatch, ExecutionRow, InboxDone, InboxEntry, InboxReply, NewOwner, ProjectionUpdate,
};
use std::collections::BTreeMap;

/// One execution's work in this pass.
pub(crate) struct Work {
    pub(crate) hot: Hot,
    /// Events recorded in this pass before the engine settles them (a start, accepted
    /// commands, an operator's terminate).
    pub(crate) events: Vec<HistoryEvent>,
    pub(crate) inbox_done: Vec<InboxDone>,
    /// Tokens of handed results recorded in this pass (their rows are marked done).
    pub(crate) tasks_done: Vec<String>,
    /// Units that succeeded in this pass by the handed result of their attempt in flight:
    /// no row of theirs stays open (earlier offers were withdrawn when their attempts
    /// ended, this one is in `tasks_done`), so their `CancelUnit` writes nothing and is
    /// left out of the commit.
    pub(crate) settled_units: Vec<String>,
    pub(crate) new_execution: Option<ExecutionRow>,
    pub(crate) replies: Vec<PendingStart>,
    /// The built-in adapters this server runs (`OwnerConfig::capabilities`): off, http
    /// steps fail `ADAPTER_DISABLED`; on, their attempts are queued for the built-in worker.
    pub(crate) caps: Capabilities,
    /// Update-with-start: the update to accept right after `WorkflowCreated` (see
    /// `initial`), the seq of its `UpdateAccepted` once accepted, or why it was refused
    /// (then nothing of this execution is committed).
    pub(crate) initial: Option<crate::owner::InitialUpdate>,
    pub(crate) update_seq: Option<u64>,
    pub(crate) refused: Option<OwnerError>,
    /// The wake-up the pass's commit writes (`orbit_engine::Run::wake` of the last run):
    /// due at once when the pass stopped at the engine's round bound.
    pub(crate) wake: Option<u64>,
}

impl Work {
    pub(crate) fn new(hot: Hot, caps: Capabilities) -> Work {
        Work {
            hot,
            events: vec![],
            inbox_done: vec![],
            tasks_done: vec![],
            settled_units: vec![],
            new_execution: None,
            replies: vec![],
            caps,
            initial: None,
            update_seq: None,
            refused: None,
            wake: None,
        }
    }

    pub(crate) fn record(&mut self, event: Event, now: u64) -> u64 {
        orbit_engine::run::record(&mut self.hot.state, &mut self.events, event, now)
    }

    /// Decides to the fixpoint after the recorded events (see `orbit_engine::settle`).
    pub(crate) fn settle(&mut self, now: u64, limits: &orbit_definition::Limits) -> Vec<Run> {
        let pass = Pass { now, limits, caps: self.caps };
        let recorded = std::mem::take(&mut self.events);
        settle(&self.hot.def, &mut self.hot.state, recorded, self.hot.timer_at, &pass)
    }

    /// The run touched by the recorded events, without deciding.
    pub(crate) fn undecided(&mut self) -> Vec<Run> {
        let recorded = std::mem::take(&mut self.events);
        vec![effects_of(&self.hot.def, &self.hot.state, recorded, self.hot.timer_at, self.caps)]
    }
}

/// An execution whose engine work panicked in this pass.
pub(crate) struct Failed {
    pub execution_id: String,
    /// Its entries in the pass, by seq (empty for a start).
    pub seqs: Vec<u64>,
    /// Whether it was being created (nothing stored yet).
    pub new_execution: bool,
    /// Its starts that nobody waits for (a child a parent asked for): retried, counted.
    pub retry_starts: Vec<PendingStart>,
    /// The panic message.
    pub message: String,
}

/// What [`apply_set`] did.
#[derive(Default)]
pub(crate) struct Applied {
    /// Executions committed.
    pub committed: Vec<String>,
    /// Executions whose engine work panicked (left out of the commit).
    pub failed: Vec<Failed>,
}

/// What one execution's engine job hands back.
struct Done {
    work: Work,
    batches: Vec<CommitBatch>,
    children: Vec<ChildStart>,
    tasks: bool,
    timers: bool,
    /// Per handed result of the execution, in order: recorded or not.
    handed: Vec<bool>,
    /// Only while traces are on (see `trace`).
    before: Option<crate::trace::Before>,
}

/// Applies `starts` and `entries` (see the module docs).
///
/// # Errors
/// The commit was refused for a reason this pass cannot resolve (logged and retried by the
/// pass loop), or the store cannot be read.
pub(crate) async fn apply_set(
    inner: &Inner,
    core: &mut Core,
    starts: Vec<PendingStart>,
    entries: Vec<InboxEntry>,
    handed: Vec<Handed>,
    now: u64,
) -> Result<Applied, OwnerError> {
    let mut work: BTreeMap<String, Work> = BTreeMap::new();
    let mut inputs: BTreeMap<String, Vec<InboxEntry>> = BTreeMap::new();
    let mut reports: BTreeMap<String, Vec<handed::Report>> = BTreeMap::new();
    let mut handed_replies: BTreeMap<String, Vec<tokio::sync::oneshot::Sender<bool>>> =
        BTreeMap::new();
    for h in handed {
        // The caller checked that the execution is held: this is the hot copy.
        if !work.contains_key(&h.execution_id) {
            let Some(hot) = core.hot.get(&h.execution_id) else {
                let _ = h.reply.send(false);
                continue;
            };
            work.insert(h.execution_id.clone(), Work::new(hot.clone(), inner.cfg.capabilities));
        }
        reports.entry(h.execution_id.clone()).or_default().push(h.report);
        handed_replies.entry(h.execution_id).or_default().push(h.reply);
    }

    for mut start in starts {
        let id = start.request.execution_id.clone();
        if let Some(w) = work.get_mut(&id) {
            w.replies.push(start);
            continue;
        }
        match begin(inner, core, &start.request, now).await {
            Ok(Begin::Exists(started)) => reply(&mut start, Ok(started)),
            Ok(Begin::New(new)) => {
                let (hot, created, row) = *new;
                let mut w = Work::new(hot, inner.cfg.capabilities);
                w.new_execution = Some(row);
                w.record(created, now);
                w.initial = start.request.update.clone();
                w.replies.push(start);
                work.insert(id, w);
            }
            Err(e) => reply(&mut start, Err(e)),
        }
    }

    // Evicted executions woken by these entries come back with their reads in parallel.
    let ids: Vec<&str> = entries.iter().map(|e| e.execution_id.as_str()).collect();
    crate::hot::reload_evicted(inner, core, &ids).await;
    for entry in entries {
        if !work.contains_key(&entry.execution_id) {
            match hot(inner, core, &entry.execution_id).await {
                Ok(h) => {
                    work.insert(
                        entry.execution_id.clone(),
                        Work::new(h.clone(), inner.cfg.capabilities),
                    );
                }
                Err(e) => {
                    tracing::warn!(execution_id = %entry.execution_id, trace_id = %orbit_telemetry::trace_id(&entry.execution_id), seq = entry.seq, error = %e, "inbox entry for an execution this owner cannot load");
                    continue;
                }
            }
        }
        inputs.entry(entry.execution_id.clone()).or_default().push(entry);
    }

    let limits = inner.cfg.limits.clone();
    let node_id = inner.cfg.node_id.clone();
    let retention_ms = inner.cfg.retention_ms;
    let mut jobs: Vec<(String, isolate::Job<Done>)> = Vec::new();
    let mut meta: BTreeMap<String, (Vec<u64>, bool, Vec<PendingStart>)> = BTreeMap::new();
    for (id, mut w) in work {
        let entries = inputs.remove(&id).unwrap_or_default();
        let reports = reports.remove(&id).unwrap_or_default();
        let seqs = entries.iter().map(|e| e.seq).collect();
        // Replies stay here: a panicking job must not take the callers' channels with it.
        let replies = std::mem::take(&mut w.replies);
        meta.insert(id.clone(), (seqs, w.new_execution.is_some(), replies));
        let (limits, node_id, job_id) = (limits.clone(), node_id.clone(), id.clone());
        jobs.push((
            id,
            Box::new(move || {
                if let Some(row) = &w.new_execution {
                    crate::fault_inject::on_start(&row.workflow);
                }
                let before = orbit_telemetry::traced(&job_id)
                    .then(|| crate::trace::Before::of(&w.hot.state));
                if let Err(e) = crate::initial::accept_initial(&mut w, now, &limits) {
                    // Refused: nothing of this execution is committed (see `initial`).
                    w.refused = Some(e);
                    return Done {
                        work: w,
                        batches: vec![],
                        children: vec![],
                        tasks: false,
                        timers: false,
                        // Nothing recorded: any handed result takes the inbox route.
                        handed: vec![false; reports.len()],
                        before: None,
                    };
                }
                for entry in &entries {
                    apply_entry(&mut w, entry, now, &limits);
                }
                // After the inbox entries: the claim's `dispatched` entry comes first.
                let handed =
                    reports.iter().map(|r| handed::apply(&mut w, r, now, &limits)).collect();
                let runs = w.settle(now, &limits);
                w.wake = runs.last().and_then(|r| r.wake);
                let (batches, children, tasks, timers) =
                    batches_for(&node_id, retention_ms, &job_id, &mut w, runs, now);
                Done { work: w, batches, children, tasks, timers, handed, before }
            }),
        ));
    }

    let mut applied = Applied::default();
    let mut work: BTreeMap<String, Work> = BTreeMap::new();
    let (mut batches, mut children, mut tasks, mut timers) = (vec![], vec![], false, false);
    let mut traced: BTreeMap<String, (crate::trace::Before, Vec<HistoryEvent>)> = BTreeMap::new();
    let mut recorded: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    for (id, outcome) in isolate::run(jobs).await? {
        let (seqs, new_execution, replies) = meta.remove(&id).unwrap_or_default();
        match outcome {
            Ok(Done { work: Work { refused: Some(refusal), .. }, .. }) => {
                let mut replies = replies.into_iter();
                if let Some(mut first) = replies.next() {
                    reply(&mut first, Err(refusal));
                }
                // Other starts of the same id in this pass: the execution was not created;
                // their callers retry.
                for mut r in replies {
                    reply(
                        &mut r,
                        Err(OwnerError::unavailable(format!(
                            "execution `{id}` was not created (its start's update was refused); retry"
                        ))),
                    );
                }
            }
            Ok(mut done) => {
                if let Some(before) = done.before.take() {
                    let events = done.batches.iter().flat_map(|b| b.events.iter().cloned());
                    traced.insert(id.clone(), (before, events.collect()));
                }
                batches.append(&mut done.batches);
                recorded.insert(id.clone(), std::mem::take(&mut done.handed));
                children.append(&mut done.children);
                tasks |= done.tasks;
                timers |= done.timers;
                done.work.replies = replies;
                work.insert(id, done.work);
            }
            Err(message) => {
                let (retry_starts, mut replies): (Vec<_>, Vec<_>) =
                    replies.into_iter().partition(|r| r.reply.is_none());
                for r in &mut replies {
                    reply(
                        r,
                        Err(OwnerError::unavailable(format!(
                            "processing execution `{id}` failed and was dropped: {message}"
                        ))),
                    );
                }
                applied.failed.push(Failed {
                    execution_id: id,
                    seqs,
                    new_execution,
                    retry_starts,
                    message,
                });
            }
        }
    }
    if work.is_empty() {
        handed::answer(handed_replies, &recorded, false);
        return Ok(applied);
    }
    let reserved =
        crate::handoff::reserve(inner, &mut batches, |id| work.get(id).map(|w| &*w.hot.def));
    // Tasks left for the claims: only then are the frontends' dispatchers woken.
    let tasks = tasks && batches.iter().any(|b| b.tasks_to_insert.len() > b.task_claims.len());
    // What the commit does, for the readers waiting on these executions (issue 14).
    let changes = inner.changes.changes_of(work.keys().map(String::as_str), &batches);
    let lost = lost_attempts(&batches);
    let committed = inner.store.commit_all(batches).await;
    handed::answer(handed_replies, &recorded, committed.is_ok());
    crate::handoff::settle(inner, reserved, committed.as_deref().ok());
    match committed {
        Ok(_) => {
            inner.changes.publish_committed(work.keys().map(String::as_str), &changes);
            let end_ms = if traced.is_empty() { 0 } else { orbit_telemetry::now_ms() };
            let metrics = orbit_metrics::get();
            for (id, reason) in lost {
                let workflow = work.get(&id).map_or("", |w| w.hot.def.name.as_str());
                metrics.attempts_lost.with_label_values(&[workflow, reason]).inc();
            }
            for (id, mut w) in work {
                if let Some((before, events)) = traced.get(&id) {
                    crate::trace::emit(
                        &id,
                        &inner.cfg.node_id,
                        &w.hot,
                        before,
                        events,
                        now,
                        end_ms,
                    );
                }
                let closed = w.hot.state.status().is_closed();
                // Counted after the commit, from what the pass already holds.
                let workflow = w.hot.def.name.as_str();
                if w.new_execution.is_some() {
                    metrics.executions_started.with_label_values(&[workflow]).inc();
                }
                if closed {
                    let status = w.hot.state.status().as_str();
                    metrics.executions_closed.with_label_values(&[workflow, status]).inc();
                }
                w.hot.timer_at = Some(w.wake);
                let started = Started {
                    execution_id: id.clone(),
                    run: w.hot.state.run,
                    created: true,
                    version: w.hot.def.version.clone(),
                    definition_hash: w.hot.def.hash.clone(),
                    update_seq: 0,
                };
                for (i, mut r) in w.replies.into_iter().enumerate() {
                    let created = i == 0 && w.new_execution.is_some();
                    // Only the call that created the execution recorded its update.
                    let update_seq = if created { w.update_seq.unwrap_or(0) } else { 0 };
                    reply(&mut r, Ok(Started { created, update_seq, ..started.clone() }));
                }
                applied.committed.push(id.clone());
                if closed {
                    core.hot.remove(&id);
                } else {
                    crate::evict::keep(core, id, w.hot, inner.cfg.evict_after_ms, now);
                }
            }
            if tasks {
                inner.tasks_ready.notify_waiters();
            }
            if timers {
                inner.timers_changed.notify_one();
            }
            queue_children(inner, children);
            Ok(applied)
        }
        Err(e) => on_commit_error(inner, core, work, e).await.map(|()| applied),
    }
}

/// The attempts whose worker went silent in these batches, by execution and reason (for
/// `orbit_attempts_lost_total`).
fn lost_attempts(batches: &[CommitBatch]) -> Vec<(String, &'static str)> {
    use orbit_engine::command::HEARTBEAT_TIMEOUT;
    use orbit_engine::decide::WORKER_LOST;
    let mut lost = Vec::new();
    for b in batches {
        for he in &b.events {
            let reason = match &he.event {
                Event::StepAttemptUncertain { .. } => "SESSION_LOST",
                Event::StepAttemptFailed { error, .. } if error.code == HEARTBEAT_TIMEOUT => {
                    HEARTBEAT_TIMEOUT
                }
                Event::StepAttemptFailed { error, .. } if error.code == WORKER_LOST => WORKER_LOST,
                _ => continue,
            };
            lost.push((b.execution_id.clone(), reason));
        }
    }
    lost
}

/// Stores a start's `WorkflowCreated` (projection and owners row) WITHOUT its first
/// decision: how a start that kept killing the process is kept, to be parked. A start's
/// update is not recorded here: its caller, answered `UNAVAILABLE`, retries and finds the
/// execution parked.
pub(crate) async fn create_only(
    inner: &Inner,
    core: &mut Core,
    start: PendingStart,
    now: u64,
) -> Result<(), OwnerError> {
    let Begin::New(new) = begin(inner, core, &start.request, now).await? else { return Ok(()) };
    let (hot, created, row) = *new;
    let id = start.request.execution_id.clone();
    let mut w = Work::new(hot, inner.cfg.capabilities);
    w.new_execution = Some(row);
    w.record(created, now);
    let runs = w.undecided();
    let (batches, _, _, _) =
        batches_for(&inner.cfg.node_id, inner.cfg.retention_ms, &id, &mut w, runs, now);
    inner.store.commit_all(batches).await?;
    inner.changes.publish([id.as_str()]);
    w.hot.epoch = Some(1);
    core.hot.insert(id, w.hot);
    Ok(())
}

/// Applies one inbox entry to the execution's work, recording its reply.
fn apply_entry(w: &mut Work, entry: &InboxEntry, now: u64, limits: &orbit_definition::Limits) {
    let result = match inbox::request(entry) {
        Ok(Request::Tick) => {
            // Firing deleted the timer row: compare the next wake-up against no row, so the
            // commit writes it again when the timer is not due by this owner's clock (a
            // scheduler whose clock runs ahead) instead of leaving the execution asleep.
            w.hot.timer_at = Some(None);
            InboxReply::Applied { seq: w.hot.state.last_seq, run: w.hot.state.run, applied: true }
        }
        Ok(Request::Command(cmd, child)) => {
            if let Command::Signal { name, .. } = cmd.as_ref() {
                crate::fault_inject::on_signal(name);
            }
            if let Err(e) = inbox::check_child(&w.hot.state, &cmd, child.as_deref()) {
                InboxReply::refused(e)
            } else {
                let cancel = matches!(cmd.as_ref(), Command::Cancel { .. });
                let update = matches!(cmd.as_ref(), Command::Update { .. });
                if let Some(answer) = crate::initial::repeated(&w.hot.state, &cmd) {
                    w.inbox_done.push(InboxDone { seq: entry.seq, result: Some(answer) });
                    return;
                }
                match accept(&w.hot.def, &w.hot.state, *cmd, now, limits) {
                    Ok(events) => {
                        // A result recorded as stale was kept but not applied: say so, so the
                        // frontend can answer the worker `accepted: false`.
                        let applied =
                            !events.iter().any(|e| matches!(e, Event::StaleResultIgnored { .. }));
                        // A cancel of a run already winding down records nothing and answers
                        // seq 0 (`CancelExecutionResponse.seq`), not the run's latest event.
                        let mut seq =
                            if cancel && events.is_empty() { 0 } else { w.hot.state.last_seq };
                        // An update answers its reply and the seq of its `UpdateAccepted`.
                        let result =
                            update.then(|| orbit_engine::update::reply(&events).cloned()).flatten();
                        let mut first = None;
                        for e in events {
                            seq = w.record(e, now);
                            first.get_or_insert(seq);
                        }
                        match result {
                            Some(result) => InboxReply::Updated {
                                seq: first.unwrap_or(seq),
                                run: w.hot.state.run,
                                result,
                            },
                            None => InboxReply::Applied { seq, run: w.hot.state.run, applied },
                        }
                    }
                    Err(e) => InboxReply::refused(e),
                }
            }
        }
        Ok(Request::Control(_)) => InboxReply::Refused {
            code: ErrorCode::InvalidArgument,
            message: "operator entry outside a control pass".into(),
        },
        Err(e) => InboxReply::refused(e),
    };
    w.inbox_done.push(InboxDone { seq: entry.seq, result: Some(result) });
}

pub(crate) fn reply(start: &mut PendingStart, result: Result<Started, OwnerError>) {
    if let Some(tx) = start.reply.take() {
        let _ = tx.send(result);
    }
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
    // Both reads at once: a new execution (the usual start) needs the definition, and the
    // two round trips in sequence were on every start's path.
    let (existing, def) = tokio::join!(
        inner.store.get_execution(&req.execution_id),
        definition(inner, core, &req.workflow, req.version.as_deref())
    );
    if let Some(row) = existing? {
        // Execution ids are unique across workflows: a start of another workflow under a
        // taken id is refused, never answered with that execution (whose workflow,
        // version and hash the caller did not ask for). The message names neither, so a
        // caller allowed only its own workflows learns nothing of the other one.
        if row.workflow != req.workflow {
            return Err(OwnerError::new(
                ErrorCode::ExecutionExists,
                format!(
                    "execution id `{}` is already in use by an execution of another \
                     workflow; start with another id",
                    req.execution_id
                ),
            ));
        }
        return Ok(Begin::Exists(Started {
            execution_id: row.execution_id,
            run: row.run,
            created: false,
            version: row.version,
            definition_hash: row.definition_hash,
            update_seq: 0,
        }));
    }
    let def = def?;
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
        status: Status::Running,
        schedule_id: req.schedule_id.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        closed_at_ms: None,
        last_seq: 0,
    };
    let hot = Hot { def, state: State::default(), root_id, epoch: Some(1), timer_at: Some(None) };
    Ok(Begin::New(Box::new((hot, created, row))))
}

/// The commit batches of one execution (one per run touched, oldest first), the children
/// to start after the commit, and whether tasks or timers changed. A closing run records
/// when retention deletes it (`retention_ms` unless the workflow sets its own).
pub(crate) fn batches_for(
    node_id: &str,
    retention_ms: u64,
    id: &str,
    w: &mut Work,
    runs: Vec<Run>,
    now: u64,
) -> (Vec<CommitBatch>, Vec<ChildStart>, bool, bool) {
    let mut batches = Vec::new();
    let mut children = Vec::new();
    let (mut tasks, mut timers) = (false, false);
    for (i, run) in runs.into_iter().enumerate() {
        let mut rows = effects::rows(run.effects, &w.hot.root_id);
        if i == 0 {
            rows.cancel_units.retain(|u| !w.settled_units.contains(u));
        }
        tasks |= !rows.tasks.is_empty();
        timers |= !rows.timers_to_upsert.is_empty() || !rows.timers_to_delete.is_empty();
        children.append(&mut rows.children);
        let closed = run.status.is_closed();
        batches.push(CommitBatch {
            execution_id: id.to_string(),
            run: run.run,
            expected_epoch: if w.new_execution.is_some() { None } else { w.hot.epoch },
            new_execution: if i == 0 { w.new_execution.clone() } else { None },
            new_owner: (i == 0 && w.new_execution.is_some())
                .then(|| NewOwner { root_id: w.hot.root_id.clone(), node_id: node_id.to_string() }),
            events: run.events,
            projection: Some(ProjectionUpdate {
                status: run.status,
                updated_at_ms: now,
                closed_at_ms: closed.then_some(now),
                delete_after_ms: effects::delete_after(&w.hot.def, run.status, now, retention_ms),
            }),
            tasks_to_insert: rows.tasks,
            task_claims: Vec::new(),
            units_to_cancel: rows.cancel_units,
            inbox_to_insert: rows.inbox,
            timers_to_upsert: rows.timers_to_upsert,
            timers_to_delete: rows.timers_to_delete,
            inbox_done: if i == 0 { std::mem::take(&mut w.inbox_done) } else { Vec::new() },
            tasks_done: if i == 0 { std::mem::take(&mut w.tasks_done) } else { Vec::new() },
        });
    }
    (batches, children, tasks, timers)
}
