//! Shared helpers of the conformance suite: the [`Backend`] trait and batch builders.

use orbit_engine::{Event, HistoryEvent, Origin};
use orbit_store::{CommitBatch, ExecutionRow, NewOwner, NewTask, NewTimer, Store};
use serde_json::json;
use std::sync::Arc;

/// A place a store lives (a file, a database schema); `open` may be called repeatedly and
/// must return a migrated store over the same data each time.
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// Open a migrated store on this backend's location.
    async fn open(&self) -> Arc<dyn Store>;

    /// Runs `sql` (portable to both databases) on a connection of its own, beside the
    /// store: how a test sets what no API sets (a row queued minutes ago).
    async fn execute(&self, sql: &str);
}

/// A history event at `seq`.
pub fn ev(seq: u64, event: Event) -> HistoryEvent {
    HistoryEvent { seq, timestamp_ms: 1_000 + seq, origin: Origin::Decided, event }
}

/// The `WorkflowCreated` event of `id`.
pub fn created(id: &str, run: u32) -> Event {
    Event::WorkflowCreated {
        execution_id: id.into(),
        workflow: "order".into(),
        version: "v1".into(),
        definition_hash: "h1".into(),
        input: json!({"n": 1}),
        parent: None,
        schedule_id: None,
        run,
        update_ids: vec![],
        priority: None,
        memo: None,
        resume: None,
    }
}

/// A `StepScheduled` event.
pub fn scheduled(step: &str) -> Event {
    Event::StepScheduled {
        step: step.into(),
        attempt: 1,
        input: json!({}),
        idempotency_key: format!("k-{step}"),
        redelivery: false,
        flow: None,
    }
}

/// The projection row of a new execution.
pub fn execution_row(id: &str, created_at_ms: u64) -> ExecutionRow {
    ExecutionRow {
        execution_id: id.into(),
        run: 1,
        root_id: id.into(),
        parent_id: None,
        workflow: "order".into(),
        version: "v1".into(),
        definition_hash: "h1".into(),
        status: orbit_engine::Status::Running,
        schedule_id: None,
        created_at_ms,
        updated_at_ms: created_at_ms,
        closed_at_ms: None,
        last_seq: 0,
        failed_step: None,
        error_code: None,
    }
}

/// A task offer for `step` of task `task`.
pub fn task(step: &str, task: &str) -> NewTask {
    NewTask {
        unit: step.into(),
        attempt: 1,
        offer: 1,
        task: task.into(),
        task_version: "1".into(),
        language: None,
        input: json!({"step": step}),
        idempotency_key: format!("idem-{step}"),
        flow: None,
    }
}

/// `task(step, name)` offered with `flow`.
pub fn flow_task(step: &str, name: &str, flow: orbit_engine::Flow) -> NewTask {
    NewTask { flow: Some(flow), ..task(step, name) }
}

/// A timer.
pub fn timer(key: &str, fire_at_ms: u64) -> NewTimer {
    NewTimer { key: key.into(), fire_at_ms, payload: json!({"key": key}) }
}

/// The start of an execution owned by `node` (epoch 1): created + started events.
pub fn start_batch(id: &str, node: &str) -> CommitBatch {
    CommitBatch {
        execution_id: id.into(),
        run: 1,
        new_execution: Some(execution_row(id, 1_000)),
        new_owner: Some(NewOwner { root_id: id.into(), node_id: node.into() }),
        events: vec![ev(1, created(id, 1)), ev(2, Event::WorkflowStarted {})],
        ..CommitBatch::default()
    }
}

/// Start an execution and return nothing; panics on failure.
pub async fn start(store: &dyn Store, id: &str) {
    store.commit(start_batch(id, "node-a")).await.expect("start execution");
}

/// A signal entry (the store does not read payloads; the owner would).
pub fn signal(name: &str) -> orbit_store::InboxMessage {
    orbit_store::InboxMessage::Signal(orbit_store::inbox::Signal {
        name: name.into(),
        payload: json!({}),
        request_id: None,
    })
}

/// A cancel entry.
pub fn cancel(reason: &str) -> orbit_store::InboxMessage {
    orbit_store::InboxMessage::Cancel(orbit_store::inbox::Cancel {
        reason: reason.into(),
        request_id: None,
    })
}

/// A worker's completion (the store writes the token it is given).
pub fn complete(output: serde_json::Value) -> orbit_store::InboxMessage {
    orbit_store::InboxMessage::Complete(orbit_store::inbox::Complete {
        token: String::new(),
        output,
    })
}

/// An operator's resume.
pub fn resume() -> orbit_store::InboxMessage {
    orbit_store::InboxMessage::Resume(orbit_store::inbox::Resume {})
}

/// An applied reply.
pub fn applied(seq: u64) -> orbit_store::InboxReply {
    orbit_store::InboxReply::Applied { seq, run: 1, applied: true }
}

/// Every entry decodes with the inbox protocol, as the owner will read it: the entries the
/// store writes itself (claims, timers, released claims) included.
pub fn decoded(entries: &[orbit_store::InboxEntry]) -> Vec<orbit_store::InboxMessage> {
    entries
        .iter()
        .map(|e| {
            orbit_store::InboxMessage::decode(&e.kind, e.token.as_deref(), &e.payload)
                .unwrap_or_else(|err| panic!("entry {} does not decode: {err}", e.seq))
        })
        .collect()
}
