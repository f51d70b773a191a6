//! Every example definition in `examples/definitions/` runs in the simulator to the
//! terminal status and output its header comment promises.

mod common;

use common::*;
use orbit_engine::event::{Event, TaskError};
use orbit_engine::query::query;
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use serde_json::{json, Value};
use std::path::Path;

fn example(name: &str) -> orbit_definition::Definition {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/definitions").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    def(&text)
}

fn ok(v: Value) -> TaskOutcome {
    TaskOutcome::Complete(v)
}

fn order_sim() -> Sim {
    let mut sim = Sim::new();
    sim.register(example("order-saga.yaml"));
    sim.on_task("payments.charge", |r| {
        ok(json!({"charge_id": format!("ch-{}", r.input["order_id"].as_str().unwrap())}))
    });
    sim.on_task("inventory.reserve", |r| {
        ok(json!({"reservation": format!("r-{}", r.input["sku"].as_str().unwrap())}))
    });
    sim.on_task("payments.refund", |_| ok(json!({})));
    sim.on_task("inventory.release", |_| ok(json!({})));
    sim
}

const ORDER: &str = r#"{"order_id": "o-1", "amount": 1500, "items": [{"sku": "a"}, {"sku": "b"}]}"#;

#[test]
fn order_saga_completes_after_approval() {
    let mut sim = order_sim();
    sim.start("order-saga", "o", serde_json::from_str(ORDER).unwrap()).unwrap();
    sim.run_until(sim.now + 60_000);
    let e = exec(&sim, "o");
    assert_eq!(e.state.status(), Status::Running, "waits for approval");
    assert_eq!(query(&e.def, &e.state, "charged").unwrap(), json!(true));
    sim.signal("o", "approve", json!({"by": "ops"})).unwrap();
    sim.run(100);
    let e = exec(&sim, "o");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(
        e.state.output,
        Some(
            json!({"order": "o-1", "charge_id": "ch-o-1", "approved_by": "ops", "reservations": ["r-a", "r-b"]})
        )
    );
    assert_replays(&sim);
}

#[test]
fn order_saga_small_orders_skip_approval() {
    let mut sim = order_sim();
    let mut input: Value = serde_json::from_str(ORDER).unwrap();
    input["amount"] = json!(500);
    sim.start("order-saga", "o", input).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "o").state.output.as_ref().unwrap()["approved_by"], json!("auto"));
}

#[test]
fn order_saga_without_approval_times_out_and_refunds() {
    let mut sim = order_sim();
    sim.start("order-saga", "o", serde_json::from_str(ORDER).unwrap()).unwrap();
    let t0 = sim.now;
    sim.run(100);
    let e = exec(&sim, "o");
    assert_eq!(e.state.status(), Status::Failed);
    assert!(sim.now - t0 >= 3_600_000, "the approval waited its hour");
    let refunds: Vec<&Value> =
        sim.requests().iter().filter(|r| r.task == "payments.refund").map(|r| &r.input).collect();
    assert_eq!(refunds, [&json!({"charge_id": "ch-o-1"})]);
    assert!(matches!(
        &e.history.last().unwrap().event,
        Event::WorkflowFailed { compensation: orbit_engine::CompensationOutcome::Completed, .. }
    ));
    assert_replays(&sim);
}

#[test]
fn order_saga_retries_a_flaky_charge() {
    let mut sim = order_sim();
    let mut n = 0;
    sim.on_task("payments.charge", move |_| {
        n += 1;
        if n < 3 {
            TaskOutcome::Fail(TaskError::retryable("GATEWAY_DOWN", "try later"))
        } else {
            ok(json!({"charge_id": "ch-x"}))
        }
    });
    let mut input: Value = serde_json::from_str(ORDER).unwrap();
    input["amount"] = json!(10);
    sim.start("order-saga", "o", input).unwrap();
    sim.run(100);
    let e = exec(&sim, "o");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(events_of(&e.history, "RetryScheduled").len(), 2);
}

