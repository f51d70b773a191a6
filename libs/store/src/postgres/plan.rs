//! The in-memory half of a PostgreSQL commit: checks every batch of a `commit_all` against
//! the rows read (and locked) in the first round trip, and turns the accepted batches into
//! multi-row statements.
//!
//! Checks run batch after batch in the SQLite backend's order (fence, new execution, new
//! owner, history continuity, inbox entries), each seeing what the batches before it did,
//! so both backends refuse the same call with the same error.
//!
//! Writes are grouped per kind into one `UNNEST` statement each. Grouping reorders writes
//! across batches, which is only safe between different executions (a unit cancelled by a
//! later batch of the same execution must cancel an offer an earlier one queued), so the
//! batches are cut into segments in which each execution appears once, and every segment
//! gets its own statements, in order.
//!
//! The one-round-trip commit sends a segment as ONE statement (`commit::composed`): the lock check
//! and every write as data-modifying CTEs. Those all see the rows as they were before the
//! statement and may not write a row twice, so no segment writes a row with two statements:
//! a new execution is inserted with its last seq and projection (never updated after), a
//! row the segment marks done is not also cancelled, and a timer both upserted and deleted
//! is only deleted (the outcome of writing them in order, as the SQLite backend does).

use super::listen::LIMITED;
use super::rows::{origin_name, to_i64};
use super::sql;
use crate::batch::{CommitBatch, CommitOutcome};
use crate::error::{Result, StoreError};
use std::collections::{HashMap, HashSet};
use tokio_postgres::types::ToSql;

/// What round trip 1 read.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// Epoch of each existing owners row.
    pub(crate) owners: HashMap<String, u64>,
    /// (run, last seq) of each existing execution.
    pub(crate) executions: HashMap<String, (u32, u64)>,
    /// Execution of each pending inbox entry among the seqs the batches apply.
    pub(crate) pending: HashMap<u64, String>,
    /// Registered versions of each workflow a start checks (`CommitBatch::versions_seen`).
    pub(crate) definitions: HashMap<String, i64>,
}

/// Which statement a write is, in the order a segment writes (the SQLite backend's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    InsertExecutions,
    InsertOwners,
    InsertEvents,
    UpdateExecutions,
    TasksDone,
    CancelUnits,
    /// Its rows are the inserted task rows (those with a token queued claimed: task
    /// hand-off), the only rows a commit reads back.
    InsertTasks,
    InsertInbox,
    UpsertTimers,
    DeleteTimers,
    InboxDone,
    /// Search attribute rows replaced (`crate::search`): the old rows of the names...
    DeleteSearch,
    /// ...and the new values' rows.
    InsertSearch,
    /// The NOTIFYs of every segment, last.
    Notify,
}

impl WriteKind {
    /// Every kind, in order.
    pub(crate) const ALL: [WriteKind; 14] = [
        WriteKind::InsertExecutions,
        WriteKind::InsertOwners,
        WriteKind::InsertEvents,
        WriteKind::UpdateExecutions,
        WriteKind::TasksDone,
        WriteKind::CancelUnits,
        WriteKind::InsertTasks,
        WriteKind::InsertInbox,
        WriteKind::UpsertTimers,
        WriteKind::DeleteTimers,
        WriteKind::InboxDone,
        WriteKind::DeleteSearch,
        WriteKind::InsertSearch,
        WriteKind::Notify,
    ];

