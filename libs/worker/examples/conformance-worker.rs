//! The Rust conformance worker: implements the tasks of the shared SDK conformance contract
//! (sdks/conformance/README.md) with `orbit-worker`, configured from the environment only.
//!
//! ```text
//! ORBIT_ADDRESSES=127.0.0.1:7233 ORBIT_WORKER_ID=rust-1 CONFORMANCE_DIR=/tmp/c \
//!   cargo run -p orbit-worker --example conformance-worker
//! ```
//!
//! Prints `READY` on stdout after the first `Welcome`, logs to stderr, drains and exits 0 on
//! SIGTERM, and exits 1 printing the server's status code (for example
//! `PERMISSION_DENIED`) on stderr when the server refuses the session.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use std::future::{ready, Ready};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Once;
use std::time::Duration;

use orbit_worker::{TaskContext, TaskFailure, Worker, WorkerBuilder, WorkerError, CANCELLED};
use serde_json::{json, Value};

/// `greet`: `{name}` → `{greeting}`.
async fn greet(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let name = ctx.input()["name"].as_str().unwrap_or("world");
    Ok(json!({ "greeting": format!("Hello, {name}!") }))
}

/// `payments.charge`: a charge id, or non-retryable `CARD_DECLINED` for amount 13 and
/// `DECLINED` for amount 120 (the on-failure example's declined card).
async fn charge(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let input = ctx.input();
    if input["amount"].as_f64() == Some(13.0) {
        return Err(TaskFailure::fatal("CARD_DECLINED", "the card was declined"));
    }
    if input["amount"].as_f64() == Some(120.0) {
        return Err(TaskFailure::fatal("DECLINED", "card declined"));
    }
    Ok(json!({ "charge_id": format!("ch-{}", text(&input["order_id"])) }))
}

/// `inventory.reserve`: a reservation `r-<sku>` (`r-<order_id>` without a sku), or
/// non-retryable `OUT_OF_STOCK` for sku `none`.
async fn reserve(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let input = ctx.input();
    if input["sku"].is_null() {
        return Ok(json!({ "reservation": format!("r-{}", text(&input["order_id"])) }));
    }
    let sku = text(&input["sku"]);
    if sku == "none" {
        return Err(TaskFailure::fatal("OUT_OF_STOCK", "nothing left of sku none"));
    }
    Ok(json!({ "reservation": format!("r-{sku}") }))
}

/// A handler of the language examples' tasks: answers at once.
type Answer = Ready<Result<Value, TaskFailure>>;

/// A task answering `{<key>: "<prefix><input.field>"}` (`warehouse.pack`: `{sku}` →
/// `{"box": "box-<sku>"}`).
fn prefixed(
    key: &'static str,
    prefix: &'static str,
    field: &'static str,
) -> impl Fn(TaskContext) -> Answer + Send + Sync + 'static {
    move |ctx| ready(Ok(json!({ key: format!("{prefix}{}", text(&ctx.input()[field])) })))
}

/// A task answering `value` whatever its input.
fn constant(value: Value) -> impl Fn(TaskContext) -> Answer + Send + Sync + 'static {
    move |_ctx| ready(Ok(value.clone()))
}

/// `notify.email`: `{sent: true}` for a notice with a `reason` (on-failure); otherwise the
/// mail is down (continue-on-failure): retryable `SMTP_DOWN` on every attempt.
fn email(ctx: TaskContext) -> Answer {
    if ctx.input()["reason"].is_null() {
        return ready(Err(TaskFailure::retryable("SMTP_DOWN", "mail is down")));
    }
    ready(Ok(json!({ "sent": true })))
}

/// `notify.sms`: `{sent: <phone>}`, non-retryable `BAD_NUMBER` for phone `+0`.
fn sms(ctx: TaskContext) -> Answer {
    let phone = ctx.input()["phone"].clone();
    if phone == json!("+0") {
        return ready(Err(TaskFailure::fatal("BAD_NUMBER", "no such number")));
    }
    ready(Ok(json!({ "sent": phone })))
}

/// `warehouse.ship`: `{tracking: "T-<charge_id>"}`, retryable `NO_CARRIER` for `ch-o-fail`.
fn ship(ctx: TaskContext) -> Answer {
    let charge = text(&ctx.input()["charge_id"]);
    if charge == "ch-o-fail" {
        return ready(Err(TaskFailure::retryable("NO_CARRIER", "no carrier today")));
    }
    ready(Ok(json!({ "tracking": format!("T-{charge}") })))
}

/// `jobs.status`: `running` on attempts 0 and 1, then `done`.
fn job_status(ctx: TaskContext) -> Answer {
    let attempt = ctx.input()["attempt"].as_f64().unwrap_or(0.0);
    let state = if attempt >= 2.0 { "done" } else { "running" };
    ready(Ok(json!({ "state": state })))
}

