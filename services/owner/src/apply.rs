//! Applying one set of starts, inbox entries and handed results, in four phases:
//!
//! 1. [`load`]: the executions they touch, as [`Work`] (new ones through `begin`, evicted
//!    ones reloaded together, the rest from memory or the store);
//! 2. [`run_jobs`]: each execution's engine work, isolated (see `isolate`): apply the
//!    entries (`entries`) and handed results (`handed`), `orbit_engine::settle`, the tasks
//!    live sessions take right away reserved and recorded `StepDispatched` (`handoff`),
//!    and the commit batches of the runs it touched (`batches`);
//! 3. [`commit`]: the executions whose work succeeded in ONE transaction;
//! 4. [`publish`]: only after the commit: memory, metrics and traces, callers answered,
//!    whoever has new work woken, children started.
//!
//! An execution whose engine work panicked is left out of the commit (its entries stay
//! pending, memory keeps its previous state) and reported as [`Failed`]; counting and
//! parking are the caller's (see `quarantine`).

use crate::batches::{batches_for, lost_attempts};
use crate::begin::{begin, Begin, Existing};
use crate::context::{Core, Inner};
use crate::effects::ChildStart;
use crate::entries::apply_entry;
use crate::error::OwnerError;
use crate::handed::{self, Report};
use crate::hot::{hot, reload_evicted};
use crate::isolate;
use crate::refused::on_commit_error;
use crate::requests::{reply, Handed, PendingStart, Started};
use crate::resume::queue_children;
use crate::trace::Before;
use crate::work::{Applied, Failed, Work};
use orbit_engine::event::HistoryEvent;
use orbit_engine::run::Pass;
use orbit_store::{CommitBatch, InboxEntry, TaskClaim};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tokio::sync::oneshot;

/// Applies `starts`, `entries` and `handed` (see the module docs).
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
    let loaded = load(inner, core, starts, entries, handed, now).await;
    let handed_replies = loaded.handed_replies;
    let (ran, failed) = run_jobs(inner, loaded.work, loaded.inputs, loaded.reports, now).await?;
    let mut applied = Applied { committed: Vec::new(), failed };
    if ran.work.is_empty() {
        handed::answer(handed_replies, &ran.recorded, false);
        return Ok(applied);
    }
    let Ran { work, mut batches, children, tasks, timers, traced, recorded, reserved } = ran;
    // Tasks left for the claims: only then are the frontends' dispatchers woken.
    let tasks = tasks && batches.iter().any(|b| b.tasks_to_insert.len() > b.task_claims.len());
    // What the commit does, for the readers waiting on these executions (issue 14).
    let changes = inner.changes.changes_of(work.keys().map(String::as_str), &batches);
    let lost = lost_attempts(&batches);
    // Entries for executions this owner may hold (a child's end for its parent; a slot's
    // grant or cancel, which the store adds to the commit of a batch with slot operations):
    // read next.
    let wrote_inbox = batches.iter().any(|b| !b.inbox_to_insert.is_empty() || !b.slots.is_empty());
    // Frontends hear of it from this owner when its hand-off reaches them all (issue 25).
    let sent = crate::handoff::take_changes(inner, &mut batches);
    match commit(inner, batches, reserved, handed_replies, &recorded, sent).await {
        Ok(()) => {
            if wrote_inbox {
                inner.mark_inbox();
            }
            inner.changes.publish_committed(work.keys().map(String::as_str), &changes);
            let published = Published { tasks, timers, traced, lost, children };
            applied.committed = publish(inner, core, work, published, now);
            Ok(applied)
        }
        Err(e) => on_commit_error(inner, core, work, e).await.map(|()| applied),
    }
}

/// What [`load`] gathered: the work per execution and its inputs.
struct Loaded {
    work: BTreeMap<String, Work>,
    inputs: BTreeMap<String, Vec<InboxEntry>>,
    reports: BTreeMap<String, Vec<Report>>,
    handed_replies: BTreeMap<String, Vec<oneshot::Sender<bool>>>,
}

