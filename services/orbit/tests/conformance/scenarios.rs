//! The scenarios of `sdks/conformance/README.md`, each against its own `orbit dev`; the ninth,
//! "language", is in `language.rs`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::{types, Env, WorkerProc, WorkerSpec, STEP};
use crate::common::secure::{app_client, bearer, identity};
use crate::common::{
    event_payload, free_port, history, history_until, result, start, Server, TempDir,
};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub type Fut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;
type Scenario = for<'a> fn(&'a WorkerSpec) -> Fut<'a>;

/// Every scenario, in the README's order.
pub const ALL: &[(&str, Scenario)] = &[
    ("1 examples", examples),
    ("2 retry", retry),
    ("3 heartbeat + cancel", heartbeat_cancel),
    ("4 SIGKILL mid-task", sigkill),
    ("5 SIGTERM drain", sigterm_drain),
    ("6 reconnect", reconnect),
    ("7 refused identity", refused),
    ("8 Hello", hello),
    ("9 language", super::language::language),
];

/// The result, with the worker's log on a timeout or mismatch.
pub async fn finished(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
    worker: &WorkerProc,
) -> (pb::ExecutionStatus, Value) {
    let mut c2 = c.clone();
    let id2 = id.to_string();
    let wait = tokio::spawn(async move { result(&mut c2, &id2, within).await });
    match wait.await {
        Ok(r) => r,
        Err(e) => panic!("no result for {id} ({e}); worker log:\n{}", worker.log()),
    }
}

fn examples(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start("examples").await;
        let worker = env.worker(spec, "conf-examples").ready().await;
        let mut c = env.client().await;
        start(&mut c, "hello", "hello-1", json!({"name": "Ada"})).await.expect("start");
        let got = finished(&mut c, "hello-1", STEP, &worker).await;
        assert_eq!(
            got,
            (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"})),
            "{}",
            worker.log()
        );

        let order =
            json!({"order_id": "o-1", "amount": 500, "items": [{"sku": "a"}, {"sku": "b"}]});
        start(&mut c, "order-saga", "saga-ok", order).await.expect("start");
        let declined = json!({"order_id": "o-2", "amount": 13, "items": [{"sku": "a"}]});
        start(&mut c, "order-saga", "saga-declined", declined).await.expect("start");
        // The saga sleeps 10 s in `settle`.
        let got = finished(&mut c, "saga-ok", STEP + Duration::from_secs(10), &worker).await;
        let want = json!({"order": "o-1", "charge_id": "ch-o-1", "approved_by": "auto",
                          "reservations": ["r-a", "r-b"]});
        assert_eq!(got, (pb::ExecutionStatus::Completed, want), "{}", worker.log());
        let (status, error) = finished(&mut c, "saga-declined", STEP, &worker).await;
        assert_eq!(status, pb::ExecutionStatus::Failed, "{error}; {}", worker.log());
        assert!(error.as_str().is_some_and(|e| e.starts_with("CARD_DECLINED:")), "{error}");
        let h = history(&mut c, "saga-declined").await;
        let charge_attempts = h.iter().filter(|e| e.event_type == "StepAttemptFailed").count();
        assert_eq!(charge_attempts, 1, "non-retryable: not retried; {:?}", types(&h));
        let failed = h.iter().find(|e| e.event_type == "StepFailed").map(event_payload);
        let code = failed.as_ref().map(|p| p["error"]["code"].clone());
        assert_eq!(code, Some(json!("CARD_DECLINED")), "{:?}", types(&h));
    })
}

