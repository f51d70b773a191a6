//! Workflow-level concurrency keys (issue 27; docs/flow-control.md, "Workflow
//! concurrency"): before `WorkflowStarted`, a run whose definition declares `concurrency:`
//! asks for a slot of each key with `ConcurrencySlotRequested`, one key at a time in key
//! order (so two runs never each hold a key the other waits for), and waits until the
//! store's grant is recorded as `ConcurrencySlotGranted`. A restored run (reset, fork)
//! asks again in the same way before it goes on, since its copied grants were the source
//! run's; a reset of an execution that still holds its slots is granted them at once
//! (`orbit_store::slots`), a fork or a reset of a closed one waits like a new start. The
//! store decides grants (the
//! slot table is shared by every owner); the decider only asks and waits. A run cancelled
//! while it waits closes at once: it never ran a step, so there is nothing to compensate
//! and no handler runs.

use super::flow::key_text;
use super::Ctx;
use crate::event::{CompensationOutcome, Event, TaskError};
use crate::scope::{self, Site};
use crate::task_code::TaskCode;
use orbit_definition::{OnLimit, Outcome, Template};

/// `None`: the run may start (no keys, or every slot held). `Some(events)`: what the run
/// does first instead (ask for the next key, close after a cancel), or nothing while it
/// waits for a grant.
pub(crate) fn gate(ctx: &Ctx<'_>) -> Option<Vec<Event>> {
    if ctx.def.concurrency.is_empty() {
        return None;
    }
    let state = ctx.state;
    if let Some(w) = &state.winding {
        let compensation = CompensationOutcome::None;
        return Some(vec![match w.outcome {
            Outcome::Cancel => {
                Event::WorkflowCancelled { reason: w.error.message.clone(), compensation }
            }
            Outcome::Failure => Event::WorkflowFailed { error: w.error.clone(), compensation },
            Outcome::Timeout => Event::WorkflowTimedOut { compensation },
        }]);
    }
    let wanted = match keys(ctx) {
        Ok(keys) => keys,
        Err(error) => {
            let compensation = CompensationOutcome::None;
            return Some(vec![Event::WorkflowFailed { error: *error, compensation }]);
        }
    };
    for (key, limit, on_limit) in wanted {
        match state.slots.get(&key) {
            Some(true) => {}
            Some(false) => return Some(Vec::new()),
            None => {
                let on_limit = on_limit.as_str().to_string();
                return Some(vec![Event::ConcurrencySlotRequested { key, limit, on_limit }]);
            }
        }
    }
    None
}