/// Phase 1: the work of every execution the pass touches. Starts that find their id taken,
/// or fail, are answered here; entries of an execution this owner cannot load are left
/// pending (logged).
async fn load(
    inner: &Inner,
    core: &mut Core,
    starts: Vec<PendingStart>,
    entries: Vec<InboxEntry>,
    handed: Vec<Handed>,
    now: u64,
) -> Loaded {
    let caps = inner.cfg.capabilities;
    let mut loaded = Loaded {
        work: BTreeMap::new(),
        inputs: BTreeMap::new(),
        reports: BTreeMap::new(),
        handed_replies: BTreeMap::new(),
    };
    // A start alone in its pass (the usual one at low load) does not read its id first:
    // the commit checks it (see `Existing::Unchecked`). Not for one this owner holds or
    // evicted (it exists), nor for one carried after a failed pass.
    let alone = starts.len() == 1 && entries.is_empty() && handed.is_empty();
    // Several starts: their ids are read at once, not one round trip each in sequence.
    let mut starts = starts;
    let mut known =
        if starts.len() > 1 { read_starts(inner, &mut starts).await } else { Vec::new() };
    let work = &mut loaded.work;
    for h in handed {
        // The caller checked that the execution is held: this is the hot copy.
        if !work.contains_key(&h.execution_id) {
            let Some(hot) = core.hot.get(&h.execution_id) else {
                let _ = h.reply.send(false);
                continue;
            };
            work.insert(h.execution_id.clone(), Work::new(hot.clone(), caps));
        }
        loaded.reports.entry(h.execution_id.clone()).or_default().push(h.report);
        loaded.handed_replies.entry(h.execution_id).or_default().push(h.reply);
    }

    for (i, mut start) in starts.into_iter().enumerate() {
        let id = start.request.execution_id.clone();
        let read = known.get_mut(i).and_then(Option::take);
        if let Some(w) = work.get_mut(&id) {
            w.replies.push(start);
            continue;
        }
        let fork = match crate::fork::prepare(inner, core, &mut start.request).await {
            Ok(fork) => fork,
            Err(e) => {
                reply(&mut start, Err(e));
                continue;
            }
        };
        let unchecked = alone
            && fork.is_none()
            && start.retries == 0
            && !core.hot.contains_key(&id)
            && !core.evicted.contains(&id);
        if !unchecked {
            // The cached latest is checked by the commit only for a start alone in its
            // pass (a failed commit holds nothing else back); this one reads the latest.
            start.request.read_latest();
        }
        let existing = match read {
            _ if unchecked => Existing::Unchecked,
            Some(Ok(row)) => Existing::Known(row.map(Box::new)),
            Some(Err(e)) => {
                reply(&mut start, Err(e.into()));
                continue;
            }
            None => Existing::Read,
        };
        match begin(inner, core, &start.request, now, existing).await {
            Ok(Begin::Exists(started)) => reply(&mut start, Ok(started)),
            Ok(Begin::New(new)) => {
                let (hot, created, row) = *new;
                let mut w = Work::new(hot, caps);
                w.new_execution = Some(row);
                w.versions_seen = start.request.versions_seen;
                // A fork records its own first events in the job.
                if fork.is_none() {
                    w.record(created, now);
                }
                w.fork = fork;
                w.initial = start.request.update.clone();
                w.replies.push(start);
                work.insert(id, w);
            }
            Err(e) => reply(&mut start, Err(e)),
        }
    }

    // Evicted executions woken by these entries come back with their reads in parallel.
    let ids: Vec<&str> = entries.iter().map(|e| e.execution_id.as_str()).collect();
    reload_evicted(inner, core, &ids).await;
    for entry in entries {
        if !work.contains_key(&entry.execution_id) {
            match hot(inner, core, &entry.execution_id).await {
                Ok(h) => {
                    work.insert(entry.execution_id.clone(), Work::new(h.clone(), caps));
                }
                Err(e) => {
                    tracing::warn!(execution_id = %entry.execution_id, trace_id = %orbit_telemetry::trace_id(&entry.execution_id), seq = entry.seq, error = %e, "inbox entry for an execution this owner cannot load");
                    continue;
                }
            }
        }
        loaded.inputs.entry(entry.execution_id.clone()).or_default().push(entry);
    }
    loaded
}

