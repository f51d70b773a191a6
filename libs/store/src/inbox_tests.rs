//! Round trips of every inbox message and reply, and the refusals of rows that do not fit.

use super::*;
use serde_json::json;

fn every_message() -> Vec<InboxMessage> {
    vec![
        InboxMessage::Signal(Signal {
            name: "go".into(),
            payload: json!({"n": 1}),
            request_id: Some("r1".into()),
        }),
        InboxMessage::Cancel(Cancel { reason: "enough".into(), request_id: None }),
        InboxMessage::Complete(Complete { token: "t1".into(), output: json!([1, 2]) }),
        InboxMessage::Fail(Fail {
            token: "t2".into(),
            error: TaskError::fatal("BOOM", "it broke"),
        }),
        InboxMessage::Heartbeat(Heartbeat { token: "t3".into(), details: Some(json!(7)) }),
        InboxMessage::Dispatched(Dispatched {
            task_id: 9,
            step: "a".into(),
            attempt: 2,
            offer: 3,
            token: "t4".into(),
            claimed_by: "fe".into(),
            session: "s".into(),
            worker_id: "w".into(),
        }),
        InboxMessage::Uncertain(Uncertain {
            token: "t5".into(),
            reason: "HEARTBEAT_TIMEOUT".into(),
        }),
        InboxMessage::Timer(Timer { key: "next".into(), run: 2, fire_at: 5, payload: json!({}) }),
        InboxMessage::ChildClosed(ChildClosed {
            step: "c".into(),
            child_id: "p/c".into(),
            status: Status::Failed,
            output: None,
            error: Some(TaskError::fatal("X", "y")),
        }),
        InboxMessage::Resume(Resume {}),
        InboxMessage::Terminate(Terminate { reason: "ops".into(), request_id: None }),
        InboxMessage::Update(Update {
            name: "add".into(),
            args: json!({"n": 1}),
            request_id: Some("u1".into()),
        }),
        InboxMessage::Migrate(Migrate {
            to_version: "2.0.0".into(),
            reason: "fix".into(),
            request_id: Some("m1".into()),
        }),
        InboxMessage::Reset(Reset {
            to_step: Some("charge".into()),
            to_seq: None,
            drop_signals: true,
            to_version: Some("2.0.0".into()),
            reason: "worker fixed".into(),
            request_id: Some("r1".into()),
        }),
        InboxMessage::SlotGranted(SlotGranted { key: "billing/acme".into() }),
    ]
}

#[test]
fn every_message_round_trips_through_its_row() {
    let messages = every_message();
    let kinds: Vec<InboxKind> = messages.iter().map(InboxMessage::kind).collect();
    assert_eq!(kinds, InboxKind::ALL, "one message per kind");
    for m in messages {
        let kind = m.kind().as_str();
        assert_eq!(InboxKind::parse(kind), Some(m.kind()));
        let payload = m.payload();
        let decoded = InboxMessage::decode(kind, m.token(), &payload).unwrap();
        assert_eq!(decoded, m, "{kind}");
    }
}

#[test]
fn a_result_token_travels_in_the_column_not_the_payload() {
    let m = InboxMessage::Complete(Complete { token: "tok".into(), output: json!(1) });
    assert_eq!(m.payload(), json!({"output": 1}));
    assert_eq!(m.token(), Some("tok"));
    let e = InboxMessage::decode("complete", None, &json!({"output": 1})).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("without a token"), "{}", e.message);
}