    /// The statement, and its CTE's name in the one-statement commit.
    pub(crate) fn statement(self) -> (&'static str, &'static str) {
        match self {
            WriteKind::InsertExecutions => (sql::COMMIT_INSERT_EXECUTIONS, "w_executions"),
            WriteKind::InsertOwners => (sql::COMMIT_INSERT_OWNERS, "w_owners"),
            WriteKind::InsertEvents => (sql::COMMIT_INSERT_EVENTS, "w_events"),
            WriteKind::UpdateExecutions => (sql::COMMIT_UPDATE_EXECUTIONS, "w_progress"),
            WriteKind::TasksDone => (sql::COMMIT_TASKS_DONE, "w_done"),
            WriteKind::CancelUnits => (sql::COMMIT_CANCEL_UNITS, "w_cancel"),
            WriteKind::InsertTasks => (sql::COMMIT_INSERT_TASKS, "w_tasks"),
            WriteKind::InsertInbox => (sql::COMMIT_INSERT_INBOX, "w_inbox"),
            WriteKind::UpsertTimers => (sql::COMMIT_UPSERT_TIMERS, "w_timers"),
            WriteKind::DeleteTimers => (sql::COMMIT_DELETE_TIMERS, "w_timers_gone"),
            WriteKind::InboxDone => (sql::COMMIT_INBOX_DONE, "w_applied"),
            WriteKind::DeleteSearch => (sql::COMMIT_DELETE_SEARCH, "w_search_gone"),
            WriteKind::InsertSearch => (sql::COMMIT_INSERT_SEARCH, "w_search"),
            WriteKind::Notify => (sql::NOTIFY_MANY, "notified"),
        }
    }

    /// Its bit in a set of kinds.
    pub(crate) fn bit(self) -> usize {
        1 << self as usize
    }
}

/// One statement with its parameters.
pub(crate) struct Write {
    pub(crate) params: Vec<Box<dyn ToSql + Sync + Send>>,
    pub(crate) kind: WriteKind,
}

impl Write {
    /// The write's own statement (the two-round-trip commit).
    pub(crate) fn sql(&self) -> &'static str {
        self.kind.statement().0
    }
}

/// The key of a task offer: (execution, run, unit, attempt, offer).
pub(crate) type TaskKey = (String, i64, String, i64, i64);

/// The accepted batches as statements.
pub(crate) struct Plan {
    /// Every write, in order (the NOTIFYs last).
    pub(crate) writes: Vec<Write>,
    /// One outcome per batch (task ids are filled in from the insert's result).
    pub(crate) outcomes: Vec<CommitOutcome>,
    /// The offers each batch queued, in its order.
    pub(crate) task_keys: Vec<Vec<TaskKey>>,
}

/// Declares a struct of column vectors (one per statement parameter, in order) and a
/// `params` method that hands them to the statement.
macro_rules! columns {
    ($name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        #[derive(Default)]
        struct $name { $($field: Vec<$ty>),* }

        impl $name {
            fn params(self) -> Vec<Box<dyn ToSql + Sync + Send>> {
                vec![$(Box::new(self.$field) as Box<dyn ToSql + Sync + Send>),*]
            }
        }
    };
}

columns!(NewExecutions {
    id: String, run: i64, root: String, parent: Option<String>, workflow: String,
    version: String, hash: String, status: String, schedule: Option<String>, created: i64,
    updated: i64, closed: Option<i64>, last_seq: i64, failed_step: Option<String>,
    error_code: Option<String>, delete_after: Option<i64>,
});
columns!(NewOwners { id: String, root: String, node: String });
columns!(Events {
    id: String, run: i64, seq: i64, event_type: String, step: Option<String>, origin: String,
    payload: String, timestamp: i64,
});
columns!(ExecutionUpdates {
    id: String, run: i64, last_seq: i64, proj: bool, status: Option<String>,
    updated: Option<i64>, closed: Option<i64>, delete_after: Option<i64>,
    version: Option<String>, hash: Option<String>, failed_step: Option<String>,
    error_code: Option<String>,
});
columns!(TasksDone { token: String, execution: String });
columns!(CancelUnits { execution: String, unit: String });
columns!(Tasks {
    execution: String,
    run: i64,
    unit: String,
    attempt: i64,
    offer: i64,
    task: String,
    version: String,
    input: String,
    key: String,
    language: Option<String>,
    claimer: Option<String>,
    session: Option<String>,
    worker: Option<String>,
    token: Option<String>,
    // The flow columns (`flow::FlowColumns`), `$15..$29` of `sql::COMMIT_INSERT_TASKS`.
    priority: i64,
    rank_offset: i64,
    limited: bool,
    concurrency_key: Option<String>,
    concurrency_limit: Option<i64>,
    rate_key: Option<String>,
    rate_starts: Option<i64>,
    rate_period_ms: Option<i64>,
    rate_name: Option<String>,
    flow: Option<String>,
    fair_key: Option<String>,
    fair_weight: Option<i64>,
    labels: Option<String>,
    sticky_worker: Option<String>,
    sticky_ms: Option<i64>,
});
columns!(Inbox { execution: String, kind: String, payload: String });
columns!(Timers { execution: String, key: String, run: i64, fire_at: i64, payload: String });
columns!(TimerDeletes { execution: String, key: String });
columns!(Done { seq: i64, result: Option<String> });
columns!(SearchDeletes { execution: String, name: String });
columns!(SearchRows {
    execution: String, name: String, kw: Option<String>, ival: Option<i64>, num: Option<f64>,
    ts: Option<i64>, flag: Option<bool>,
});

