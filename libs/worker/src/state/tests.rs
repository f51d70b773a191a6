//! The session state machine driven by hand: server messages in, worker messages out,
//! without a network or a server.

use super::*;
use crate::task::{CANCELLED, UNHANDLED_EXCEPTION};
use crate::value;
use crate::worker::Worker;
use orbit_api::v1::WorkerMessage;
use serde_json::{json, Value};

fn handlers() -> Arc<Handlers> {
    let worker = Worker::builder("127.0.0.1:1")
        .worker_id("w-test")
        .task("echo", "1", |ctx: TaskContext| async move { Ok(ctx.input().clone()) })
        .task("boom", "1", |_ctx: TaskContext| async move {
            if true {
                panic!("kaboom");
            }
            Ok(Value::Null)
        })
        .task("declined", "1", |_ctx: TaskContext| async move {
            Err(TaskFailure::fatal("CARD_DECLINED", "no funds").with_details(json!({"x": 1})))
        })
        .task("slow", "1", |ctx: TaskContext| async move {
            ctx.heartbeat(json!({"progress": 0.5}));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(Value::Null)
        })
        .task("polite", "1", |ctx: TaskContext| async move {
            // Cooperative: waits for the cancellation and answers it itself.
            ctx.cancellation().cancelled().await;
            Err(TaskFailure::fatal(CANCELLED, format!("observed after attempt {}", ctx.attempt())))
        })
        .task("any", "", |ctx: TaskContext| async move { Ok(json!(ctx.version())) })
        .task("any", "2", |_ctx: TaskContext| async move { Ok(json!("own handler")) })
        .sync_task("blocking", "1", |ctx: TaskContext| {
            std::thread::sleep(Duration::from_millis(5));
            match ctx.input().as_str() {
                Some("panic") => panic!("sync kaboom"),
                _ => Ok(json!({"echo": ctx.input().clone()})),
            }
        })
        .build()
        .expect("valid worker");
    worker.handlers
}

struct Harness {
    st: State,
    events: mpsc::UnboundedReceiver<Event>,
    out: OutTx,
    sent: mpsc::UnboundedReceiver<WorkerMessage>,
}

impl Harness {
    /// Cancelled handlers are dropped at once.
    fn new(max: u32) -> Self {
        Self::with_grace(max, Duration::ZERO)
    }

    fn with_grace(max: u32, grace: Duration) -> Self {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (out, sent) = mpsc::unbounded_channel();
        Self { st: State::new(handlers(), max, 16, grace, events_tx), events, out, sent }
    }

    fn sent(&mut self) -> Vec<Out> {
        let mut v = Vec::new();
        while let Ok(m) = self.sent.try_recv() {
            v.push(m.kind.expect("kind set"));
        }
        v
    }

    fn deliver(&mut self, token: &str, task: &str, input: Value) {
        let task = server_message::Task {
            token: token.into(),
            task: task.into(),
            version: "1".into(),
            input: Some(value::to_proto(&input)),
            attempt: 1,
            ..Default::default()
        };
        let msg = ServerMessage { kind: Some(server_message::Kind::Task(task)) };
        self.st.on_server_message(msg, &self.out).expect("connected");
    }

    fn server(&mut self, kind: server_message::Kind) {
        self.st.on_server_message(ServerMessage { kind: Some(kind) }, &self.out).unwrap();
    }

    async fn next_finished(&mut self) {
        loop {
            let event = self.events.recv().await.expect("event");
            let finished = matches!(event, Event::Finished { .. });
            self.st.on_event(event, Some(&self.out)).unwrap();
            if finished {
                return;
            }
        }
    }
}

fn credits(n: u32) -> Out {
    Out::Credits(worker_message::Credits { n })
}

fn ack(token: &str) -> server_message::Kind {
    server_message::Kind::Ack(server_message::Ack {
        token: token.into(),
        accepted: true,
        reason: String::new(),
    })
}

#[tokio::test]
async fn task_completes_and_its_credit_is_granted_again() {
    let mut h = Harness::new(2);
    h.st.grant(&h.out).unwrap();
    assert_eq!(h.sent(), vec![credits(2)]);

    h.deliver("t1", "echo", json!({"order_id": "o-1", "amount": 1500}));
    assert_eq!(h.st.credits.running(), 1);
    h.next_finished().await;
    let sent = h.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    match &sent[0] {
        Out::Complete(c) => {
            assert_eq!(c.token, "t1");
            assert_eq!(
                value::from_proto_opt(c.output.as_ref()),
                json!({"order_id": "o-1", "amount": 1500})
            );
        }
        other => panic!("expected complete, got {other:?}"),
    }
    assert_eq!(sent[1], credits(1));
    assert_eq!(h.st.outbox.len(), 1, "kept until acked");
    h.server(ack("t1"));
    assert!(h.st.outbox.is_empty());
}