/// The run's keys, scoped (`<workflow>/<value>`), in key order, each once (the first
/// declaration of a key wins).
pub(crate) fn keys(ctx: &Ctx<'_>) -> Result<Vec<(String, u32, OnLimit)>, Box<TaskError>> {
    let templates: Vec<&Template> = ctx.def.concurrency.iter().map(|c| &c.key).collect();
    let scope = scope::build(ctx.def, ctx.state, &Site::main(), &templates);
    let mut out: Vec<(String, u32, OnLimit)> = Vec::new();
    for (i, c) in ctx.def.concurrency.iter().enumerate() {
        let field = format!("concurrency[{i}].key");
        let value = c
            .key
            .render(&scope)
            .map_err(|e| TaskError::fatal(e.code(), format!("workflow {}", e.in_field(&field))))?;
        let text = key_text(&value)
            .map_err(|m| TaskCode::ExpressionError.fatal(format!("workflow {field}: {m}")))?;
        let key = format!("{}/{text}", ctx.def.name);
        if !out.iter().any(|(k, _, _)| *k == key) {
            out.push((key, c.limit, c.on_limit));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::decide::advance;
    use crate::event::{Event, HistoryEvent, Origin};
    use crate::state::State;
    use orbit_definition::Limits;
    use serde_json::json;

    fn def() -> orbit_definition::Definition {
        orbit_definition::parse(
            "name: billing\nversion: \"1\"\nconcurrency:\n  - key: ${{ input.account }}\n    limit: 1\n  - key: all\n    limit: 5\n    on_limit: cancel_newest\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n",
        )
        .unwrap()
    }

    fn created() -> State {
        let start = crate::command::start(
            &def(),
            "e1",
            json!({"account": "acme"}),
            None,
            None,
            1,
            &Limits::default(),
            None,
        )
        .unwrap();
        let mut state = State::default();
        state.apply(&HistoryEvent {
            seq: 1,
            timestamp_ms: 1,
            origin: Origin::Recorded,
            event: start,
        });
        state
    }

    fn grant(state: &mut State, key: &str) {
        let event = Event::ConcurrencySlotGranted { key: key.into() };
        let seq = state.last_seq + 1;
        state.apply(&HistoryEvent { seq, timestamp_ms: 2, origin: Origin::Recorded, event });
    }

    fn types(events: &[HistoryEvent]) -> Vec<&'static str> {
        events.iter().map(|e| e.event.type_name()).collect()
    }

    #[test]
    fn a_waiting_run_schedules_nothing_and_the_grants_start_it() {
        let (def, mut state) = (def(), created());
        let first = advance(&def, &mut state, 10, &Limits::default());
        assert_eq!(
            first.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
            vec![Event::ConcurrencySlotRequested {
                key: "billing/acme".into(),
                limit: 1,
                on_limit: "queue".into()
            }],
            "keys in key order, one at a time; nothing else"
        );
        assert!(advance(&def, &mut state, 20, &Limits::default()).is_empty(), "waits");
        grant(&mut state, "billing/acme");
        let second = advance(&def, &mut state, 30, &Limits::default());
        assert_eq!(types(&second), ["ConcurrencySlotRequested"]);
        assert!(matches!(&second[0].event,
            Event::ConcurrencySlotRequested { key, on_limit, .. }
                if key == "billing/all" && on_limit == "cancel_newest"));
        grant(&mut state, "billing/all");
        let started = advance(&def, &mut state, 40, &Limits::default());
        assert_eq!(types(&started), ["WorkflowStarted", "StepScheduled"]);
    }

    #[test]
    fn a_run_cancelled_while_waiting_closes_without_a_step() {
        let (def, mut state) = (def(), created());
        let _ = advance(&def, &mut state, 10, &Limits::default());
        let event = Event::CancelRequested { reason: "concurrency key full".into() };
        let seq = state.last_seq + 1;
        state.apply(&HistoryEvent { seq, timestamp_ms: 11, origin: Origin::Recorded, event });
        let closed = advance(&def, &mut state, 12, &Limits::default());
        assert_eq!(types(&closed), ["WorkflowCancelled"]);
        assert!(state.units.is_empty());
    }

    #[test]
    fn a_restored_run_asks_for_its_slots_again_before_it_goes_on() {
        let (def, mut state) = (def(), created());
        let _ = advance(&def, &mut state, 10, &Limits::default());
        grant(&mut state, "billing/acme");
        let _ = advance(&def, &mut state, 20, &Limits::default());
        grant(&mut state, "billing/all");
        let started = advance(&def, &mut state, 30, &Limits::default());
        assert_eq!(types(&started), ["WorkflowStarted", "StepScheduled"]);
        // Reset (or fork) back before `a`: the copied grants were the source run's.
        let event = Event::RunRestored {
            source_execution_id: "e1".into(),
            source_run: 1,
            through_seq: state.last_seq - 1,
            forgotten: vec!["a".into()],
            redeliver: vec![],
            reason: "reset".into(),
        };
        let seq = state.last_seq + 1;
        state.apply(&HistoryEvent { seq, timestamp_ms: 40, origin: Origin::Recorded, event });
        let asked = advance(&def, &mut state, 50, &Limits::default());
        assert_eq!(
            asked.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
            vec![Event::ConcurrencySlotRequested {
                key: "billing/acme".into(),
                limit: 1,
                on_limit: "queue".into()
            }],
            "nothing runs again before the slot is held"
        );
        assert!(advance(&def, &mut state, 60, &Limits::default()).is_empty(), "waits");
        grant(&mut state, "billing/acme");
        assert_eq!(
            types(&advance(&def, &mut state, 70, &Limits::default())),
            ["ConcurrencySlotRequested"]
        );
        grant(&mut state, "billing/all");
        let again = advance(&def, &mut state, 80, &Limits::default());
        assert_eq!(types(&again), ["StepScheduled"], "the forgotten step runs again");
    }

    #[test]
    fn replay_decides_the_same_events() {
        let (def, mut state) = (def(), created());
        let mut history: Vec<HistoryEvent> = vec![HistoryEvent {
            seq: 1,
            timestamp_ms: 1,
            origin: Origin::Recorded,
            event: created_event(),
        }];
        history.extend(advance(&def, &mut state, 10, &Limits::default()));
        grant(&mut state, "billing/acme");
        history.push(HistoryEvent {
            seq: state.last_seq,
            timestamp_ms: 2,
            origin: Origin::Recorded,
            event: Event::ConcurrencySlotGranted { key: "billing/acme".into() },
        });
        history.extend(advance(&def, &mut state, 30, &Limits::default()));
        crate::replay::replay(&def, &history, &Limits::default())
            .expect("replay decides the same events");
    }

    fn created_event() -> Event {
        crate::command::start(
            &def(),
            "e1",
            json!({"account": "acme"}),
            None,
            None,
            1,
            &Limits::default(),
            None,
        )
        .unwrap()
    }
}