/// The executions of `starts`' ids, in one read (a fork reads its own); beside it, once per
/// workflow, the versions of the starts that took their workflow's latest version from a
/// frontend's cached list (`StartRequest::versions_seen`), which then start the latest
/// read here. Issue 25: under load a pass holds dozens of starts, and a read per start was
/// most of the statements per task.
async fn read_starts(
    inner: &Inner,
    starts: &mut [PendingStart],
) -> Vec<Option<orbit_store::Result<Option<orbit_store::ExecutionRow>>>> {
    // An id asked twice comes back once (`get_executions`).
    let ids: Vec<String> = starts
        .iter()
        .filter(|s| s.request.fork.is_none())
        .map(|s| s.request.execution_id.clone())
        .collect();
    let workflows: BTreeSet<String> = starts
        .iter()
        .filter(|s| s.request.versions_seen.is_some())
        .map(|s| s.request.workflow.clone())
        .collect();
    let executions = async {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        inner.store.get_executions(&ids).await
    };
    let latest = futures_util::future::join_all(workflows.iter().map(|w| async move {
        let versions = inner.store.definition_versions(w).await;
        (w.as_str(), versions.ok().and_then(orbit_store::VersionRow::latest))
    }));
    let (executions, latest) = tokio::join!(executions, latest);
    let latest: HashMap<&str, orbit_store::VersionRow> =
        latest.into_iter().filter_map(|(w, v)| Some((w, v?))).collect();
    let rows: orbit_store::Result<HashMap<String, orbit_store::ExecutionRow>> =
        executions.map(|found| found.into_iter().map(|r| (r.execution_id.clone(), r)).collect());
    starts
        .iter_mut()
        .map(|s| {
            if s.request.versions_seen.is_some() {
                if let Some(v) = latest.get(s.request.workflow.as_str()) {
                    s.request.version = Some(v.version.clone());
                    s.request.versions_seen = None;
                }
            }
            if s.request.fork.is_some() {
                return None;
            }
            // Two starts of one id each get the row: `begin` finds the first one's in
            // memory anyway (`load` joins them).
            Some(
                rows.as_ref()
                    .map(|rows| rows.get(&s.request.execution_id).cloned())
                    .map_err(Clone::clone),
            )
        })
        .collect()
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
    before: Option<Before>,
    /// Sessions reserved for its tasks (see `handoff`), settled after the commit.
    reserved: Vec<TaskClaim>,
}

/// What [`run_jobs`] produced for the executions whose engine work succeeded.
struct Ran {
    work: BTreeMap<String, Work>,
    batches: Vec<CommitBatch>,
    children: Vec<ChildStart>,
    tasks: bool,
    timers: bool,
    traced: BTreeMap<String, (Before, Vec<HistoryEvent>)>,
    /// Sessions the jobs reserved for new tasks (see `handoff`).
    reserved: Vec<TaskClaim>,
    /// Per execution, per handed result: recorded by its job or not.
    recorded: BTreeMap<String, Vec<bool>>,
}

/// Phase 2: every execution's engine job, isolated. A refused update-with-start is answered
/// here (nothing of it is committed); a job that panicked is answered `UNAVAILABLE` and
/// returned as [`Failed`].
async fn run_jobs(
    inner: &Inner,
    work: BTreeMap<String, Work>,
    mut inputs: BTreeMap<String, Vec<InboxEntry>>,
    mut reports: BTreeMap<String, Vec<Report>>,
    now: u64,
) -> Result<(Ran, Vec<Failed>), OwnerError> {
    let mut jobs: Vec<(String, isolate::Job<Done>)> = Vec::new();
    let mut meta: BTreeMap<String, (Vec<u64>, bool, Vec<PendingStart>)> = BTreeMap::new();
    for (id, mut w) in work {
        let entries = inputs.remove(&id).unwrap_or_default();
        let reports = reports.remove(&id).unwrap_or_default();
        let seqs = entries.iter().map(|e| e.seq).collect();
        // Replies stay here: a panicking job must not take the callers' channels with it.
        let replies = std::mem::take(&mut w.replies);
        meta.insert(id.clone(), (seqs, w.new_execution.is_some(), replies));
        jobs.push((id.clone(), job(inner, id, w, entries, reports, now)));
    }

    let mut ran = Ran {
        work: BTreeMap::new(),
        batches: vec![],
        children: vec![],
        tasks: false,
        timers: false,
        traced: BTreeMap::new(),
        recorded: BTreeMap::new(),
        reserved: Vec::new(),
    };
    let mut failed = Vec::new();
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
                    ran.traced.insert(id.clone(), (before, events.collect()));
                }
                ran.batches.append(&mut done.batches);
                ran.reserved.append(&mut done.reserved);
                ran.recorded.insert(id.clone(), std::mem::take(&mut done.handed));
                ran.children.append(&mut done.children);
                ran.tasks |= done.tasks;
                ran.timers |= done.timers;
                done.work.replies = replies;
                ran.work.insert(id, done.work);
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
                failed.push(Failed {
                    execution_id: id,
                    seqs,
                    new_execution,
                    retry_starts,
                    message,
                });
            }
        }
    }
    Ok((ran, failed))
}

