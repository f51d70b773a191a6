//! Scenario 9 "language" of `sdks/conformance/README.md`: the six examples of the definition
//! language (issue 29: groups, switch, continue_on_failure, on_failure, race, for_each over
//! a group and repeat) run on the SDK's conformance worker, with the inputs of their
//! `orbit test` fixtures (`examples/tests/`), failing paths included. The runner asserts
//! each output and the history events that show the construct worked: units such as
//! `ship.pack`, `route.0.review`, `orders[1].ship`, `poll[2].check`, `StepFailureCaught`,
//! `StepFailureBranched`, the race loser's `StepCancelled`, the compensation of a loop.
//!
//! The worker answers as the examples' headers describe theirs (`Workers:`); where a
//! fixture's mock is a constant (`loops`: `charge_id: ch`), the real value comes out.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::scenarios::{finished, Fut};
use super::{types, Env, WorkerProc, WorkerSpec, STEP};
use crate::common::kinds::{count, has, kinds, position, units};
use crate::common::scenario::signal;
use crate::common::{event_payload, example, history, history_until, register, start};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::{json, Value};
use std::time::Duration;
use tonic::transport::Channel;

type Client = WorkflowServiceClient<Channel>;

/// The examples the scenario registers, besides `race-fast`.
const EXAMPLES: &[&str] =
    &["groups", "switch", "continue-on-failure", "on-failure", "race", "loops"];

/// `race-fast`'s deadline: the race example's `sleep: 1h`, shortened so the deadline
/// branch wins within the test.
const DEADLINE: Duration = Duration::from_secs(1);

/// The loops example's repeat sleeps 1 s in each of its two unfinished polls.
const POLLS: Duration = Duration::from_secs(2);

pub fn language(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start("language").await;
        let mut c = env.client().await;
        for name in EXAMPLES {
            let doc = std::fs::read_to_string(example(&format!("{name}.yaml"))).expect("example");
            register(&mut c, &doc).await;
            if *name == "race" {
                let fast = doc
                    .replace("name: race\n", "name: race-fast\n")
                    .replace("sleep: 1h", &format!("sleep: {}s", DEADLINE.as_secs()));
                assert!(fast.contains("race-fast") && fast.contains("sleep: 1s"), "{fast}");
                register(&mut c, &fast).await;
            }
        }
        let worker = env.worker(spec, "conf-language").ready().await;
        let runs = [
            ("groups", "groups", json!({"order_id": "o-1", "sku": "a"})),
            ("switch", "switch-large", json!({"order_id": "o-1", "amount": 500})),
            ("switch", "switch-small", json!({"order_id": "o-2", "amount": 50})),
            ("continue-on-failure", "cof", json!({"sku": "a", "phones": ["+1", "+0", "+2"]})),
            ("on-failure", "declined", json!({"order_id": "o-1", "amount": 120})),
            ("race", "race-signal", json!({"request_id": "q-1"})),
            ("race-fast", "race-deadline", json!({"request_id": "q-2"})),
            ("loops", "loops", json!({"orders": [{"id": "o-1"}, {"id": "o-2"}], "job": "j-1"})),
            (
                "loops",
                "loops-fail",
                json!({"orders": [{"id": "o-1"}, {"id": "o-fail"}], "job": "j-2"}),
            ),
        ];
        for (workflow, id, input) in runs {
            start(&mut c, workflow, id, input).await.expect("start");
        }
        groups(&mut c, &worker).await;
        switch(&mut c, &worker).await;
        continue_on_failure(&mut c, &worker).await;
        on_failure(&mut c, &worker).await;
        race(&mut c, &worker).await;
        loops(&mut c, &worker).await;
    })
}

/// The run's status and output (the error message when it failed), and its history as
/// (type, unit) pairs with the full events.
async fn outcome(
    c: &mut Client,
    id: &str,
    within: Duration,
    worker: &WorkerProc,
) -> (pb::ExecutionStatus, Value, Vec<(String, String)>, Vec<pb::HistoryEvent>) {
    let (status, output) = finished(c, id, within, worker).await;
    let full = history(c, id).await;
    (status, output, kinds(&full), full)
}

/// The output recorded by `unit`'s `kind` event.
fn recorded(full: &[pb::HistoryEvent], kind: &str, unit: &str) -> Value {
    let e = full.iter().find(|e| e.event_type == kind && e.step == unit);
    let e = e.unwrap_or_else(|| panic!("no {kind}({unit}): {:?}", types(full)));
    event_payload(e)["output"].clone()
}