#[test]
fn rows_written_before_the_protocol_was_typed_still_decode() {
    // The payloads the store's SQL and the services wrote by hand.
    let dispatched = json!({"task_id": 1, "step": "s", "attempt": 1, "offer": 1, "token": "t",
        "claimed_by": "fe", "session": "x", "worker_id": "w"});
    assert!(matches!(
        InboxMessage::decode("dispatched", Some("t"), &dispatched),
        Ok(InboxMessage::Dispatched(Dispatched { task_id: 1, .. }))
    ));
    let uncertain =
        InboxMessage::decode("uncertain", Some("t"), &json!({"reason": "SESSION_LOST"}));
    assert!(matches!(uncertain, Ok(InboxMessage::Uncertain(_))));
    let timer = InboxMessage::decode("timer", None, &json!({})).unwrap();
    assert_eq!(timer, InboxMessage::Timer(Timer::default()));
    let closed = json!({"step": "c", "child_id": "p/c", "status": "COMPLETED", "output": 1,
        "error": null});
    assert!(matches!(
        InboxMessage::decode("child_closed", None, &closed),
        Ok(InboxMessage::ChildClosed(ChildClosed { status: Status::Completed, .. }))
    ));
}

#[test]
fn an_unknown_kind_or_a_malformed_payload_is_refused_never_defaulted() {
    let e = InboxMessage::decode("signall", None, &json!({"name": "x"})).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(e.message.contains("unknown inbox kind `signall`"), "{}", e.message);
    for (kind, payload) in [
        ("signal", json!({"payload": 1})),
        ("fail", json!({"error": "not an object"})),
        ("dispatched", json!({"step": "s"})),
        ("child_closed", json!({"step": "c", "child_id": "x", "status": "FINISHED"})),
        ("signal", json!("not an object")),
    ] {
        let e = InboxMessage::decode(kind, Some("t"), &payload).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{kind} {payload}");
        assert!(e.message.contains(&format!("malformed `{kind}` entry")), "{}", e.message);
    }
}

#[test]
fn every_reply_round_trips_and_keeps_its_stored_shape() {
    let replies = [
        (
            InboxReply::Applied { seq: 4, run: 2, applied: false },
            json!({"ok": true, "seq": 4, "run": 2, "applied": false}),
        ),
        (
            InboxReply::Resumed { entry_seq: 3, failures: 5 },
            json!({"ok": true, "entry_seq": 3, "failures": 5}),
        ),
        (
            InboxReply::Terminated { seq: 9, terminated: true },
            json!({"ok": true, "seq": 9, "terminated": true}),
        ),
        (
            // An update's reply, null included (it must not read back as `Applied`).
            InboxReply::Updated { seq: 7, run: 1, result: json!(null) },
            json!({"ok": true, "seq": 7, "run": 1, "update": null}),
        ),
        (
            InboxReply::Updated { seq: 7, run: 1, result: json!({"sum": 3}) },
            json!({"ok": true, "seq": 7, "run": 1, "update": {"sum": 3}}),
        ),
        (
            // A migration (it must read back neither as `Applied` nor as `Updated`).
            InboxReply::Migrated {
                seq: 12,
                run: 1,
                from_version: "1".into(),
                to_version: "2".into(),
                plan: json!({"changes": []}),
            },
            json!({"ok": true, "seq": 12, "run": 1, "migration":
                {"from_version": "1", "to_version": "2", "plan": {"changes": []}}}),
        ),
        (
            // A reset (neither `Migrated` nor `Updated`; `through_seq` is required).
            InboxReply::Reset { seq: 5, run: 2, plan: json!({"through_seq": 4, "kept": ["a"]}) },
            json!({"ok": true, "seq": 5, "run": 2, "reset":
                {"through_seq": 4, "plan": {"through_seq": 4, "kept": ["a"]}}}),
        ),
        (
            InboxReply::Refused { code: ErrorCode::UnknownSignal, message: "no".into() },
            json!({"error": {"code": "UNKNOWN_SIGNAL", "message": "no"}}),
        ),
    ];
    for (reply, stored) in replies {
        assert_eq!(reply.to_json(), stored);
        assert_eq!(InboxReply::from_json(&stored), Ok(reply));
    }
}

#[test]
fn a_reply_with_an_unknown_code_is_an_error_not_storage_error() {
    let stored = json!({"error": {"code": "STORAGE_EROR", "message": "typo"}});
    let e = InboxReply::from_json(&stored).unwrap_err();
    assert!(e.contains("not an inbox reply"), "{e}");
    assert!(InboxReply::from_json(&json!({"ok": true})).is_err());
}