/// One execution's engine job: the start's update, the inbox entries, the handed results
/// (after the entries: the claim's `dispatched` entry comes first), the decision and its
/// commit batches. Runs off the async runtime, behind `catch_unwind` (see `isolate`).
fn job(
    inner: &Inner,
    id: String,
    mut w: Work,
    entries: Vec<InboxEntry>,
    reports: Vec<Report>,
    now: u64,
) -> isolate::Job<Done> {
    let limits = inner.cfg.limits.clone();
    let node_id = inner.cfg.node_id.clone();
    let handoff = inner.handoff.get().cloned();
    let retention_ms = inner.cfg.retention_ms;
    Box::new(move || {
        if let Some(row) = &w.new_execution {
            crate::fault_inject::on_start(&row.workflow);
        }
        let before = orbit_telemetry::traced(&id).then(|| Before::of(&w.hot.state));
        if let Err(e) = crate::initial::accept_initial(&mut w, now, &limits) {
            // Refused: nothing of this execution is committed (see `initial`).
            return refused(w, e, reports.len());
        }
        let fork = w.fork.take();
        let forked =
            fork.as_ref().map(|f| crate::fork::runs(&mut w.hot, w.caps, &id, f, now, &limits));
        let (runs, handed) = match forked {
            // A new execution: no entries or handed results are its yet.
            Some(Ok(runs)) => (runs, vec![false; reports.len()]),
            Some(Err(e)) => return refused(w, e, reports.len()),
            None => {
                for entry in &entries {
                    apply_entry(&mut w, entry, now, &limits);
                }
                let handed =
                    reports.iter().map(|r| handed::apply(&mut w, r, now, &limits)).collect();
                (w.settle(now, &limits), handed)
            }
        };
        let pass = Pass { now, limits: &limits, caps: w.caps };
        let (built, reserved) = crate::handoff::in_job(
            handoff.as_ref(),
            &id,
            &mut w,
            runs,
            &pass,
            |w, runs, claims| {
                w.wake = runs.last().and_then(|r| r.wake);
                let mut built = batches_for(&node_id, retention_ms, &id, w, runs, now);
                crate::handoff::claim_in(&mut built.0, claims);
                built
            },
        );
        let (batches, children, tasks, timers) = built;
        Done { work: w, batches, children, tasks, timers, handed, before, reserved }
    })
}

/// A start refused in its job (its update, or its fork): nothing of the execution is
/// committed; any handed result takes the inbox route.
fn refused(mut w: Work, e: OwnerError, reports: usize) -> Done {
    w.refused = Some(e);
    Done {
        work: w,
        batches: vec![],
        children: vec![],
        tasks: false,
        timers: false,
        handed: vec![false; reports],
        before: None,
        reserved: Vec::new(),
    }
}

/// Phase 3: ONE transaction for every execution of the pass, with the tasks reserved for
/// live sessions claimed in it (see `handoff`); handed results are answered with its
/// outcome, reservations it did not record are given back, and the changes it `sent`
/// itself go to the frontends.
async fn commit(
    inner: &Inner,
    batches: Vec<CommitBatch>,
    reserved: Vec<TaskClaim>,
    handed_replies: BTreeMap<String, Vec<oneshot::Sender<bool>>>,
    recorded: &BTreeMap<String, Vec<bool>>,
    sent: Vec<orbit_store::SentChange>,
) -> Result<(), orbit_store::StoreError> {
    let committed = inner.store.commit_all(batches).await;
    handed::answer(handed_replies, recorded, committed.is_ok());
    crate::handoff::settle(inner, reserved, committed.as_deref().ok());
    if committed.is_ok() {
        crate::handoff::send_changes(inner, sent);
    }
    committed.map(|_| ())
}

/// What [`publish`] announces after the commit.
struct Published {
    tasks: bool,
    timers: bool,
    traced: BTreeMap<String, (Before, Vec<HistoryEvent>)>,
    lost: Vec<(String, &'static str)>,
    children: Vec<ChildStart>,
}

/// Phase 4, after the commit: metrics and traces, memory (closed executions dropped, quiet
/// ones evicted), starters answered, dispatchers and timers woken, children queued.
/// Returns the committed executions' ids.
fn publish(
    inner: &Inner,
    core: &mut Core,
    work: BTreeMap<String, Work>,
    p: Published,
    now: u64,
) -> Vec<String> {
    let end_ms = if p.traced.is_empty() { 0 } else { orbit_telemetry::now_ms() };
    let metrics = orbit_metrics::get();
    for (id, reason) in p.lost {
        let workflow = work.get(&id).map_or("", |w| w.hot.def.name.as_str());
        metrics.attempts_lost.with_label_values(&[workflow, reason]).inc();
    }
    let mut committed = Vec::with_capacity(work.len());
    for (id, mut w) in work {
        if let Some((before, events)) = p.traced.get(&id) {
            crate::trace::emit(&id, &inner.cfg.node_id, &w.hot, before, events, now, end_ms);
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
        committed.push(id.clone());
        if closed {
            core.hot.remove(&id);
        } else {
            crate::evict::keep(core, id, w.hot, inner.cfg.evict_after_ms, now);
        }
    }
    if p.tasks {
        inner.tasks_ready.notify_waiters();
    }
    if p.timers {
        inner.timers_changed.notify_one();
    }
    queue_children(inner, p.children);
    committed
}