#[test]
fn fan_out_doubles_with_bounded_concurrency() {
    let mut sim = Sim::new();
    sim.register(example("fan-out.yaml"));
    sim.on_task("math.double", |r| ok(json!({"value": r.input["n"].as_f64().unwrap() * 2.0})));
    sim.start("fan-out", "f", json!({"items": [1, 2, 3, 4, 5]})).unwrap();
    sim.run(100);
    let e = exec(&sim, "f");
    assert_eq!(e.state.output, Some(json!({"doubled": [2, 4, 6, 8, 10], "count": 5, "sum": 30})));
    let mut in_flight = 0;
    let mut max = 0;
    for h in &e.history {
        match &h.event {
            Event::StepScheduled { step, .. } if step.starts_with("double[") => in_flight += 1,
            Event::StepSucceeded { step, .. } if step.starts_with("double[") => in_flight -= 1,
            _ => {}
        }
        max = max.max(in_flight);
    }
    assert_eq!(max, 2);
    assert_replays(&sim);
}

#[test]
fn continue_on_failure_goes_on_with_the_failures_as_outputs() {
    let mut sim = Sim::new();
    sim.register(example("continue-on-failure.yaml"));
    sim.on_task("inventory.reserve", |r| {
        ok(json!({"reservation": format!("r-{}", r.input["sku"].as_str().unwrap())}))
    });
    sim.on_task("inventory.release", |_| ok(json!({})));
    sim.on_task("notify.email", |_| {
        TaskOutcome::Fail(TaskError::retryable("SMTP_DOWN", "mail is down"))
    });
    sim.on_task("notify.sms", |r| {
        if r.input["phone"] == json!("+0") {
            TaskOutcome::Fail(TaskError::fatal("BAD_NUMBER", "no such number"))
        } else {
            ok(json!({"sent": r.input["phone"]}))
        }
    });
    let input = json!({"sku": "a", "phones": ["+1", "+0", "+2"]});
    sim.start("continue-on-failure", "c", input).unwrap();
    assert!(sim.run(100));
    let e = exec(&sim, "c");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(
        e.state.output,
        Some(json!({"reservation": "r-a", "email": "SMTP_DOWN", "sms_sent": 2, "sms_failed": 1}))
    );
    let tasks = |name: &str| sim.requests().iter().filter(|r| r.task == name).count();
    assert_eq!((tasks("notify.email"), tasks("notify.sms"), tasks("inventory.release")), (2, 3, 0));
    let caught: Vec<&str> =
        events_of(&e.history, "StepFailureCaught").into_iter().filter_map(|ev| ev.step()).collect();
    assert_eq!(caught, ["sms[1]", "email"]);
    assert!(events_of(&e.history, "StepFailed").is_empty());
    assert_replays(&sim);
}

fn groups_sim(send: fn(&orbit_engine::sim::TaskRequest) -> TaskOutcome) -> Sim {
    let mut sim = Sim::new();
    sim.register(example("groups.yaml"));
    sim.on_task("warehouse.pack", |r| {
        ok(json!({"box": format!("box-{}", r.input["sku"].as_str().unwrap())}))
    });
    sim.on_task("warehouse.label", |r| {
        ok(json!({"label": format!("L-{}", r.input["order_id"].as_str().unwrap())}))
    });
    sim.on_task("warehouse.unpack", |_| ok(json!({})));
    sim.on_task("carrier.send", send);
    sim.start("groups", "g", json!({"order_id": "o-1", "sku": "a"})).unwrap();
    assert!(sim.run(100));
    sim
}

#[test]
fn groups_ship_as_one_step_and_compensate_inside_the_group() {
    let sim = groups_sim(|r| {
        ok(json!({"tracking": format!("T-{}", r.input["label"].as_str().unwrap())}))
    });
    let e = exec(&sim, "g");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(
        e.state.output,
        Some(json!({"order": "o-1", "tracking": "T-L-o-1", "box": "box-a"}))
    );
    let order: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
    assert_eq!(order, ["ship.pack", "ship.label", "ship.send"]);
    assert_replays(&sim);

    let sim = groups_sim(|_| TaskOutcome::Fail(TaskError::fatal("NO_CARRIER", "none today")));
    let e = exec(&sim, "g");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "NO_CARRIER");
    let undo: Vec<&str> = sim
        .requests()
        .iter()
        .filter(|r| r.task == "warehouse.unpack")
        .map(|r| r.step.as_str())
        .collect();
    assert_eq!(undo, ["compensate:ship.pack"]);
    assert_replays(&sim);
}

