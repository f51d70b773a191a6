//! Worker results handed straight to the owner (`OwnerService.ReportResult`, issue 14):
//! the step's result and the events it causes commit in ONE transaction, instead of the
//! frontend committing an inbox entry that the owner then reads and commits again.
//!
//! The direct route only takes the plain case: the execution is held in memory (not in
//! recovery, not touched by an operator entry in the same pass), the token is the attempt
//! in flight of one of its units, dispatched to the worker that reports it, and the engine
//! accepts the result without calling it stale. Everything else answers "not recorded"
//! with nothing written, and the frontend writes the result to the inbox — the durable
//! route, which keeps every other rule (stale results, refusals, `ALREADY_REPORTED`) as it
//! was. Fencing is the commit's: a handed result is committed under the epoch this owner
//! holds, or not at all.
//!
//! Nothing is applied twice: the owner's state is the judge. Once a result is committed
//! the unit's token is no longer in flight, so the same result handed again (a worker that
//! missed its ack) is refused here and goes to the inbox, where the engine records it as
//! stale, as before.

use crate::context::Inner;
use crate::requests::Handed;
use crate::work::Work;
use orbit_engine::event::Event;
use orbit_engine::{accept, Command};
use orbit_store::InboxMessage;
use std::collections::BTreeMap;
use tokio::sync::oneshot;

pub(crate) use crate::requests::Report;

/// Takes the results handed since the last pass.
pub(crate) fn take(inner: &Inner) -> Vec<Handed> {
    inner.handed.lock().map(|mut h| std::mem::take(&mut *h)).unwrap_or_default()
}

/// Whether every handed result is for the attempt in flight of a unit of an execution held
/// in memory, dispatched to the worker that reports it (what [`apply`] takes); one that is
/// not may wait for its claim's `dispatched` entry, so the pass reads the inbox.
pub(crate) fn all_in_flight(core: &crate::context::Core, handed: &[Handed]) -> bool {
    handed.iter().all(|h| {
        let token = match &h.report.message {
            InboxMessage::Complete(c) => &c.token,
            InboxMessage::Fail(f) => &f.token,
            _ => return true,
        };
        core.hot
            .get(&h.execution_id)
            .is_some_and(|hot| in_flight(&hot.state, token, &h.report.worker_id).is_some())
    })
}

/// The unit whose attempt in flight `token` is, dispatched to `worker_id`.
fn in_flight(state: &orbit_engine::State, token: &str, worker_id: &str) -> Option<String> {
    let unit = state.tokens.get(token)?;
    state
        .units
        .get(unit)
        .filter(|u| u.token.as_deref() == Some(token) && u.worker_id.as_deref() == Some(worker_id))
        .map(|_| unit.clone())
}

/// Applies one handed result to an execution's work inside its engine job; `true` when it
/// was recorded (its token's row is then marked done by the commit).
pub(crate) fn apply(
    w: &mut Work,
    report: &Report,
    now: u64,
    limits: &orbit_definition::Limits,
) -> bool {
    let success = matches!(report.message, InboxMessage::Complete(_));
    let (token, command) = match &report.message {
        InboxMessage::Complete(c) => (
            c.token.clone(),
            Command::Complete { token: c.token.clone(), output: c.output.clone() },
        ),
        InboxMessage::Fail(f) => {
            (f.token.clone(), Command::Fail { token: f.token.clone(), error: f.error.clone() })
        }
        _ => return false,
    };
    let Some(unit) = in_flight(&w.hot.state, &token, &report.worker_id) else { return false };
    match accept(&w.hot.def, &w.hot.state, command, now, limits) {
        Ok(events) if !events.iter().any(|e| matches!(e, Event::StaleResultIgnored { .. })) => {
            let succeeded = success
                && events
                    .iter()
                    .any(|e| matches!(e, Event::StepSucceeded { step, .. } if *step == unit));
            for e in events {
                w.record(e, now);
            }
            w.tasks_done.push(token);
            if succeeded {
                w.settled_units.push(unit);
            }
            true
        }
        _ => false,
    }
}

/// Answers every handed result: `recorded` holds, per execution, what its job said (absent
/// when the job panicked); `committed` is whether the commit went through.
pub(crate) fn answer(
    replies: BTreeMap<String, Vec<oneshot::Sender<bool>>>,
    recorded: &BTreeMap<String, Vec<bool>>,
    committed: bool,
) {
    for (id, txs) in replies {
        let flags = recorded.get(&id);
        for (i, tx) in txs.into_iter().enumerate() {
            let ok = committed && flags.and_then(|f| f.get(i)).copied().unwrap_or(false);
            let _ = tx.send(ok);
        }
    }
}

/// Refuses results the pass does not take (the frontend uses the inbox instead).
pub(crate) fn refuse(handed: Vec<Handed>) {
    for h in handed {
        let _ = h.reply.send(false);
    }
}
