//! `Replay`: re-runs a stored history through this server's decider, with each definition
//! it ran — the one it was created with, then each one a `DefinitionMigrated` moved it to —
//! parsed afresh from its registered document.

use crate::error::{err, ApiResult};
use crate::workflow::reads::{execution, resolve_run};
use crate::Shared;
use orbit_api::v1::{ReplayDivergence, ReplayRequest, ReplayResponse};
use orbit_definition::{Definition, Limits};
use orbit_engine::replay::Divergence;
use orbit_engine::{Event, HistoryEvent, Origin};
use orbit_server_kit::ErrorCode;
use std::collections::BTreeMap;

pub(super) async fn replay(shared: &Shared, req: ReplayRequest) -> ApiResult<ReplayResponse> {
    let id = orbit_server_kit::validate::id("execution_id", &req.execution_id)?;
    let row = execution(shared, id).await?;
    let run = resolve_run(&row, req.run)?;
    let history = shared.store.load_history(id, run).await?;
    let mut defs = BTreeMap::new();
    for (version, hash) in versions(&history, &row.version) {
        defs.insert(hash, parsed(shared, &row.workflow, &version).await?);
    }
    Ok(match orbit_engine::replay::replay_defs(&defs, &history, &Limits::default()) {
        Ok(()) => {
            ReplayResponse { ok: true, events_checked: history.len() as u64, divergence: None, run }
        }
        Err(d) => ReplayResponse {
            ok: false,
            events_checked: history.iter().filter(|e| e.seq < d.seq).count() as u64,
            divergence: Some(divergence(&history, run, d)),
            run,
        },
    })
}

/// The (version, recorded hash) of every definition the run ran, in order: its creation's,
/// then each migration's target. A history without a creation event (none is stored that
/// way) is replayed against `latest`.
fn versions(history: &[HistoryEvent], latest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in history {
        match &e.event {
            Event::WorkflowCreated { version, definition_hash, .. } => {
                out.push((version.clone(), definition_hash.clone()));
            }
            Event::DefinitionMigrated { to_version, to_hash, .. } => {
                out.push((to_version.clone(), to_hash.clone()));
            }
            _ => {}
        }
    }
    if out.is_empty() {
        out.push((latest.to_string(), String::new()));
    }
    out
}

/// A registered version parsed afresh from its document.
async fn parsed(shared: &Shared, workflow: &str, version: &str) -> ApiResult<Definition> {
    let found = shared.store.get_definition(workflow, Some(version)).await;
    let stored = found?.ok_or_else(|| {
        err(
            ErrorCode::WorkflowNotFound,
            format!("workflow `{workflow}` version `{version}` is not registered"),
        )
    })?;
    orbit_definition::parse_stored(&stored.document).map_err(|e| {
        err(
            ErrorCode::InvalidDefinition,
            format!("workflow `{workflow}` version `{version}` no longer parses: {e}"),
        )
    })
}

/// The wire form of a divergence: the decider's event and the recorded one at `seq`.
fn divergence(history: &[HistoryEvent], run: u32, d: Divergence) -> ReplayDivergence {
    let recorded = history.iter().find(|e| e.seq == d.seq);
    // The decider's event would carry the timestamp of the position it takes.
    let timestamp_ms = recorded.or(history.last()).map_or(0, |e| e.timestamp_ms);
    let expected = d.expected.map(|event| HistoryEvent {
        seq: d.seq,
        timestamp_ms,
        origin: Origin::Decided,
        event: *event,
    });
    let actual = d.actual.map(|event| match recorded {
        Some(r) => HistoryEvent { event: *event, ..r.clone() },
        None => HistoryEvent { seq: d.seq, timestamp_ms, origin: Origin::Decided, event: *event },
    });
    let message = match (&expected, &actual) {
        (Some(e), Some(a)) => format!(
            "at seq {}: the decider produces `{}` where history records `{}`",
            d.seq,
            e.event.type_name(),
            a.event.type_name()
        ),
        (Some(e), None) => format!(
            "at seq {}: the decider produces `{}` where history ends",
            d.seq,
            e.event.type_name()
        ),
        (None, Some(a)) => format!(
            "at seq {}: history records `{}` where the decider produces nothing",
            d.seq,
            a.event.type_name()
        ),
        (None, None) => format!("at seq {}: replay diverged", d.seq),
    };
    ReplayDivergence {
        seq: d.seq,
        expected: expected.map(|e| orbit_wire::history_event(&e, run)),
        actual: actual.map(|a| orbit_wire::history_event(&a, run)),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divergence_carries_both_events_at_its_seq() {
        let recorded = HistoryEvent {
            seq: 2,
            timestamp_ms: 5_000,
            origin: Origin::Decided,
            event: Event::WorkflowStarted {},
        };
        let d = Divergence {
            seq: 2,
            expected: None,
            actual: Some(Box::new(Event::WorkflowStarted {})),
        };
        let wire = divergence(std::slice::from_ref(&recorded), 3, d);
        assert_eq!(wire.seq, 2);
        assert!(wire.expected.is_none());
        let actual = wire.actual.unwrap();
        assert_eq!((actual.seq, actual.run, actual.event_type.as_str()), (2, 3, "WorkflowStarted"));
        assert!(wire.message.contains("decider produces nothing"), "{}", wire.message);

        let ends = Divergence {
            seq: 3,
            expected: Some(Box::new(Event::WorkflowStarted {})),
            actual: None,
        };
        let wire = divergence(&[recorded], 1, ends);
        assert_eq!(wire.expected.unwrap().seq, 3);
        assert!(wire.actual.is_none());
        assert!(wire.message.contains("history ends"), "{}", wire.message);
    }
}