#[tokio::test]
async fn panic_becomes_unhandled_exception() {
    let mut h = Harness::new(1);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "boom", Value::Null);
    h.next_finished().await;
    let sent = h.sent();
    let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
    let error = fail.error.as_ref().unwrap();
    assert_eq!(error.code, UNHANDLED_EXCEPTION);
    assert!(error.message.contains("kaboom"), "{}", error.message);
    assert!(error.retryable);
}

#[tokio::test]
async fn handler_failure_is_reported_as_is() {
    let mut h = Harness::new(1);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "declined", Value::Null);
    h.next_finished().await;
    let sent = h.sent();
    let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
    let error = fail.error.as_ref().unwrap();
    assert_eq!((error.code.as_str(), error.retryable), ("CARD_DECLINED", false));
    assert_eq!(value::from_proto_opt(error.details.as_ref()), json!({"x": 1}));
}

#[tokio::test]
async fn cancel_drops_the_handler_and_reports_cancelled() {
    let mut h = Harness::new(1);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "slow", Value::Null);
    // The handler's own heartbeat arrives first.
    let event = h.events.recv().await.unwrap();
    h.st.on_event(event, Some(&h.out)).unwrap();
    h.server(server_message::Kind::Cancel(server_message::Cancel {
        token: "t1".into(),
        reason: "execution cancelled".into(),
    }));
    h.next_finished().await;
    let sent = h.sent();
    let Out::Heartbeat(hb) = &sent[1] else { panic!("expected heartbeat, got {sent:?}") };
    assert_eq!(hb.tokens, vec!["t1".to_owned()]);
    assert_eq!(value::from_proto_opt(hb.details.as_ref()), json!({"progress": 0.5}));
    let Out::Fail(fail) = &sent[2] else { panic!("expected fail, got {sent:?}") };
    let error = fail.error.as_ref().unwrap();
    assert_eq!(error.code, CANCELLED);
    assert_eq!(error.message, "execution cancelled");
    assert_eq!(sent[3], credits(1));
    assert!(h.st.running.is_empty());
}

#[tokio::test]
async fn cancel_is_delivered_to_the_handler_which_reports_its_own_result() {
    let mut h = Harness::with_grace(1, Duration::from_secs(30));
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "polite", Value::Null);
    h.server(server_message::Kind::Cancel(server_message::Cancel {
        token: "t1".into(),
        reason: "execution cancelled".into(),
    }));
    h.next_finished().await;
    let sent = h.sent();
    let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
    let error = fail.error.as_ref().unwrap();
    assert_eq!((error.code.as_str(), error.retryable), (CANCELLED, false));
    assert_eq!(error.message, "observed after attempt 1", "the handler's own answer");
    assert_eq!(sent[2], credits(1));
}

// Paused time: the grace is a realistic 30 s, and the test takes none of it.
#[tokio::test(start_paused = true)]
async fn a_handler_ignoring_cancel_is_dropped_after_the_grace() {
    let grace = Duration::from_secs(30);
    let mut h = Harness::with_grace(1, grace);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "slow", Value::Null);
    let cancelled_at = tokio::time::Instant::now();
    h.server(server_message::Kind::Cancel(server_message::Cancel {
        token: "t1".into(),
        reason: "execution cancelled".into(),
    }));
    h.next_finished().await;
    let waited = cancelled_at.elapsed();
    assert!(waited >= grace, "dropped after {waited:?}, before the grace");
    assert!(waited < Duration::from_secs(3600), "dropped by the grace, not the handler's end");
    let sent = h.sent();
    let Some(Out::Fail(fail)) = sent.iter().find(|m| matches!(m, Out::Fail(_))) else {
        panic!("expected fail, got {sent:?}")
    };
    assert_eq!(fail.error.as_ref().unwrap().message, "execution cancelled");
}