/// One segment's rows.
#[derive(Default)]
struct Segment {
    ids: HashSet<String>,
    executions: NewExecutions,
    owners: NewOwners,
    events: Events,
    updates: ExecutionUpdates,
    tasks_done: TasksDone,
    cancel_units: CancelUnits,
    tasks: Tasks,
    inbox: Inbox,
    timers: Timers,
    timer_deletes: TimerDeletes,
    done: Done,
    search_deletes: SearchDeletes,
    search_rows: SearchRows,
}

impl Segment {
    /// The segment's statements, in the order the SQLite backend writes.
    fn into_writes(self, out: &mut Vec<Write>) {
        let mut push = |kind, params| out.push(Write { params, kind });
        if !self.executions.id.is_empty() {
            push(WriteKind::InsertExecutions, self.executions.params());
        }
        if !self.owners.id.is_empty() {
            push(WriteKind::InsertOwners, self.owners.params());
        }
        if !self.events.id.is_empty() {
            push(WriteKind::InsertEvents, self.events.params());
        }
        if !self.updates.id.is_empty() {
            push(WriteKind::UpdateExecutions, self.updates.params());
        }
        // The rows marked done stay done (see `sql::COMMIT_CANCEL_UNITS`).
        let cancel = (!self.cancel_units.unit.is_empty()).then(|| {
            let mut params = self.cancel_units.params();
            params.push(Box::new(self.tasks_done.token.clone()));
            params.push(Box::new(self.tasks_done.execution.clone()));
            params
        });
        if !self.tasks_done.token.is_empty() {
            push(WriteKind::TasksDone, self.tasks_done.params());
        }
        // Cancel first: a redelivery cancels the lost offer and queues a new one.
        if let Some(params) = cancel {
            push(WriteKind::CancelUnits, params);
        }
        if !self.tasks.unit.is_empty() {
            push(WriteKind::InsertTasks, self.tasks.params());
        }
        if !self.inbox.kind.is_empty() {
            push(WriteKind::InsertInbox, self.inbox.params());
        }
        if !self.timers.key.is_empty() {
            push(WriteKind::UpsertTimers, self.timers.params());
        }
        if !self.timer_deletes.key.is_empty() {
            push(WriteKind::DeleteTimers, self.timer_deletes.params());
        }
        if !self.done.seq.is_empty() {
            push(WriteKind::InboxDone, self.done.params());
        }
        if !self.search_deletes.name.is_empty() {
            push(WriteKind::DeleteSearch, self.search_deletes.params());
        }
        if !self.search_rows.name.is_empty() {
            push(WriteKind::InsertSearch, self.search_rows.params());
        }
    }
}

fn opt_i64(v: Option<u64>, what: &str) -> Result<Option<i64>> {
    v.map(|v| to_i64(v, what)).transpose()
}