fn retry(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start("retry").await;
        let worker = env.worker(spec, "conf-retry").ready().await;
        let mut c = env.client().await;
        start(&mut c, "conformance-flaky", "flaky-1", json!({"fail_times": 2}))
            .await
            .expect("start");
        let (status, output) = finished(&mut c, "flaky-1", STEP, &worker).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{output}; {}", worker.log());
        assert_eq!(output["attempt"], json!(3), "{output}");
        let h = history(&mut c, "flaky-1").await;
        let failed: Vec<(Value, Value, Value)> = h
            .iter()
            .filter(|e| e.event_type == "StepAttemptFailed")
            .map(|e| {
                let p = event_payload(e);
                (p["attempt"].clone(), p["error"]["code"].clone(), p["error"]["message"].clone())
            })
            .collect();
        assert_eq!(
            failed,
            vec![
                (json!(1), json!("FLAKY"), json!("attempt 1")),
                (json!(2), json!("FLAKY"), json!("attempt 2"))
            ],
            "{:?}",
            types(&h)
        );
        let last_failed = h.iter().rposition(|e| e.event_type == "StepAttemptFailed");
        let succeeded = h.iter().position(|e| e.event_type == "StepSucceeded");
        assert!(last_failed < succeeded, "the failures come first: {:?}", types(&h));
        // Every attempt is scheduled with the same key, the one the handler saw last.
        let keys: Vec<Value> = h
            .iter()
            .filter(|e| e.event_type == "StepScheduled")
            .map(|e| event_payload(e)["idempotency_key"].clone())
            .collect();
        assert_eq!(keys.len(), 3, "{:?}", types(&h));
        assert!(keys.iter().all(|k| *k == output["idempotency_key"]), "{keys:?} vs {output}");
    })
}

fn heartbeat_cancel(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start("heartbeat").await;
        let worker = env.worker(spec, "conf-heartbeat").ready().await;
        let mut c = env.client().await;
        start(&mut c, "conformance-heartbeat", "beat-1", json!({})).await.expect("start");
        let h = history_until(&mut c, "beat-1", STEP, |h| {
            h.iter().any(|e| e.event_type == "StepHeartbeat")
        })
        .await;
        let beat = h.iter().find(|e| e.event_type == "StepHeartbeat").expect("a heartbeat");
        let beats = event_payload(beat)["details"]["beats"].as_u64();
        assert!(beats.is_some_and(|n| n >= 1), "details {{beats}}: {:?}", event_payload(beat));
        c.cancel_execution(pb::CancelExecutionRequest {
            execution_id: "beat-1".into(),
            reason: "conformance".into(),
            request_id: String::new(),
        })
        .await
        .expect("cancel");
        // heartbeat_timeout is 10 s: a worker that ignored the cancel would still beat, so
        // the end must come from the cancellation itself, well within STEP.
        let (status, _) = finished(&mut c, "beat-1", STEP, &worker).await;
        assert_eq!(status, pb::ExecutionStatus::Cancelled, "{}", worker.log());
        let h = history(&mut c, "beat-1").await;
        let ended = h.iter().any(|e| {
            e.event_type == "StepCancelled"
                || (e.event_type == "StepAttemptFailed"
                    && event_payload(e)["error"]["code"] == json!("CANCELLED"))
        });
        assert!(ended, "the attempt ends cancelled: {:?}", types(&h));
        // The worker stays healthy and serves the next task (the slot came back).
        start(&mut c, "hello", "after-cancel", json!({"name": "Bo"})).await.expect("start");
        let (status, _) = finished(&mut c, "after-cancel", STEP, &worker).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{}", worker.log());
    })
}

/// The session timeout of the SIGKILL scenario's server: a killed worker's attempt becomes
/// uncertain this long after its stream broke. (A worker with the same id reconnecting
/// within it would adopt the attempt, which is then only handed back after the step's
/// 2-minute heartbeat timeout.)
const SESSION_TIMEOUT: &str = "3000";

/// How long the SIGKILL scenario's task sleeps: it must still run when the worker is killed,
/// one marker poll after it started; the redelivered attempt sleeps as long again (it was
/// 60 s, a minute of every SDK's run spent waiting).
const SLOW_KILL_MS: u64 = 10_000;

