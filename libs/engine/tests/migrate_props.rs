//! Property: random small graphs (chains and diamonds of task and compute steps, some
//! fanning out), a random prefix of the run (some ready tasks completed), a random edit of
//! the definition. A plan judged safe migrates, the run then finishes with every task
//! completed (the decider never refuses or spins) and the whole history replays across the
//! migration; a plan judged unsafe names only steps that have units in the run (running or
//! done).

mod common;

use common::*;
use orbit_definition::Definition;
use orbit_engine::command::Command;
use orbit_engine::migrate::plan;
use orbit_engine::replay::replay_defs;
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::unit::UnitKey;
use orbit_engine::{Status, UnitStatus};
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
struct GenStep {
    id: String,
    /// `Some(task)` for a task step, `None` for a compute step.
    task: Option<&'static str>,
    value: u32,
    needs: Vec<String>,
    fan_out: bool,
    renamed_from: Option<String>,
}

fn gen_steps() -> impl Strategy<Value = Vec<GenStep>> {
    let step = (
        prop::bool::weighted(0.8),
        0u32..5,
        prop::collection::vec(any::<bool>(), 6),
        prop::bool::weighted(0.25),
    );
    prop::collection::vec(step, 2..6).prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (task, value, needs, fan_out))| GenStep {
                id: format!("s{i}"),
                task: task.then_some("t"),
                value,
                // Only earlier steps: the graph stays acyclic.
                needs: (0..i).filter(|j| needs[*j]).map(|j| format!("s{j}")).collect(),
                fan_out,
                renamed_from: None,
            })
            .collect()
    })
}

fn render(version: &str, steps: &[GenStep]) -> Definition {
    let mut doc =
        format!("name: p\nversion: \"{version}\"\ntasks: {{ t: {{}}, u: {{}} }}\nsteps:\n");
    for s in steps {
        let mut fields = vec![format!("id: {}", s.id)];
        if let Some(old) = &s.renamed_from {
            fields.push(format!("renamed_from: {old}"));
        }
        match s.task {
            Some(task) => {
                fields.push(format!("task: {task}"));
                fields.push(format!("input: {{ n: {} }}", s.value));
            }
            None => fields.push(format!("compute: {}", s.value)),
        }
        if !s.needs.is_empty() {
            fields.push(format!("needs: [{}]", s.needs.join(", ")));
        }
        if s.fan_out {
            fields.push("for_each: [1, 2]".into());
        }
        doc.push_str(&format!("  - {{ {} }}\n", fields.join(", ")));
    }
    def(&doc)
}

/// An edit of the definition: `(what, which step, a choice)`.
fn mutate(steps: &[GenStep], what: u8, which: usize, pick: usize) -> Vec<GenStep> {
    let mut out = steps.to_vec();
    let i = which % out.len();
    match what % 8 {
        0 => {
            let needs = out
                .iter()
                .enumerate()
                .filter(|(j, _)| (pick >> j) & 1 == 1)
                .map(|(_, s)| s.id.clone());
            out.push(GenStep {
                id: "added".into(),
                task: (!pick.is_multiple_of(3)).then_some("t"),
                value: 9,
                needs: needs.collect(),
                fan_out: false,
                renamed_from: None,
            });
        }
        1 if out.len() > 1 => {
            let gone = out.remove(i).id;
            for s in &mut out {
                s.needs.retain(|n| *n != gone);
            }
        }
        // Renamed, with `renamed_from` or without.
        2 | 3 => {
            let old = out[i].id.clone();
            let new = format!("{old}_v2");
            out[i].id.clone_from(&new);
            if what % 8 == 2 {
                out[i].renamed_from = Some(old.clone());
            }
            for s in &mut out {
                for n in &mut s.needs {
                    if *n == old {
                        n.clone_from(&new);
                    }
                }
            }
        }
        4 => {
            out[i].task = match out[i].task {
                Some("t") if pick.is_multiple_of(2) => Some("u"),
                Some(_) => None,
                None => Some("t"),
            }
        }
        5 => out[i].value += 10,
        6 => {
            let earlier: Vec<String> = out[..i].iter().map(|s| s.id.clone()).collect();
            out[i].needs = earlier
                .into_iter()
                .enumerate()
                .filter(|(j, _)| (pick >> j) & 1 == 1)
                .map(|(_, id)| id)
                .collect();
        }
        _ => out[i].fan_out = !out[i].fan_out,
    }
    out
}

/// Completes the dispatched units, one chosen by each pick, until none is left or the picks
/// run out.
fn complete_some(sim: &mut Sim, picks: &[usize]) {
    for pick in picks {
        let dispatched = dispatched(sim);
        if dispatched.is_empty() {
            return;
        }
        let token = dispatched[pick % dispatched.len()].clone();
        sim.command("x", Command::Complete { token, output: json!({"n": 1}) }).unwrap();
        assert!(sim.run(100), "the simulator came to rest");
    }
}

/// Tokens of the dispatched units, in unit-key order.
fn dispatched(sim: &Sim) -> Vec<String> {
    let state = &exec(sim, "x").state;
    state
        .open_units()
        .filter(|(_, u)| u.status == UnitStatus::Dispatched)
        .filter_map(|(_, u)| u.token.clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn safe_plans_migrate_and_finish_unsafe_ones_name_started_steps(
        steps in gen_steps(),
        prefix in prop::collection::vec(0usize..8, 0..5),
        what in 0u8..8,
        which in 0usize..8,
        pick in 0usize..64,
    ) {
        let v1 = render("1", &steps);
        let v2 = render("2", &mutate(&steps, what, which, pick));
        let mut sim = Sim::new();
        sim.register(v1.clone());
        sim.on_task("t", |_| TaskOutcome::Hang);
        sim.on_task("u", |_| TaskOutcome::Hang);
        sim.start("p", "x", json!({})).unwrap();
        prop_assert!(sim.run(100));
        complete_some(&mut sim, &prefix);
        let e = exec(&sim, "x");
        // A run that already finished is refused before anything is planned (tested apart).
        prop_assume!(!e.state.status().is_closed());
        let p = plan(&v1, &v2, &e.state);
        if p.is_safe() {
            sim.migrate("x", v2.clone()).unwrap_or_else(|err| panic!("{err}\n{p:#?}"));
            prop_assert!(sim.run(100), "{:#?}", p);
            complete_some(&mut sim, &[0; 64]);
            let e = exec(&sim, "x");
            prop_assert_eq!(e.state.status(), Status::Completed, "{:#?}\n{:#?}", p, e.history);
            let defs: BTreeMap<String, Definition> =
                [(v1.hash.clone(), v1), (v2.hash.clone(), v2)].into_iter().collect();
            if let Err(d) = replay_defs(&defs, &e.history, &no_limits()) {
                panic!("replay diverged at {}: {:?} vs {:?}\n{p:#?}", d.seq, d.expected, d.actual);
            }
        } else {
            for c in p.unsafe_changes() {
                let started = e.state.units.keys().filter_map(|k| UnitKey::parse(k)).any(|k| k.step == c.step);
                prop_assert!(started, "unsafe change of a step without units: {:?}\n{:#?}", c, p);
            }
            prop_assert!(sim.migrate("x", v2).is_err());
        }
    }
}