/// The tasks of the language examples (groups, switch, continue-on-failure, on-failure,
/// race, loops) not in the list above, as their headers describe the workers.
fn language_tasks(builder: WorkerBuilder) -> WorkerBuilder {
    builder
        .task("warehouse.pack", "1", prefixed("box", "box-", "sku"))
        .task("warehouse.unpack", "1", constant(json!({})))
        .task("warehouse.label", "1", prefixed("label", "L-", "order_id"))
        .task("carrier.send", "1", prefixed("tracking", "T-", "label"))
        .task("warehouse.ship", "1", ship)
        .task("refunds.review", "1", constant(json!({ "reviewer": "ops" })))
        .task("notify.email", "1", email)
        .task("notify.sms", "1", sms)
        .task("billing.invoice", "1", prefixed("invoice", "inv-", "order_id"))
        .task("approvals.request", "1", prefixed("ticket", "t-", "request_id"))
        .task("approvals.escalate", "1", constant(json!({ "to": "manager" })))
        .task("jobs.status", "1", job_status)
}

/// `conformance.flaky` (a synchronous handler): retryable `FLAKY` on attempts
/// `1..=fail_times`, then the attempt and idempotency key.
fn flaky(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let fail_times = ctx.input()["fail_times"].as_u64().unwrap_or(0);
    if u64::from(ctx.attempt()) <= fail_times {
        return Err(TaskFailure::retryable("FLAKY", format!("attempt {}", ctx.attempt())));
    }
    Ok(json!({ "attempt": ctx.attempt(), "idempotency_key": ctx.idempotency_key() }))
}

/// `conformance.heartbeat`: heartbeats `{beats: n}` every 100 ms until cancelled, then
/// answers the cancellation itself with `CANCELLED`.
async fn heartbeat(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let mut beats = 0u64;
    loop {
        tokio::select! {
            () = ctx.cancellation().cancelled() => {
                let message = format!("cancellation observed by the handler after {beats} beats");
                return Err(TaskFailure::fatal(CANCELLED, message));
            }
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                beats += 1;
                ctx.heartbeat(json!({ "beats": beats }));
            }
        }
    }
}

/// `conformance.slow` (asynchronous): `.started` marker, sleep `ms`, `.done` marker.
async fn slow(ctx: TaskContext, dir: PathBuf, worker_id: String) -> Result<Value, TaskFailure> {
    let ms = ctx.input()["ms"].as_u64().unwrap_or(0);
    let marker =
        |stage: &str| dir.join(format!("{}.{}.{stage}", ctx.idempotency_key(), ctx.attempt()));
    tokio::fs::write(marker("started"), b"").await?;
    tokio::time::sleep(Duration::from_millis(ms)).await;
    tokio::fs::write(marker("done"), b"").await?;
    Ok(json!({
        "attempt": ctx.attempt(),
        "idempotency_key": ctx.idempotency_key(),
        "worker_id": worker_id,
    }))
}

/// A JSON string as is, any other value as JSON text.
fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// `PermissionDenied` → `PERMISSION_DENIED`: the canonical gRPC code name.
fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

fn build() -> Result<Worker, WorkerError> {
    let mut builder = Worker::builder_from_env()?;
    if std::env::var("ORBIT_MAX_CONCURRENCY").is_err() {
        builder = builder.max_concurrency(8);
    }
    let dir = PathBuf::from(std::env::var("CONFORMANCE_DIR").unwrap_or_else(|_| ".".into()));
    let ready = Once::new();
    let builder = builder
        .on_session(move |_session| {
            ready.call_once(|| println!("READY"));
        })
        .task("greet", "1", greet)
        .task("payments.charge", "1", charge)
        .task("payments.refund", "1", |_ctx| async { Ok(json!({})) })
        .task("inventory.reserve", "1", reserve)
        .task("inventory.release", "1", |_ctx| async { Ok(json!({})) })
        .sync_task("conformance.flaky", "1", flaky)
        .task("conformance.heartbeat", "1", heartbeat)
        // Version "": whatever version `orbit bench` declares (`bench.step: {}` is "1").
        .task("bench.step", "", |ctx: TaskContext| async move { Ok(ctx.input().clone()) });
    let builder = language_tasks(builder);
    // The contract's `worker_id` output is the configured `ORBIT_WORKER_ID`.
    let worker_id = std::env::var("ORBIT_WORKER_ID").unwrap_or_default();
    let builder =
        builder.task("conformance.slow", "1", move |ctx| slow(ctx, dir.clone(), worker_id.clone()));
    builder.build()
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let worker = match build() {
        Ok(worker) => worker,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "conformance worker {} ({} / {})",
        worker.worker_id(),
        orbit_worker::SDK,
        orbit_worker::RUNTIME
    );
    match worker.run_until_signal().await {
        Ok(()) => {
            eprintln!("drained");
            ExitCode::SUCCESS
        }
        Err(WorkerError::Rejected(status)) => {
            eprintln!("error: {}: {}", code_name(status.code()), status.message());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
