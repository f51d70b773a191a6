//! Migrating a running execution to another version of its workflow (`migrate` inbox
//! entries, an operator action applied like `terminate`, see `control`).
//!
//! The owner — the only writer — loads the target version (by the execution's workflow and
//! the requested version) and, in the execution's engine job, asks the engine for the
//! checked diff against the state it holds (`orbit_engine::migrate`). An unsafe diff is
//! refused with `MIGRATION_UNSAFE` and nothing is written. A safe one records one
//! `DefinitionMigrated` (running units of removed steps cancelled with it), then the
//! decider runs once with the new version (an added step whose needs are met is scheduled
//! in the same commit), and the commit moves the projection's `version` and
//! `definition_hash` (`CommitBatch::definition`), so every later reader — a rebuild, a
//! takeover, a frontend describing it or delivering its tasks — sees the new version. The
//! execution leaves memory after the commit and is rebuilt from the store at its next
//! event. Migrating to the version it already runs records nothing.

use crate::batches::batches_for;
use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::hot::{definition, hot};
use crate::isolate;
use crate::operator::{committed, Woken};
use crate::work::Work;
use orbit_engine::ErrorCode;
use orbit_store::{DefinitionChange, InboxDone, InboxEntry, InboxReply};
use serde_json::Value;

/// Applies one `migrate` entry. `Ok(None)`: the commit recorded the reply itself;
/// `Ok(Some(reply))`: nothing was written, the caller records the reply.
pub(crate) async fn migrate(
    inner: &Inner,
    core: &mut Core,
    entry: &InboxEntry,
    to_version: &str,
    reason: &str,
    now: u64,
) -> Result<Option<InboxReply>, OwnerError> {
    let id = entry.execution_id.clone();
    let h = hot(inner, core, &id).await?.clone();
    let to = definition(inner, core, &h.def.name, Some(to_version)).await?;
    let limits = inner.cfg.limits.clone();
    let node_id = inner.cfg.node_id.clone();
    let retention_ms = inner.cfg.retention_ms;
    let caps = inner.cfg.capabilities;
    let (entry_seq, job_id) = (entry.seq, id.clone());
    let job: isolate::Job<_> = Box::new(move || {
        let mut w = Work::new(h, caps);
        let from = w.hot.def.clone();
        let (from_version, to_version) = (from.version.clone(), to.version.clone());
        let (plan, events) = match orbit_engine::migrate::migrate(&from, &to, &w.hot.state) {
            Ok(done) => done,
            Err((e, _)) => return (w, Err(e)),
        };
        let plan = serde_json::to_value(&plan).unwrap_or(Value::Null);
        let run = w.hot.state.run;
        if events.is_empty() {
            let reply = InboxReply::Migrated { seq: 0, run, from_version, to_version, plan };
            return (w, Ok(Migrated::Nothing(reply)));
        }
        let mut seq = 0;
        for e in events {
            seq = w.record(e, now);
        }
        w.hot.def = to.clone();
        let reply = InboxReply::Migrated { seq, run, from_version, to_version, plan };
        w.inbox_done.push(InboxDone { seq: entry_seq, result: Some(reply) });
        let runs = w.settle(now, &limits);
        let (mut batches, children, tasks, timers) =
            batches_for(&node_id, retention_ms, &job_id, &mut w, runs, now);
        let change =
            DefinitionChange { version: to.version.clone(), definition_hash: to.hash.clone() };
        if let Some(b) = batches.iter_mut().find(|b| b.run == run) {
            b.definition = Some(change);
        }
        (w, Ok(Migrated::Committing { batches, children, tasks, timers }))
    });
    let mut results = isolate::run(vec![(id.clone(), job)]).await?;
    let (_, outcome) =
        results.pop().ok_or_else(|| OwnerError::unavailable("no migrate outcome"))?;
    let (w, migrated) = outcome.map_err(|m| {
        OwnerError::new(ErrorCode::StorageError, format!("migrating `{id}` panicked: {m}"))
    })?;
    let (batches, children, tasks, timers) = match migrated {
        Err(refused) => return Err(OwnerError::new(refused.code, refused.message)),
        Ok(Migrated::Nothing(reply)) => return Ok(Some(reply)),
        Ok(Migrated::Committing { batches, children, tasks, timers }) => {
            (batches, children, tasks, timers)
        }
    };
    inner.store.commit_all(batches).await?;
    // Rebuilt from the store (its new version and hash) at its next event.
    committed(inner, core, &id, &w, Woken { tasks, timers, children });
    orbit_metrics::get().executions_migrated.with_label_values(&[w.hot.def.name.as_str()]).inc();
    tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(&id), to_version = %w.hot.def.version, reason = %reason, "migrated the execution to another version by an operator's request");
    Ok(None)
}

/// What the engine job of a migration produced.
enum Migrated {
    /// Nothing to record (it already runs that version): the reply.
    Nothing(InboxReply),
    /// The batches to commit, with what they start, queue and time.
    Committing {
        batches: Vec<orbit_store::CommitBatch>,
        children: Vec<crate::effects::ChildStart>,
        tasks: bool,
        timers: bool,
    },
}
