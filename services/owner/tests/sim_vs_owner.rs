//! The simulator and the served owner agree: every example in `examples/definitions/` and
//! a few hundred seeded random definitions (task steps, `needs`, `when`, `for_each`,
//! parallel branches, retries with backoff, attempt and heartbeat timeouts, sleeps,
//! `until`, `await` with signals sent by the driver, `continue_on_failure`, groups,
//! switches, loops (`for_each` over a group, `repeat`), `on_failure` and races, `on_signal`
//! and `on.failure` handlers, children, continue-as-new (a step's, and a long repeat's near
//! the history limit), compensation, workflow timeouts,
//! cancels, `http` steps) run through
//! `orbit_engine::sim::Sim` and through an `Owner` on SQLite driven with the same manual
//! clock, the same scripted worker answers and the same signals, and must leave identical
//! histories (see `simprop` for what is compared).
//!
//! `ORBIT_PROP_CASES` sets how many generated cases run (default 300), `ORBIT_PROP_SEED`
//! the first seed (default 1); `ORBIT_PROP_HTTP=0` leaves out cases with `http` steps
//! (a diagnostic: the default includes them).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod simprop;

use serde_json::{json, Value};
use simprop::gen::{self, Action, Case, Mode};
use simprop::{diff, owner_side, render, signature, sim_side};
use std::collections::BTreeMap;

/// The simulator's default worker latency; the owner's driver answers after the same.
const LATENCY_MS: u64 = 10;