fn loops_sim(ship: fn(&orbit_engine::sim::TaskRequest) -> TaskOutcome) -> Sim {
    let mut sim = Sim::new();
    sim.register(example("loops.yaml"));
    sim.on_task("payments.charge", |r| {
        ok(json!({"charge_id": format!("ch-{}", r.input["order_id"].as_str().unwrap())}))
    });
    sim.on_task("warehouse.ship", ship);
    sim.on_task("payments.refund", |_| ok(json!({})));
    sim.on_task("jobs.status", |r| {
        let done = r.input["attempt"].as_u64().unwrap() >= 2;
        ok(json!({"state": if done { "done" } else { "running" }}))
    });
    let orders = json!([{"id": "o-1"}, {"id": "o-2"}, {"id": "o-3"}]);
    sim.start("loops", "l", json!({"orders": orders, "job": "j-1"})).unwrap();
    assert!(sim.run(1_000));
    sim
}

#[test]
fn loops_ship_each_order_through_the_group_then_poll_until_done() {
    let sim = loops_sim(|r| {
        ok(json!({"tracking": format!("T-{}", r.input["charge_id"].as_str().unwrap())}))
    });
    let e = exec(&sim, "l");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    let shipped: Vec<Value> = (1..=3)
        .map(|i| json!({"order": format!("o-{i}"), "tracking": format!("T-ch-o-{i}")}))
        .collect();
    assert_eq!(e.state.output, Some(json!({"shipped": shipped, "polls": 3, "job": "done"})));
    let polls: Vec<(&str, &Value)> = sim
        .requests()
        .iter()
        .filter(|r| r.task == "jobs.status")
        .map(|r| (r.step.as_str(), &r.input["last"]))
        .collect();
    assert_eq!(
        polls,
        [
            ("poll[0].check", &Value::Null),
            ("poll[1].check", &json!({"state": "running", "polls": 1})),
            ("poll[2].check", &json!({"state": "running", "polls": 2})),
        ]
    );
    assert_replays(&sim);

    let sim = loops_sim(|r| {
        if r.input["charge_id"] == json!("ch-o-2") {
            TaskOutcome::Fail(TaskError::retryable("NO_CARRIER", "none today"))
        } else {
            ok(json!({"tracking": "T"}))
        }
    });
    let e = exec(&sim, "l");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.clone().unwrap();
    assert_eq!(error.code, "NO_CARRIER");
    assert!(error.message.starts_with("element 1: step `orders[1].ship`"), "{}", error.message);
    let mut undo: Vec<(&str, &Value)> = sim
        .requests()
        .iter()
        .filter(|r| r.task == "payments.refund")
        .map(|r| (r.step.as_str(), &r.input["charge_id"]))
        .collect();
    undo.sort_unstable_by_key(|u| u.0);
    // Element 2 may have charged before element 1 failed: every charge made is refunded.
    let charged = sim.requests().iter().filter(|r| r.task == "payments.charge").count();
    assert_eq!(undo.len(), charged);
    assert_eq!(
        undo[..2],
        [
            ("compensate:orders[0].charge", &json!("ch-o-1")),
            ("compensate:orders[1].charge", &json!("ch-o-2")),
        ]
    );
    assert!(sim.requests().iter().all(|r| r.task != "jobs.status"));
    assert_replays(&sim);
}

#[test]
fn switch_runs_one_branch_by_amount() {
    for (amount, branch, by, steps) in [
        (500, 0, "ops", vec!["route.0.review", "route.0.refund"]),
        (50, 1, "auto", vec!["route.1.refund"]),
        (0, 2, "nobody", vec![]),
    ] {
        let mut sim = Sim::new();
        sim.register(example("switch.yaml"));
        sim.on_task("refunds.review", |_| ok(json!({"reviewer": "ops"})));
        sim.on_task("payments.refund", |_| ok(json!({})));
        sim.start("switch", "s", json!({"order_id": "o-1", "amount": amount})).unwrap();
        assert!(sim.run(100));
        let e = exec(&sim, "s");
        assert_eq!(
            e.state.output,
            Some(json!({"order": "o-1", "branch": branch, "reviewed_by": by})),
            "{amount}: {:?}",
            e.state.error
        );
        let ran: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
        assert_eq!(ran, steps, "{amount}");
        assert_replays(&sim);
    }
}