fn sigkill(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start_with("sigkill", &["--session-timeout-ms", SESSION_TIMEOUT]).await;
        let mut first = env.worker(spec, "conf-kill").ready().await;
        let mut c = env.client().await;
        let input = json!({ "ms": SLOW_KILL_MS });
        start(&mut c, "conformance-slow", "slow-kill", input).await.expect("start");
        let started = env.wait_started(&first, |s| !s.is_empty()).await;
        let (key, attempt) = started[0].clone();
        first.sigkill();
        // The session timeout (3 s) after the kill the attempt is handed back as uncertain.
        history_until(&mut c, "slow-kill", STEP, |h| {
            h.iter().any(|e| e.event_type == "StepAttemptUncertain")
        })
        .await;
        let second = env.worker(spec, "conf-kill").ready().await;
        // The redelivered attempt sleeps the full time again.
        let within = STEP + Duration::from_millis(SLOW_KILL_MS);
        let (status, output) = finished(&mut c, "slow-kill", within, &second).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{output}; {}", second.log());
        assert_eq!(output["idempotency_key"], json!(key), "the same key: {output}");
        // An uncertain attempt is redelivered, not failed: the same attempt number.
        assert_eq!(output["attempt"], json!(attempt), "{output}");
        assert_eq!(output["worker_id"], json!("conf-kill"), "{output}");
        let h = history(&mut c, "slow-kill").await;
        let dispatched = h.iter().filter(|e| e.event_type == "StepDispatched").count();
        let redelivered = h.iter().any(|e| {
            e.event_type == "StepScheduled" && event_payload(e)["redelivery"] == json!(true)
        });
        assert!(dispatched == 2 && redelivered, "redelivered once: {:?}", types(&h));
        assert!(env.done_marker(&key, attempt), "the redelivered attempt finished");
    })
}

fn sigterm_drain(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start("drain").await;
        let mut first = env.worker(spec, "conf-drain-a").ready().await;
        let mut c = env.client().await;
        for id in ["drain-1", "drain-2"] {
            start(&mut c, "conformance-slow", id, json!({"ms": 1500})).await.expect("start");
        }
        let started = env.wait_started(&first, |s| s.len() == 2).await;
        first.sigterm();
        // The third execution is started once the server knows the worker drains (or it
        // is gone), so it can only be a bug in the SDK that hands it to this worker.
        let deadline = Instant::now() + STEP;
        loop {
            let draining =
                env.workers().await.iter().any(|w| {
                    w.worker_id == "conf-drain-a" && w.sessions.iter().all(|s| s.draining)
                });
            if draining || first.exited().is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "no Drain within {STEP:?}: {}", first.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        start(&mut c, "conformance-slow", "drain-3", json!({"ms": 10})).await.expect("start");
        let status = first.wait_exit(STEP).await;
        assert!(status.success(), "exit 0 after the drain, got {status}; {}", first.log());
        for (key, attempt) in &started {
            assert!(env.done_marker(key, *attempt), "{key} finished before the exit");
        }
        for id in ["drain-1", "drain-2"] {
            let (status, output) = finished(&mut c, id, STEP, &first).await;
            assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
            assert_eq!(output["worker_id"], json!("conf-drain-a"), "{output}");
        }
        assert_eq!(env.started().len(), 2, "drain-3 was not taken: {:?}", env.started());
        let h = history(&mut c, "drain-3").await;
        assert!(!h.iter().any(|e| e.event_type == "StepDispatched"), "{:?}", types(&h));
        let second = env.worker(spec, "conf-drain-b").ready().await;
        let (status, output) = finished(&mut c, "drain-3", STEP, &second).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{output}; {}", second.log());
        assert_eq!(output["worker_id"], json!("conf-drain-b"), "{output}");
    })
}