/// Checks the batches against what was read and plans their writes.
pub(crate) fn plan(batches: &[CommitBatch], mut read: Read) -> Result<Plan> {
    let mut writes = Vec::new();
    let mut outcomes = Vec::with_capacity(batches.len());
    let mut task_keys = Vec::with_capacity(batches.len());
    let mut seg = Segment::default();
    let mut notify: Vec<(&'static str, String)> = Vec::new();
    for batch in batches {
        if seg.ids.contains(&batch.execution_id) {
            std::mem::take(&mut seg).into_writes(&mut writes);
        }
        seg.ids.insert(batch.execution_id.clone());
        let (outcome, keys) = plan_one(batch, &mut read, &mut seg)?;
        outcomes.push(outcome);
        task_keys.push(keys);
        if batch.notifies_change() && !batch.changes_sent {
            // What the commit did, so readers read only when it is their own thing.
            notify.push(("orbit_changes", crate::Change::of_batch(batch).encode()));
        }
        if !batch.inbox_to_insert.is_empty() {
            notify.push(("orbit_inbox", String::new()));
        }
        // Tasks handed off (queued claimed) wake no claimer: the batch itself records their
        // `StepDispatched` (`orbit_owner::handoff`). Queued limited rows say so (`limited`):
        // the listeners then know flow claims have work (`listen.rs`).
        if batch.tasks_to_insert.len() > batch.task_claims.len() {
            notify.push(("orbit_tasks", tasks_payload(batch).to_string()));
        }
        if !batch.timers_to_upsert.is_empty() || !batch.timers_to_delete.is_empty() {
            notify.push(("orbit_timers", String::new()));
        }
    }
    seg.into_writes(&mut writes);
    notify.sort_unstable();
    notify.dedup();
    // One `orbit_tasks` is enough: `limited` wakes the claimers as the empty payload does.
    if notify.contains(&("orbit_tasks", LIMITED.to_string())) {
        notify.retain(|(c, p)| *c != "orbit_tasks" || p == LIMITED);
    }
    if !notify.is_empty() {
        let (channels, payloads): (Vec<String>, Vec<String>) =
            notify.into_iter().map(|(c, p)| (c.to_string(), p)).unzip();
        writes.push(Write {
            params: vec![Box::new(channels), Box::new(payloads)],
            kind: WriteKind::Notify,
        });
    }
    Ok(Plan { writes, outcomes, task_keys })
}

/// The `orbit_tasks` payload of a batch that queues tasks: `limited` when one of the rows
/// it queues (not handed off) is limited, else empty, as before flow control.
fn tasks_payload(batch: &CommitBatch) -> &'static str {
    let queued_limited = batch.tasks_to_insert.iter().any(|t| {
        t.flow.as_ref().is_some_and(orbit_engine::Flow::is_limited)
            && !batch
                .task_claims
                .iter()
                .any(|c| c.unit == t.unit && c.attempt == t.attempt && c.offer == t.offer)
    });
    if queued_limited {
        LIMITED
    } else {
        ""
    }
}