#[tokio::test]
async fn sync_handlers_report_results_and_panics() {
    let mut h = Harness::new(2);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "blocking", json!("x"));
    h.next_finished().await;
    h.deliver("t2", "blocking", json!("panic"));
    h.next_finished().await;
    let sent = h.sent();
    let complete = sent.iter().find_map(|m| match m {
        Out::Complete(c) if c.token == "t1" => Some(value::from_proto_opt(c.output.as_ref())),
        _ => None,
    });
    assert_eq!(complete, Some(json!({"echo": "x"})), "{sent:?}");
    let fail = sent.iter().find_map(|m| match m {
        Out::Fail(f) if f.token == "t2" => f.error.clone(),
        _ => None,
    });
    let fail = fail.expect("the panic is reported");
    assert_eq!((fail.code.as_str(), fail.retryable), (UNHANDLED_EXCEPTION, true));
    assert!(fail.message.contains("sync kaboom"), "{}", fail.message);
}

#[tokio::test]
async fn a_handler_at_version_empty_serves_versions_without_their_own() {
    let mut h = Harness::new(1);
    h.st.grant(&h.out).unwrap();
    let mut outputs = Vec::new();
    for (token, version) in [("t1", "1"), ("t2", "2")] {
        let task = server_message::Task {
            token: token.into(),
            task: "any".into(),
            version: version.into(),
            attempt: 1,
            ..Default::default()
        };
        h.server(server_message::Kind::Task(task));
        h.next_finished().await;
        for m in h.sent() {
            if let Out::Complete(c) = m {
                outputs.push(value::from_proto_opt(c.output.as_ref()));
            }
        }
    }
    assert_eq!(outputs, vec![json!("1"), json!("own handler")]);
}

#[tokio::test]
async fn task_beyond_granted_credits_is_refused() {
    let mut h = Harness::new(1);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "slow", Value::Null);
    h.deliver("t2", "echo", Value::Null);
    assert_eq!(h.st.credits.running(), 1);
    let sent = h.sent();
    let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
    assert_eq!(fail.token, "t2");
    assert_eq!(fail.error.as_ref().unwrap().code, WORKER_OVER_CAPACITY);
}

#[tokio::test]
async fn unknown_task_fails_and_returns_the_credit() {
    let mut h = Harness::new(1);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "nope", Value::Null);
    let sent = h.sent();
    let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
    assert_eq!(fail.error.as_ref().unwrap().code, TASK_NOT_REGISTERED);
    assert_eq!(sent[2], credits(1));
}

#[tokio::test]
async fn results_finished_offline_are_resent_after_reconnect() {
    let mut h = Harness::new(2);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "echo", json!(1));
    h.deliver("t2", "slow", Value::Null);
    h.sent();
    // The stream breaks; t1 finishes while disconnected.
    h.st.credits.stream_reset();
    loop {
        let event = h.events.recv().await.unwrap();
        let finished = matches!(event, Event::Finished { .. });
        h.st.on_event(event, None).unwrap();
        if finished {
            break;
        }
    }
    assert!(h.sent().is_empty(), "nothing is sent while disconnected");
    // A new stream: resend, a complete heartbeat (t2 runs, t1's result is not acked yet),
    // then grant only the slot t2 does not hold.
    h.st.resend_outbox(&h.out).unwrap();
    h.st.heartbeat_all(&h.out).unwrap();
    h.st.grant(&h.out).unwrap();
    let sent = h.sent();
    assert!(matches!(&sent[0], Out::Complete(c) if c.token == "t1"), "{sent:?}");
    let Out::Heartbeat(hb) = &sent[1] else { panic!("expected a heartbeat: {sent:?}") };
    assert!(hb.complete);
    assert_eq!(hb.tokens, vec!["t2".to_owned(), "t1".to_owned()]);
    assert_eq!(sent[2], credits(1));
}

#[tokio::test]
async fn draining_grants_nothing_and_finishes_after_acks() {
    let mut h = Harness::new(2);
    h.st.grant(&h.out).unwrap();
    h.deliver("t1", "echo", json!("x"));
    h.st.begin_drain(Duration::from_secs(5));
    assert!(!h.st.is_done());
    h.next_finished().await;
    assert!(!h.st.is_done(), "waits for the ack");
    let sent = h.sent();
    assert!(!sent.iter().any(|m| matches!(m, Out::Credits(c) if c.n == 1)), "{sent:?}");
    h.server(ack("t1"));
    assert!(h.st.is_done());
}