#[test]
fn parent_runs_two_children() {
    let mut sim = Sim::new();
    sim.register(example("parent.yaml")).register(example("child.yaml"));
    sim.on_task("math.double", |r| ok(json!({"value": r.input["n"].as_f64().unwrap() * 2.0})));
    sim.start("parent", "p", json!({"numbers": [3, 4]})).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "p").state.output, Some(json!({"doubled": [6, 8]})));
    for child in ["p/children[0]", "p/children[1]"] {
        assert_eq!(exec(&sim, child).state.status(), Status::Completed);
    }
    assert_replays(&sim);
}

#[test]
fn continue_as_new_loops_three_runs() {
    let mut sim = Sim::new();
    sim.register(example("continue-as-new.yaml"));
    sim.start("continue-as-new", "c", json!({"count": 0, "limit": 3})).unwrap();
    sim.run(100);
    let e = exec(&sim, "c");
    assert_eq!(e.archived.len(), 2);
    assert_eq!(e.state.run, 3);
    assert_eq!(e.state.output, Some(json!({"count": 3})));
    assert_replays(&sim);
}

#[test]
fn long_loop_continues_as_new_with_the_uninterrupted_result() {
    let mut sim = Sim::new();
    sim.register(example("long-loop.yaml"));
    sim.on_task("source.open", |_| ok(json!({"source": "s-1"})));
    sim.on_task("source.page", |_| ok(json!({"rows": 1})));
    sim.on_task("source.close", |_| ok(json!({})));
    sim.start("long-loop", "l", json!({"pages": 60})).unwrap();
    assert!(sim.run(10_000));
    let e = exec(&sim, "l");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(json!({"pages": 60, "synced": 60, "source": "s-1"})));
    assert!(e.archived.len() >= 2, "{} runs", e.archived.len() + 1);
    for run in e.archived.iter().chain(std::iter::once(&e.history)) {
        assert!(run.len() <= 150, "{} events", run.len());
    }
    let calls = |task: &str| sim.requests().iter().filter(|r| r.task == task).count();
    assert_eq!((calls("source.open"), calls("source.page"), calls("source.close")), (1, 60, 1));
    assert_replays(&sim);
}

fn handlers_sim(amount: i64) -> Sim {
    let mut sim = Sim::new();
    sim.register(example("handlers.yaml"));
    sim.on_task("payments.charge", |r| {
        if r.input["amount"].as_f64().unwrap() > 100.0 {
            TaskOutcome::Fail(TaskError::retryable("CARD_DECLINED", "declined"))
        } else {
            ok(json!({"charge_id": "ch-1"}))
        }
    });
    sim.on_task("notes.append", |_| ok(json!({})));
    sim.on_task("ops.alert", |_| ok(json!({})));
    sim.start("handlers", "h", json!({"amount": amount})).unwrap();
    sim.run_until(sim.now + 1_000);
    sim.signal("h", "note", json!({"text": "call the customer"})).unwrap();
    sim.run_until(sim.now + 1_000);
    sim.signal("h", "proceed", json!({})).unwrap();
    sim.run(100);
    sim
}

#[test]
fn handlers_run_on_signal_and_on_failure() {
    let sim = handlers_sim(500);
    let e = exec(&sim, "h");
    assert_eq!(e.state.status(), Status::Failed);
    let by_task = |t: &str| {
        sim.requests().iter().filter(|r| r.task == t).map(|r| r.input.clone()).collect::<Vec<_>>()
    };
    assert_eq!(by_task("notes.append"), [json!({"text": "call the customer"})]);
    assert_eq!(by_task("payments.charge").len(), 1, "CARD_DECLINED is not retried");
    assert_eq!(by_task("ops.alert"), [json!({"reason": "declined", "code": "CARD_DECLINED"})]);
    assert_replays(&sim);

    let sim = handlers_sim(50);
    let e = exec(&sim, "h");
    assert_eq!(e.state.output, Some(json!({"charge_id": "ch-1"})));
    assert!(sim.requests().iter().all(|r| r.task != "ops.alert"));
}