/// Checks one batch (updating `read` with what it does) and adds its rows to `seg`.
fn plan_one(
    batch: &CommitBatch,
    read: &mut Read,
    seg: &mut Segment,
) -> Result<(CommitOutcome, Vec<TaskKey>)> {
    let id = batch.execution_id.as_str();
    let run = i64::from(batch.run);

    if let Some(expected) = batch.expected_epoch {
        match read.owners.get(id) {
            None => {
                return Err(StoreError::Fenced(format!(
                    "execution {id} has no owner; this writer held epoch {expected}"
                )))
            }
            Some(e) if *e == expected => {}
            Some(e) => {
                return Err(StoreError::Fenced(format!(
                    "execution {id} is at epoch {e}; this writer held epoch {expected}"
                )))
            }
        }
    }
    if let Some(row) = &batch.new_execution {
        if row.execution_id != id || row.run != batch.run {
            return Err(StoreError::InvalidArgument(format!(
                "new execution {}/run {} does not match batch {id}/run {}",
                row.execution_id, row.run, batch.run
            )));
        }
        if let Some(seen) = batch.versions_seen {
            if read.definitions.get(&row.workflow).copied().unwrap_or(0) != i64::from(seen) {
                return Err(StoreError::DefinitionChanged(row.workflow.clone()));
            }
        }
        if read.executions.contains_key(id) {
            return Err(StoreError::ExecutionExists(id.to_string()));
        }
        // The row as the batch leaves it: its projection now, its last seq in `plan_events`.
        let p = batch.projection.as_ref();
        let e = &mut seg.executions;
        e.created.push(to_i64(row.created_at_ms, "created_at")?);
        e.updated.push(to_i64(p.map_or(row.updated_at_ms, |p| p.updated_at_ms), "updated_at")?);
        e.closed.push(opt_i64(p.map_or(row.closed_at_ms, |p| p.closed_at_ms), "closed_at")?);
        e.delete_after.push(opt_i64(p.and_then(|p| p.delete_after_ms), "delete_after")?);
        e.failed_step.push(p.map_or(row.failed_step.clone(), |p| p.failed_step.clone()));
        e.error_code.push(p.map_or(row.error_code.clone(), |p| p.error_code.clone()));
        e.status.push(p.map_or(&row.status, |p| &p.status).as_str().to_string());
        e.id.push(id.to_string());
        e.run.push(run);
        e.root.push(row.root_id.clone());
        e.parent.push(row.parent_id.clone());
        e.workflow.push(row.workflow.clone());
        e.version.push(row.version.clone());
        e.hash.push(row.definition_hash.clone());
        e.schedule.push(row.schedule_id.clone());
        read.executions.insert(id.to_string(), (batch.run, 0));
    }
    if let Some(owner) = &batch.new_owner {
        if read.owners.contains_key(id) {
            return Err(StoreError::Fenced(format!("execution {id} already has an owner")));
        }
        seg.owners.id.push(id.to_string());
        seg.owners.root.push(owner.root_id.clone());
        seg.owners.node.push(owner.node_id.clone());
        read.owners.insert(id.to_string(), 1);
    }

    let last_seq = plan_events(batch, read, seg)?;

    for token in &batch.tasks_done {
        seg.tasks_done.token.push(token.clone());
        seg.tasks_done.execution.push(id.to_string());
    }
    for unit in &batch.units_to_cancel {
        seg.cancel_units.execution.push(id.to_string());
        seg.cancel_units.unit.push(unit.clone());
    }
    let mut keys = Vec::with_capacity(batch.tasks_to_insert.len());
    for t in &batch.tasks_to_insert {
        let (attempt, offer) = (i64::from(t.attempt), i64::from(t.offer));
        let s = &mut seg.tasks;
        s.execution.push(id.to_string());
        s.run.push(run);
        s.unit.push(t.unit.clone());
        s.attempt.push(attempt);
        s.offer.push(offer);
        s.task.push(t.task.clone());
        s.version.push(t.task_version.clone());
        s.input.push(t.input.to_string());
        s.key.push(t.idempotency_key.clone());
        s.language.push(t.language.clone());
        let claim = batch
            .task_claims
            .iter()
            .find(|c| c.unit == t.unit && c.attempt == t.attempt && c.offer == t.offer);
        s.claimer.push(claim.map(|c| c.claimer.clone()));
        s.session.push(claim.map(|c| c.session.clone()));
        s.worker.push(claim.map(|c| c.worker_id.clone()));
        s.token.push(claim.map(|c| c.token.clone()));
        let f = crate::flow::FlowColumns::of(t.flow.as_ref())?;
        s.priority.push(f.priority);
        s.rank_offset.push(f.rank_offset);
        s.limited.push(f.limited);
        s.concurrency_key.push(f.concurrency_key);
        s.concurrency_limit.push(f.concurrency_limit);
        s.rate_key.push(f.rate_key);
        s.rate_starts.push(f.rate_starts);
        s.rate_period_ms.push(f.rate_period_ms);
        s.rate_name.push(f.rate_name);
        s.flow.push(f.flow);
        s.fair_key.push(f.fair_key);
        s.fair_weight.push(f.fair_weight);
        s.labels.push(f.labels);
        s.sticky_worker.push(f.sticky_worker);
        s.sticky_ms.push(f.sticky_ms);
        keys.push((id.to_string(), run, t.unit.clone(), attempt, offer));
    }
    for entry in &batch.inbox_to_insert {
        seg.inbox.execution.push(entry.execution_id.clone());
        seg.inbox.kind.push(entry.message.kind().as_str().to_string());
        seg.inbox.payload.push(entry.message.payload_text());
    }

    // Upserting one key twice in a statement is an error: the last write of a key wins, and
    // a key the batch also deletes ends deleted (upserts are written before deletes).
    let mut last_write: HashMap<&str, usize> = HashMap::new();
    for (i, t) in batch.timers_to_upsert.iter().enumerate() {
        last_write.insert(t.key.as_str(), i);
    }
    for key in &batch.timers_to_delete {
        last_write.remove(key.as_str());
    }
    for (i, t) in batch.timers_to_upsert.iter().enumerate() {
        if last_write.get(t.key.as_str()) != Some(&i) {
            continue;
        }
        let s = &mut seg.timers;
        s.fire_at.push(to_i64(t.fire_at_ms, "fire_at")?);
        s.execution.push(id.to_string());
        s.key.push(t.key.clone());
        s.run.push(run);
        s.payload.push(t.payload.to_string());
    }
    for key in &batch.timers_to_delete {
        seg.timer_deletes.execution.push(id.to_string());
        seg.timer_deletes.key.push(key.clone());
    }

    for done in &batch.inbox_done {
        if read.pending.get(&done.seq).map(String::as_str) != Some(id) {
            return Err(StoreError::Conflict(format!(
                "inbox entry {} is not a pending entry of execution {id}",
                done.seq
            )));
        }
        read.pending.remove(&done.seq);
        seg.done.seq.push(to_i64(done.seq, "inbox seq")?);
        seg.done.result.push(done.result.as_ref().map(|r| r.to_json().to_string()));
    }
    if let Some(search) = crate::search::writes_of(batch) {
        for name in search.names {
            seg.search_deletes.execution.push(id.to_string());
            seg.search_deletes.name.push(name);
        }
        let s = &mut seg.search_rows;
        for r in search.rows {
            s.execution.push(id.to_string());
            s.name.push(r.name);
            s.kw.push(r.kw);
            s.ival.push(r.ival);
            s.num.push(r.num);
            s.ts.push(r.ts);
            s.flag.push(r.flag);
        }
    }
    Ok((CommitOutcome { last_seq, task_ids: Vec::new(), claimed: Vec::new() }, keys))
}

