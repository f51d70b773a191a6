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

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Once;
use std::time::Duration;

use orbit_worker::{TaskContext, TaskFailure, Worker, WorkerError, CANCELLED};
use serde_json::{json, Value};

/// `greet`: `{name}` → `{greeting}`.
async fn greet(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let name = ctx.input()["name"].as_str().unwrap_or("world");
    Ok(json!({ "greeting": format!("Hello, {name}!") }))
}

/// `payments.charge`: a charge id, or non-retryable `CARD_DECLINED` for amount 13.
async fn charge(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let input = ctx.input();
    if input["amount"].as_f64() == Some(13.0) {
        return Err(TaskFailure::fatal("CARD_DECLINED", "the card was declined"));
    }
    Ok(json!({ "charge_id": format!("ch-{}", text(&input["order_id"])) }))
}

/// `inventory.reserve`: a reservation, or non-retryable `OUT_OF_STOCK` for sku `none`.
async fn reserve(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let sku = text(&ctx.input()["sku"]);
    if sku == "none" {
        return Err(TaskFailure::fatal("OUT_OF_STOCK", "nothing left of sku none"));
    }
    Ok(json!({ "reservation": format!("r-{sku}") }))
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