fn reconnect(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let mut env = Env::start("reconnect").await;
        // A dead frontend first: the worker moves on to the live one.
        let addresses = format!("127.0.0.1:{},{}", free_port(), env.address());
        let mut worker =
            WorkerProc::spawn(spec, &addresses, "conf-reconnect", &env.markers, &env.dir.0, &[])
                .ready()
                .await;
        let mut c = env.client().await;
        start(&mut c, "hello", "before", json!({"name": "Ada"})).await.expect("start");
        assert_eq!(
            finished(&mut c, "before", STEP, &worker).await.0,
            pb::ExecutionStatus::Completed
        );

        let (port, db) = (env.server.port, env.server.db.clone());
        env.server.kill9();
        env.server = Server::start_on(&db, port, &[]).await;
        let mut c = env.client().await;
        start(&mut c, "hello", "after", json!({"name": "Grace"})).await.expect("start");
        let got = finished(&mut c, "after", STEP, &worker).await;
        assert_eq!(
            got,
            (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Grace!"})),
            "{}",
            worker.log()
        );
        assert!(worker.exited().is_none(), "the same worker process: {}", worker.log());
    })
}

const APP_TOKEN: &str = "conformance-app-token-8c1d2e3f4a5b6c7d8e9f";
const BILLING_TOKEN: &str = "conformance-billing-token-0f1e2d3c4b5a6978";

fn refused(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let dir = TempDir::new("conformance-refused");
        let file = dir.0.join("identities.yaml");
        let identities = [
            app_client(APP_TOKEN),
            identity("billing", "worker", BILLING_TOKEN, "    tasks: ['billing.*']\n"),
        ];
        std::fs::write(&file, format!("identities:\n{}", identities.concat())).expect("write");
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(["dev", "--db"])
            .arg(dir.0.join("orbit.db"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn orbit dev");
        let server = Server { child, port, db: dir.0.join("orbit.db") };
        let deadline = Instant::now() + STEP;
        loop {
            if let Ok(mut c) = WorkflowServiceClient::connect(server.address()).await {
                let request = bearer(pb::ListWorkflowsRequest::default(), APP_TOKEN);
                if c.list_workflows(request).await.is_ok() {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "orbit dev --identities did not become ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let markers = dir.0.join("markers");
        std::fs::create_dir_all(&markers).expect("markers");
        let address = format!("127.0.0.1:{port}");
        let token = [("ORBIT_TOKEN", BILLING_TOKEN)];
        let mut worker =
            WorkerProc::spawn(spec, &address, "conf-refused", &markers, &dir.0, &token);
        let status = worker.wait_exit(STEP).await;
        assert!(!status.success(), "a refused worker exits non-zero: {}", worker.log());
        assert!(worker.log().contains("PERMISSION_DENIED"), "{}", worker.log());
    })
}

fn hello(spec: &WorkerSpec) -> Fut<'_> {
    Box::pin(async move {
        let env = Env::start("hello").await;
        let worker = env.worker(spec, "conf-hello").ready().await;
        let workers = env.workers().await;
        let info = workers.iter().find(|w| w.worker_id == "conf-hello");
        let info = info.unwrap_or_else(|| panic!("not listed: {workers:?}; {}", worker.log()));
        let (sdk, version) = info.sdk.split_once(' ').unwrap_or((info.sdk.as_str(), ""));
        assert_eq!(sdk, spec.sdk, "Hello.sdk `{}`", info.sdk);
        assert!(!version.is_empty(), "Hello.sdk `{}` has a version", info.sdk);
        assert!(info.runtime.starts_with(spec.runtime), "Hello.runtime `{}`", info.runtime);
        let mut tasks: Vec<(&str, &str)> =
            info.tasks.iter().map(|t| (t.name.as_str(), t.version.as_str())).collect();
        tasks.sort_unstable();
        assert!(tasks.contains(&("conformance.slow", "1")), "{tasks:?}");
        assert!(tasks.iter().any(|(name, _)| *name == "bench.step"), "{tasks:?}");
        assert!(info.online && info.max_concurrency == 8, "{info:?}");
    })
}
