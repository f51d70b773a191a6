//! Helpers shared by the engine's integration tests.
#![allow(dead_code, missing_docs)]

pub mod flow_exec;
pub mod migrating;

use orbit_definition::Definition;
use orbit_definition::Limits;
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::replay::replay;
use orbit_engine::sim::{Sim, SimExecution};

pub fn def(yaml: &str) -> Definition {
    orbit_definition::parse(yaml).unwrap_or_else(|e| panic!("definition does not parse:\n{e}"))
}

pub fn types(history: &[HistoryEvent]) -> Vec<&'static str> {
    history.iter().map(|h| h.event.type_name()).collect()
}

pub fn events_of<'a>(history: &'a [HistoryEvent], name: &str) -> Vec<&'a Event> {
    history.iter().filter(|h| h.event.type_name() == name).map(|h| &h.event).collect()
}

pub fn exec<'a>(sim: &'a Sim, id: &str) -> &'a SimExecution {
    sim.execution(id).unwrap_or_else(|| panic!("no execution {id}"))
}

/// Every run of every execution passes the replay check.
pub fn assert_replays(sim: &Sim) {
    for (id, e) in sim.executions() {
        for run in e.archived.iter().chain(std::iter::once(&e.history)) {
            if let Err(d) = replay(&e.def, run, &sim.limits) {
                panic!(
                    "{id}: replay diverged at seq {}: expected {:?}, actual {:?}",
                    d.seq, d.expected, d.actual
                );
            }
        }
    }
}

pub fn no_limits() -> Limits {
    Limits::default()
}
