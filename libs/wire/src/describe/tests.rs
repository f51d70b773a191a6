use super::*;
use orbit_definition::Limits;
use orbit_engine::{accept, advance, start, Command, HistoryEvent, Origin};
use serde_json::json;

const DOC: &str = r#"
name: demo
version: "1"
timeout: 1h
tasks:
  work: { version: "2" }
signals:
  go: {}
queries:
  n: ${{ 1 }}
steps:
  - id: charge
    task: work
    timeout: 30s
    queue_timeout: 5m
  - id: wait
    await: go
    timeout: 1m
  - id: nap
    sleep: 10s
output: ${{ steps.charge.output }}
"#;

fn run(now: u64) -> (Definition, State) {
    let def = orbit_definition::parse(DOC).unwrap();
    let created = start(&def, "e1", json!(null), None, None, 1, &Limits::default(), None).unwrap();
    let mut state = State::default();
    state.apply(&HistoryEvent {
        seq: 1,
        timestamp_ms: now,
        origin: Origin::Recorded,
        event: created,
    });
    advance(&def, &mut state, now, &Limits::default());
    (def, state)
}

fn record(def: &Definition, state: &mut State, command: Command, now: u64) {
    for event in accept(def, state, command, now, &Limits::default()).unwrap() {
        let he = HistoryEvent {
            seq: state.last_seq + 1,
            timestamp_ms: now,
            origin: Origin::Recorded,
            event,
        };
        state.apply(&he);
    }
    advance(def, state, now, &Limits::default());
}

#[test]
fn open_run_lists_units_and_pending_work() {
    let (def, mut state) = run(1_000);
    record(&def, &mut state, Command::Signal { name: "go".into(), payload: json!(1) }, 1_100);
    record(&def, &mut state, Command::Signal { name: "go".into(), payload: json!(2) }, 1_200);
    let d = describe(&def, &state, wire::ExecutionInfo::default());
    let keys: Vec<_> = d.units.iter().map(|u| u.key.as_str()).collect();
    assert!(keys.contains(&"charge"), "{keys:?}");
    let charge = d.units.iter().find(|u| u.key == "charge").unwrap();
    assert_eq!(charge.status(), wire::UnitStatus::Scheduled);
    assert_eq!((charge.attempt, charge.task.as_str()), (1, "work"));
    assert!(!charge.idempotency_key.is_empty());
    let task = &d.pending_tasks[0];
    assert_eq!(task.state(), wire::PendingTaskState::Queued);
    assert_eq!(task.task.as_ref().unwrap().version, "2");
    assert_eq!(task.deadline.unwrap().seconds, 1 + 300);
    let kinds: Vec<_> = d.pending_timers.iter().map(|t| t.kind()).collect();
    assert!(kinds.contains(&wire::TimerKind::QueueTimeout), "{kinds:?}");
    assert!(kinds.contains(&wire::TimerKind::WorkflowTimeout), "{kinds:?}");
    // The await and sleep depend on nothing, so they run at once; the first signal went to
    // the await, the second is buffered.
    assert_eq!(d.buffered_signals.get("go").copied().unwrap_or(0), 1, "{:?}", d.buffered_signals);
    assert!(d.output.is_none() && d.error.is_none());
}

#[test]
fn completed_run_reports_output_and_no_pending_work() {
    let (def, mut state) = run(1_000);
    let token = "tok-1".to_string();
    let dispatched = Command::Dispatched {
        step: "charge".into(),
        token: token.clone(),
        worker_id: "w".into(),
        session: "s".into(),
    };
    record(&def, &mut state, dispatched, 1_010);
    let d = describe(&def, &state, wire::ExecutionInfo::default());
    let task = d.pending_tasks.iter().find(|t| t.unit == "charge").unwrap();
    assert_eq!(task.state(), wire::PendingTaskState::Dispatched);
    assert_eq!(task.token, token);
    assert_eq!(task.deadline.unwrap().seconds, 31);
    record(&def, &mut state, Command::Complete { token, output: json!({"ok": true}) }, 1_020);
    record(&def, &mut state, Command::Signal { name: "go".into(), payload: json!(1) }, 1_030);
    // The sleep fires once its time has come.
    advance(&def, &mut state, 20_000, &Limits::default());
    assert_eq!(state.status(), Status::Completed);
    let d = describe(&def, &state, wire::ExecutionInfo::default());
    assert!(
        d.pending_tasks.is_empty() && d.pending_timers.is_empty() && d.pending_awaits.is_empty()
    );
    let output = orbit_server_kit::payload::proto_to_json(d.output.unwrap()).unwrap();
    assert_eq!(output, json!({"ok": true}));
    assert!(d.error.is_none());
    let result = crate::execution_result(&state, 20_000).unwrap();
    assert_eq!(result.status(), wire::ExecutionStatus::Completed);
    assert_eq!(result.closed_at.unwrap().seconds, 20);
}

#[test]
fn pending_tasks_report_the_recorded_priority_and_keys() {
    let def = orbit_definition::parse(
        r#"
name: flows
version: "1"
tasks: { t: {} }
steps:
  - id: keyed
    task: t
    priority: 1
    concurrency: { key: "${{ input.account }}", limit: 1 }
    rate_limit: { name: stripe }
  - { id: plain, task: t }
"#,
    )
    .unwrap();
    let created =
        start(&def, "e1", json!({"account": "a7"}), None, None, 1, &Limits::default(), Some(4))
            .unwrap();
    let mut state = State::default();
    state.apply(&HistoryEvent {
        seq: 1,
        timestamp_ms: 0,
        origin: Origin::Recorded,
        event: created,
    });
    advance(&def, &mut state, 0, &Limits::default());
    let work = pending_work(&def, &state);
    let task = |unit: &str| work.tasks.iter().find(|t| t.unit == unit).unwrap();
    let keyed = task("keyed");
    assert_eq!(keyed.priority, 1);
    assert_eq!(keyed.concurrency_key, "flows.keyed/a7");
    assert_eq!(keyed.rate_limit_key, "stripe");
    let plain = task("plain");
    assert_eq!(plain.priority, 4, "the run's start priority");
    assert!(plain.concurrency_key.is_empty() && plain.rate_limit_key.is_empty());
    // Without any priority, the default.
    let (def, state) = run(1_000);
    let work = pending_work(&def, &state);
    assert_eq!(work.tasks[0].priority, u32::from(DEFAULT_PRIORITY));
}

#[test]
fn a_run_waiting_for_a_workflow_slot_names_the_key_until_granted() {
    let doc = "name: billing\nversion: \"1\"\nconcurrency: [{key: \"${{ input.a }}\", limit: 1}]\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n";
    let def = orbit_definition::parse(doc).unwrap();
    let created =
        start(&def, "e1", json!({"a": "acme"}), None, None, 1, &Limits::default(), None).unwrap();
    let mut state = State::default();
    state.apply(&HistoryEvent {
        seq: 1,
        timestamp_ms: 1,
        origin: Origin::Recorded,
        event: created,
    });
    advance(&def, &mut state, 1, &Limits::default());
    let d = describe(&def, &state, wire::ExecutionInfo::default());
    assert_eq!(d.waiting_for_slot, "billing/acme");
    assert!(d.pending_tasks.is_empty());
    record(&def, &mut state, Command::SlotGranted { key: "billing/acme".into() }, 2);
    let d = describe(&def, &state, wire::ExecutionInfo::default());
    assert_eq!(d.waiting_for_slot, "");
    assert_eq!(d.pending_tasks.len(), 1, "started: its first step is queued");
}