/// groups: `ship.pack` and `ship.label` after `check`, `ship.send` after both, the group
/// resolves with its output.
async fn groups(c: &mut Client, worker: &WorkerProc) {
    let (status, output, h, _) = outcome(c, "groups", STEP, worker).await;
    let want = json!({"order": "o-1", "tracking": "T-L-o-1", "box": "box-a"});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    for sub in ["ship.pack", "ship.label"] {
        assert!(at("StepSucceeded", "check") < at("StepScheduled", sub), "{h:?}");
        assert!(at("StepSucceeded", sub) < at("StepScheduled", "ship.send"), "{h:?}");
    }
    assert!(at("StepSucceeded", "ship.send") < at("StepSucceeded", "ship"), "{h:?}");
    assert!(at("StepSucceeded", "ship") < at("StepSucceeded", "receipt"), "{h:?}");
}

/// switch: 500 takes branch 0 (review, then refund), 50 branch 1 (refund only); the other
/// branches never start.
async fn switch(c: &mut Client, worker: &WorkerProc) {
    let (status, output, h, _) = outcome(c, "switch-large", STEP, worker).await;
    let want = json!({"order": "o-1", "branch": 0, "reviewed_by": "ops"});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepSucceeded", "route.0.review") < at("StepScheduled", "route.0.refund"));
    assert!(at("StepSucceeded", "route.0.refund") < at("StepSucceeded", "route"), "{h:?}");
    assert!(h.iter().all(|(_, u)| !u.starts_with("route.1") && !u.starts_with("route.2")));

    let (status, output, h, _) = outcome(c, "switch-small", STEP, worker).await;
    let want = json!({"order": "o-2", "branch": 1, "reviewed_by": "auto"});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    assert!(has(&h, "StepSucceeded", "route.1.refund"), "{h:?}");
    assert!(h.iter().all(|(_, u)| !u.starts_with("route.0") && !u.starts_with("route.2")));
}

/// continue-on-failure: the e-mail fails on both attempts of its policy, the second text
/// message for good; both are caught and the run completes without compensation.
async fn continue_on_failure(c: &mut Client, worker: &WorkerProc) {
    let (status, output, h, full) = outcome(c, "cof", STEP, worker).await;
    let want = json!({"reservation": "r-a", "email": "SMTP_DOWN", "sms_sent": 2, "sms_failed": 1});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    assert_eq!(count(&h, "StepAttemptFailed", "email"), 2, "retried once: {h:?}");
    assert!(position(&h, "RetryScheduled", "email") < position(&h, "StepFailureCaught", "email"));
    assert_eq!(count(&h, "StepFailureCaught", "sms[1]"), 1, "{h:?}");
    assert!(has(&h, "StepSucceeded", "sms[0]") && has(&h, "StepSucceeded", "sms[2]"), "{h:?}");
    assert!(h.iter().all(|(t, _)| t != "StepFailed" && t != "CompensationStarted"), "{h:?}");
    // The worker's code and message are the caught step's output.
    let caught = json!({"failed": true, "error": {"code": "SMTP_DOWN", "message": "mail is down"}});
    assert_eq!(recorded(&full, "StepFailureCaught", "email"), caught);
    assert_eq!(recorded(&full, "StepFailureCaught", "sms[1]")["error"]["code"], "BAD_NUMBER");
    assert_eq!(recorded(&full, "StepSucceeded", "sms[0]"), json!({"sent": "+1"}));
}

/// on-failure: the declined charge (one attempt: non-retryable) runs its branch, which
/// sees the worker's failure; the step completes with the branch's output, nothing is
/// compensated.
async fn on_failure(c: &mut Client, worker: &WorkerProc) {
    let (status, output, h, full) = outcome(c, "declined", STEP, worker).await;
    let want = json!({"order": "o-1", "paid_by": "invoice", "invoice": "inv-o-1",
                      "declined": "DECLINED"});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert_eq!(count(&h, "StepAttemptFailed", "charge"), 1, "not retried: {h:?}");
    assert!(at("StepFailureBranched", "charge") < at("StepScheduled", "charge.on_failure.tell"));
    assert!(
        at("StepSucceeded", "charge.on_failure.tell")
            < at("StepScheduled", "charge.on_failure.invoice")
    );
    assert!(at("StepSucceeded", "charge.on_failure.invoice") < at("StepFailureCaught", "charge"));
    assert!(at("StepFailureCaught", "charge") < at("StepSucceeded", "confirm"), "{h:?}");
    assert!(h.iter().all(|(t, u)| t != "StepFailed" && !u.starts_with("compensate:")), "{h:?}");
    let tell = full
        .iter()
        .find(|e| e.event_type == "StepScheduled" && e.step == "charge.on_failure.tell")
        .map(event_payload);
    let reason = tell.map(|p| p["input"]["reason"].clone());
    assert_eq!(reason, Some(json!("DECLINED: card declined")), "the branch saw the failure");
}

