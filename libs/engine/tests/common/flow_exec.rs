//! One execution driven by hand through the decider (`record`, `settle`, `accept`): the
//! flow-control tests read what each attempt recorded and offered.

use super::{def, types};
use orbit_definition::Limits;
use orbit_engine::effects::{Capabilities, Effect, TaskOffer};
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::flow::Flow;
use orbit_engine::replay::replay;
use orbit_engine::run::{record, settle, Pass};
use orbit_engine::{accept, start, Command, State, TaskError};
use serde_json::Value;

const NOW: u64 = 1_700_000_000_000;

/// One execution driven by hand: every event and every offer so far.
pub struct Exec {
    pub def: orbit_definition::Definition,
    pub state: State,
    pub history: Vec<HistoryEvent>,
    pub offers: Vec<TaskOffer>,
    pub now: u64,
}

impl Exec {
    pub fn begin(yaml: &str, input: Value, priority: Option<u8>) -> Exec {
        let def = def(yaml);
        let created = start(&def, "x", input, None, None, 1, &Limits::default(), priority)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut exec = Exec {
            def,
            state: State::default(),
            history: Vec::new(),
            offers: Vec::new(),
            now: NOW,
        };
        exec.settle(vec![created]);
        exec
    }

    /// Records `events` and decides to the fixpoint.
    pub fn settle(&mut self, events: Vec<Event>) {
        let mut recorded = Vec::new();
        for e in events {
            record(&mut self.state, &mut recorded, e, self.now);
        }
        let limits = Limits::default();
        let pass = Pass { now: self.now, limits: &limits, caps: Capabilities::default() };
        for run in settle(&self.def, &mut self.state, recorded, None, &pass) {
            self.history.extend(run.events);
            self.offers.extend(run.effects.into_iter().filter_map(|fx| match fx {
                Effect::OfferTask(o) => Some(o),
                _ => None,
            }));
        }
    }

    pub fn command(&mut self, command: Command) {
        let events = accept(&self.def, &self.state, command, self.now, &Limits::default())
            .unwrap_or_else(|e| panic!("{e}"));
        self.settle(events);
    }

    /// Lets `ms` pass and decides (retries due, ...).
    pub fn wait(&mut self, ms: u64) {
        self.now += ms;
        self.settle(Vec::new());
    }

    pub fn dispatch(&mut self, unit: &str, token: &str) {
        self.command(Command::Dispatched {
            step: unit.into(),
            token: token.into(),
            worker_id: "w".into(),
            session: "s".into(),
        });
    }

    /// Every `StepScheduled` of `unit`: (attempt, redelivery, flow).
    pub fn scheduled(&self, unit: &str) -> Vec<(u32, bool, Option<Flow>)> {
        self.history
            .iter()
            .filter_map(|h| match &h.event {
                Event::StepScheduled { step, attempt, redelivery, flow, .. } if step == unit => {
                    Some((*attempt, *redelivery, flow.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// The flow of `unit`'s first `StepScheduled`.
    pub fn flow(&self, unit: &str) -> Option<Flow> {
        let all = self.scheduled(unit);
        assert!(!all.is_empty(), "{unit} was never scheduled: {:?}", types(&self.history));
        all[0].2.clone()
    }

    /// The `StepFailed` error of `unit`.
    pub fn failure(&self, unit: &str) -> TaskError {
        self.history
            .iter()
            .find_map(|h| match &h.event {
                Event::StepFailed { step, error } if step == unit => Some(error.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{unit} did not fail: {:?}", types(&self.history)))
    }

    /// Every offer's flow equals the flow its attempt recorded.
    pub fn assert_offers_carry_the_recorded_flow(&self) {
        assert!(!self.offers.is_empty());
        for offer in &self.offers {
            let recorded = self
                .scheduled(&offer.unit)
                .into_iter()
                .filter(|(a, _, _)| *a == offer.attempt)
                .map(|(_, _, f)| f)
                .next_back()
                .expect("an offer of a scheduled attempt");
            assert_eq!(offer.flow, recorded, "offer of {} #{}", offer.unit, offer.attempt);
        }
        replay(&self.def, &self.history, &Limits::default())
            .unwrap_or_else(|d| panic!("replay diverged at {}", d.seq));
    }
}