/// Event types a few hundred generated cases must produce between them.
const EXERCISED: &[&str] = &[
    "StepScheduled",
    "StepSkipped",
    "StepFanOut",
    "StepAttemptFailed",
    "RetryScheduled",
    "StepFailed",
    "StepFailureCaught",
    "StepFailureBranched",
    "StepCancelled",
    "TimerFired",
    "AwaitStarted",
    "SignalDelivered",
    "ChildStarted",
    "CompensationStarted",
    "HandlersStarted",
    "StaleResultIgnored",
    "WorkflowCompleted",
    "WorkflowFailed",
    "WorkflowCancelled",
    "WorkflowTimedOut",
    "WorkflowContinuedAsNew",
    // A long repeat continued the run as new near the history limit (a resume state).
    "WorkflowContinuedAsNew.resume",
];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn example(file: &str) -> String {
    let path = format!("{}/../../examples/definitions/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn signal(at: u64, name: &str, payload: Value) -> Action {
    Action::Signal { at, name: name.into(), payload }
}

/// Each example with the input, signals and (for `parent`) the child its header describes,
/// once with every attempt succeeding and once per seed with hashed outcomes.
fn examples() -> Vec<Case> {
    let all = [
        ("hello.yaml", "hello", json!({"name": "Ada"}), vec![]),
        ("child.yaml", "child", json!({"n": 3}), vec![]),
        ("parent.yaml", "parent", json!({"numbers": [3, 4]}), vec![]),
        ("fan-out.yaml", "fan-out", json!({"items": [1, 2, 3, 4, 5]}), vec![]),
        ("continue-as-new.yaml", "continue-as-new", json!({"count": 0, "limit": 3}), vec![]),
        ("long-loop.yaml", "long-loop", json!({"pages": 60}), vec![]),
        ("groups.yaml", "groups", json!({"order_id": "o-1", "sku": "a"}), vec![]),
        ("switch.yaml", "switch", json!({"order_id": "o-1", "amount": 500}), vec![]),
        ("on-failure.yaml", "on-failure", json!({"order_id": "o-1", "amount": 120}), vec![]),
        (
            "race.yaml",
            "race",
            json!({"request_id": "q-1"}),
            vec![signal(100, "approve", json!({"by": "ops"}))],
        ),
        (
            "loops.yaml",
            "loops",
            json!({"orders": [{"id": "o-1"}, {"id": "o-2"}, {"id": "o-3"}], "job": "j-1"}),
            vec![],
        ),
        (
            "continue-on-failure.yaml",
            "continue-on-failure",
            json!({"sku": "a", "phones": ["+1", "+0", "+2"]}),
            vec![],
        ),
        (
            "order-saga.yaml",
            "order-saga",
            json!({"order_id": "o-1", "amount": 1500, "items": [{"sku": "a"}, {"sku": "b"}]}),
            vec![signal(100, "approve", json!({"by": "ops"}))],
        ),
        (
            "handlers.yaml",
            "handlers",
            json!({"amount": 500}),
            vec![
                signal(20, "note", json!({"text": "call the customer"})),
                signal(50, "proceed", json!({})),
            ],
        ),
        (
            "query.yaml",
            "query",
            json!({"order_id": "o-7", "items": [{"sku": "a"}, {"sku": "b"}]}),
            vec![signal(100, "packed", json!({}))],
        ),
    ];
    let mut cases = Vec::new();
    for (file, workflow, input, script) in all {
        let mut defs = vec![example(file)];
        if file == "parent.yaml" {
            defs.insert(0, example("child.yaml"));
        }
        for (mode, tag) in [(Mode::Happy, "happy"), (Mode::Hashed, "hashed")] {
            let http = defs.iter().any(|d| d.contains("http:"));
            cases.push(Case {
                name: format!("{file} ({tag})"),
                defs: defs.clone(),
                workflow: workflow.into(),
                input: input.clone(),
                script: script.clone(),
                mode,
                http,
            });
        }
    }
    cases
}

/// Runs `case` on both sides, counting the owner's events by type in `seen`; `Err` holds
/// the report of a disagreement (or a failure).
async fn check(
    case: &Case,
    seen: &mut BTreeMap<&'static str, usize>,
) -> Result<(), (String, String)> {
    let fail = |sig: &str, body: String| (sig.to_string(), body);
    let defs: Vec<_> = case
        .defs
        .iter()
        .map(|y| {
            // Both sides run the definition as the server stores it (normalised, keys
            // sorted), which is what an owner loads: template objects keep that key order.
            let def = orbit_definition::parse(y)?;
            orbit_definition::parse(&orbit_definition::canonical_json(
                &orbit_definition::to_document(&def),
            ))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| fail("invalid definition", format!("does not parse: {e:?}")))?;
    let limits = orbit_owner::OwnerConfig::default().limits;
    let sim = sim_side::run(case, &defs, &limits).map_err(|e| fail("sim error", e))?;
    let owner = owner_side::run(case, &defs, &limits, LATENCY_MS)
        .await
        .map_err(|e| fail("owner driver error", e))?;
    for he in owner.values().flatten().flatten() {
        *seen.entry(he.event.type_name()).or_default() += 1;
        if matches!(&he.event, orbit_engine::Event::WorkflowContinuedAsNew { resume: Some(_), .. })
        {
            *seen.entry("WorkflowContinuedAsNew.resume").or_default() += 1;
        }
    }
    let (sim, owner) = (render(&sim), render(&owner));
    match diff(&sim, &owner) {
        None => Ok(()),
        // `ORBIT_PROP_FULL=1` shows both histories whole instead of the diff.
        Some(_) if std::env::var("ORBIT_PROP_FULL").is_ok_and(|v| v == "1") => Err((
            signature(&diff(&sim, &owner).unwrap_or_default()),
            format!("--- sim\n{}\n--- owner\n{}", sim.join("\n"), owner.join("\n")),
        )),
        Some(d) => Err((signature(&d), d)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_and_the_owner_write_the_same_histories() {
    let count = env_u64("ORBIT_PROP_CASES", 300);
    let first = env_u64("ORBIT_PROP_SEED", 1);
    let with_http = std::env::var("ORBIT_PROP_HTTP").map_or(true, |v| v != "0");
    let mut cases = examples();
    cases.extend((first..first + count).map(gen::case));
    cases.retain(|c| with_http || !c.http);

    let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = BTreeMap::new();
    let mut printed = 0;
    let (mut ran, mut http_cases) = (0, 0);
    for case in &cases {
        ran += 1;
        http_cases += usize::from(case.http);
        if let Err((sig, body)) = check(case, &mut seen).await {
            // Every disagreement is counted; the first few of each kind are shown whole.
            let seen = failures.entry(sig.clone()).or_default();
            if seen.len() < 2 && printed < 12 {
                printed += 1;
                eprintln!(
                    "\n#### {} disagrees ({sig}), input {}, script {:?}\n{}\n--- diff (- sim, + owner)\n{body}",
                    case.name,
                    case.input,
                    case.script,
                    case.defs.join("---\n")
                );
            }
            seen.push(case.name.clone());
        }
    }
    let failed: usize = failures.values().map(Vec::len).sum();
    eprintln!("\n{ran} cases ({http_cases} with http steps), {failed} disagree");
    for (sig, names) in &failures {
        let shown: Vec<_> = names.iter().take(8).cloned().collect();
        eprintln!("  {} x {sig}: {}", names.len(), shown.join(", "));
    }
    eprintln!("events written by the owner, by type: {seen:?}");
    assert_eq!(failed, 0, "the simulator and the owner disagree on {failed} of {ran} cases");
    // The generator really reaches every construct (a generator that degenerated, say to
    // definitions that all fail at once, would compare nothing of interest).
    if count >= 100 {
        let missing: Vec<_> = EXERCISED.iter().filter(|k| !seen.contains_key(*k)).collect();
        assert!(missing.is_empty(), "no generated case produced {missing:?}");
        // Loops (issue 29) are among the generated constructs.
        for construct in [
            "id: each, for_each:",
            "id: rep, repeat:",
            "id: rep, continue_on_failure: true, repeat:",
            "id: lp, repeat:",
        ] {
            let n = cases.iter().filter(|c| c.defs.iter().any(|d| d.contains(construct))).count();
            assert!(n > 0, "no generated case has `{construct}`");
        }
    }
}