/// race: the signal wins against the hour-long deadline (whose timer is cancelled); with a
/// 1 s deadline and no signal, the deadline escalates and wins (the wait is cancelled).
async fn race(c: &mut Client, worker: &WorkerProc) {
    history_until(c, "race-signal", STEP, |h| {
        let h = kinds(h);
        has(&h, "AwaitStarted", "decision.0.approval")
            && has(&h, "TimerStarted", "decision.1.deadline")
    })
    .await;
    signal(c, "race-signal", "approve", json!({"by": "ops"})).await;
    let (status, output, h, _) = outcome(c, "race-signal", STEP, worker).await;
    let want = json!({"request": "q-1", "winner": 0, "decision": {"approved": true, "by": "ops"}});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepSucceeded", "ask") < at("AwaitStarted", "decision.0.approval"), "{h:?}");
    assert!(
        at("SignalDelivered", "decision.0.approval") < at("StepCancelled", "decision.1.deadline")
    );
    assert!(at("StepCancelled", "decision.1.deadline") < at("StepSucceeded", "decision"));
    assert!(h.iter().all(|(_, u)| u != "decision.1.escalate"), "{h:?}");

    let (status, output, h, _) = outcome(c, "race-deadline", STEP + DEADLINE, worker).await;
    let want = json!({"request": "q-2", "winner": 1,
                      "decision": {"approved": false, "escalated_to": "manager"}});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("TimerFired", "decision.1.deadline") < at("StepSucceeded", "decision.1.escalate"));
    assert!(
        at("StepSucceeded", "decision.1.escalate") < at("StepCancelled", "decision.0.approval")
    );
    assert!(at("StepCancelled", "decision.0.approval") < at("StepSucceeded", "decision"));
}

/// loops: each order charged then shipped (`orders[i].charge`, `orders[i].ship`, each
/// element recorded as `orders[i]`), then three polls (`poll[n].check`, `poll[n]`); a
/// shipment failing for good (after its retry) fails the run, which refunds every charge.
async fn loops(c: &mut Client, worker: &WorkerProc) {
    let (status, output, h, full) = outcome(c, "loops", STEP + POLLS, worker).await;
    let shipped = json!([{"order": "o-1", "tracking": "T-ch-o-1"},
                         {"order": "o-2", "tracking": "T-ch-o-2"}]);
    let want = json!({"shipped": shipped, "polls": 3, "job": "done"});
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, want), "{}", worker.log());
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(has(&h, "StepFanOut", "orders"), "{h:?}");
    for i in 0..2 {
        let (charge, ship, element) =
            (format!("orders[{i}].charge"), format!("orders[{i}].ship"), format!("orders[{i}]"));
        assert!(at("StepSucceeded", &charge) < at("StepScheduled", &ship), "{h:?}");
        assert!(at("StepSucceeded", &ship) < at("StepSucceeded", &element), "{h:?}");
        assert!(at("StepSucceeded", &element) < at("StepSucceeded", "orders"), "{h:?}");
    }
    assert!(at("StepSucceeded", "orders") < at("StepScheduled", "poll[0].check"), "{h:?}");
    for n in 0..3 {
        let iteration = format!("poll[{n}]");
        assert!(at("StepSucceeded", &format!("poll[{n}].check")) < at("StepSucceeded", &iteration));
    }
    assert_eq!(units(&h, "TimerStarted"), ["poll[0].wait", "poll[1].wait"], "{h:?}");
    assert_eq!(units(&h, "StepSkipped"), ["poll[2].wait"], "{h:?}");
    assert!(at("StepSucceeded", "poll[2]") < at("StepSucceeded", "poll"), "{h:?}");
    assert_eq!(
        recorded(&full, "StepSucceeded", "poll[1]"),
        json!({"state": "running", "polls": 2})
    );

    let (status, error, h, _) = outcome(c, "loops-fail", STEP, worker).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}; {}", worker.log());
    assert!(error.as_str().is_some_and(|e| e.starts_with("NO_CARRIER")), "{error}");
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert_eq!(count(&h, "StepAttemptFailed", "orders[1].ship"), 2, "retried once: {h:?}");
    assert!(at("StepFailed", "orders[1].ship") < at("StepFailed", "orders[1]"), "{h:?}");
    assert!(at("StepFailed", "orders[1]") < at("StepFailed", "orders"), "{h:?}");
    assert!(at("StepFailed", "orders") < at("CompensationStarted", ""), "{h:?}");
    let mut refunded = units(&h, "StepSucceeded");
    refunded.retain(|u| u.starts_with("compensate:"));
    refunded.sort();
    assert_eq!(refunded, ["compensate:orders[0].charge", "compensate:orders[1].charge"]);
    assert!(h.iter().all(|(_, u)| !u.starts_with("poll")), "{h:?}");
}