/// Checks that the events continue the run's history and plans them with the projection
/// change. Returns the run's last seq afterwards.
fn plan_events(batch: &CommitBatch, read: &mut Read, seg: &mut Segment) -> Result<u64> {
    let id = batch.execution_id.as_str();
    let Some(&(current_run, current_seq)) = read.executions.get(id) else {
        return Err(StoreError::NotFound(format!("execution {id}")));
    };
    let (base, last) = batch.continuation(current_run, current_seq)?;
    for ev in &batch.events {
        let payload = serde_json::to_string(&ev.event)
            .map_err(|e| StoreError::InvalidArgument(format!("event does not serialise: {e}")))?;
        let s = &mut seg.events;
        s.seq.push(to_i64(ev.seq, "seq")?);
        s.timestamp.push(to_i64(ev.timestamp_ms, "timestamp")?);
        s.id.push(id.to_string());
        s.run.push(i64::from(batch.run));
        s.event_type.push(ev.event.type_name().to_string());
        s.step.push(ev.event.step().map(str::to_string));
        s.origin.push(origin_name(ev.origin).to_string());
        s.payload.push(payload);
    }
    let moved = last != base || batch.run != current_run;
    if batch.new_execution.is_some() {
        // Inserted by this segment (`plan_one`), with the projection: never updated after.
        seg.executions.last_seq.push(to_i64(last, "seq")?);
    } else if moved || batch.projection.is_some() || batch.definition.is_some() {
        let p = batch.projection.as_ref();
        let u = &mut seg.updates;
        u.last_seq.push(to_i64(last, "seq")?);
        u.updated.push(p.map(|p| to_i64(p.updated_at_ms, "updated_at")).transpose()?);
        u.closed.push(opt_i64(p.and_then(|p| p.closed_at_ms), "closed_at")?);
        u.delete_after.push(opt_i64(p.and_then(|p| p.delete_after_ms), "delete_after")?);
        u.id.push(id.to_string());
        u.run.push(i64::from(batch.run));
        u.proj.push(p.is_some());
        u.status.push(p.map(|p| p.status.as_str().to_string()));
        let d = batch.definition.as_ref();
        u.version.push(d.map(|d| d.version.clone()));
        u.hash.push(d.map(|d| d.definition_hash.clone()));
        u.failed_step.push(p.and_then(|p| p.failed_step.clone()));
        u.error_code.push(p.and_then(|p| p.error_code.clone()));
    }
    read.executions.insert(id.to_string(), (batch.run, last));
    Ok(last)
}