#[test]
fn query_counts_progress() {
    let mut sim = Sim::new();
    sim.register(example("query.yaml"));
    sim.on_task("inventory.reserve", |r| ok(json!({"reserved": r.input["sku"]})));
    sim.on_task("payments.charge", |_| ok(json!({"charge_id": "ch-7"})));
    sim.start("query", "q", json!({"order_id": "o-7", "items": [{"sku": "a"}, {"sku": "b"}]}))
        .unwrap();
    sim.run_until(sim.now + 60_000);
    let e = exec(&sim, "q");
    assert_eq!(query(&e.def, &e.state, "done").unwrap(), json!(1));
    assert_eq!(query(&e.def, &e.state, "total").unwrap(), json!(3));
    assert_eq!(query(&e.def, &e.state, "charged").unwrap(), json!(false));
    sim.signal("q", "packed", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "q");
    assert_eq!(e.state.output, Some(json!({"order": "o-7", "charge_id": "ch-7"})));
    assert_eq!(query(&e.def, &e.state, "done").unwrap(), json!(3));
    assert_replays(&sim);
}

#[test]
fn the_on_failure_example_invoices_a_declined_order_without_compensating() {
    let mut sim = Sim::new();
    sim.register(example("on-failure.yaml"));
    sim.on_task("inventory.reserve", |_| TaskOutcome::Complete(json!({"reservation": "r-o-1"})));
    sim.on_task("inventory.release", |_| TaskOutcome::Complete(json!({})));
    sim.on_task("payments.charge", |_| {
        TaskOutcome::Fail(TaskError::retryable("DECLINED", "card declined"))
    });
    sim.on_task("notify.email", |r| TaskOutcome::Complete(json!({"sent": r.input["reason"]})));
    sim.on_task("billing.invoice", |_| TaskOutcome::Complete(json!({"invoice": "inv-o-1"})));
    sim.on_task("payments.refund", |_| TaskOutcome::Complete(json!({})));
    sim.start("on-failure", "o", json!({"order_id": "o-1", "amount": 120})).unwrap();
    assert!(sim.run(100));
    let e = exec(&sim, "o");
    assert_eq!(
        e.state.output,
        Some(
            json!({"order": "o-1", "paid_by": "invoice", "invoice": "inv-o-1", "declined": "DECLINED"})
        )
    );
    let ran: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
    // DECLINED is non-retryable: one attempt, then the branch; nothing is released or refunded.
    assert_eq!(ran, ["reserve", "charge", "charge.on_failure.tell", "charge.on_failure.invoice"]);
    assert_eq!(sim.requests()[2].input["reason"], json!("DECLINED: card declined"));
    assert_replays(&sim);
}

#[test]
fn the_race_example_is_won_by_the_signal_or_by_the_deadline() {
    for signal in [true, false] {
        let mut sim = Sim::new();
        sim.register(example("race.yaml"));
        sim.on_task("approvals.request", |_| TaskOutcome::Complete(json!({"ticket": "t-q-1"})));
        sim.on_task("approvals.escalate", |_| TaskOutcome::Complete(json!({"to": "manager"})));
        sim.start("race", "q", json!({"request_id": "q-1"})).unwrap();
        let start = exec(&sim, "q").state.created_at;
        sim.run_until(start + 600_000);
        if signal {
            sim.signal("q", "approve", json!({"by": "ops"})).unwrap();
        }
        assert!(sim.run(100));
        let e = exec(&sim, "q");
        let (winner, decision, cancelled) = if signal {
            (0, json!({"approved": true, "by": "ops"}), "decision.1.deadline")
        } else {
            (1, json!({"approved": false, "escalated_to": "manager"}), "decision.0.approval")
        };
        assert_eq!(
            e.state.output,
            Some(json!({"request": "q-1", "winner": winner, "decision": decision})),
            "{signal}"
        );
        let cancels: Vec<&str> =
            events_of(&e.history, "StepCancelled").into_iter().filter_map(|ev| ev.step()).collect();
        assert_eq!(cancels, [cancelled]);
        assert_replays(&sim);
    }
}

#[test]
fn hello_greets() {
    let mut sim = Sim::new();
    sim.register(example("hello.yaml"));
    sim.on_task("greet", |r| {
        ok(json!({"greeting": format!("Hello, {}!", r.input["name"].as_str().unwrap())}))
    });
    sim.start("hello", "h", json!({"name": "Ada"})).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "h").state.output, Some(json!({"greeting": "Hello, Ada!"})));
}

#[test]
fn every_example_file_is_covered_here() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/definitions");
    let source = include_str!("examples.rs");
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(source.contains(&format!("example(\"{name}\")")), "{name} has no simulator test");
    }
}
