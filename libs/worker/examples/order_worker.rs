//! A Rust worker for `examples/definitions/order-saga.yaml`, configured from the
//! environment (`ORBIT_ADDRESSES`, `ORBIT_TOKEN`, `ORBIT_TLS_CA`, … as in the README).
//!
//! ```text
//! ORBIT_ADDRESSES=127.0.0.1:7233 cargo run -p orbit-worker --example order_worker
//! ```
//!
//! Tasks (all version "1"):
//! - `payments.charge`    `{order_id, amount}` → `{charge_id: "ch-" + order_id}`
//! - `payments.refund`    `{charge_id}`        → `{}`
//! - `inventory.reserve`  `{sku, order}`       → `{reservation: "r-" + sku}`
//! - `inventory.release`  `{sku, order}`       → `{}`
//!
//! Drains on SIGTERM or Ctrl-C: running tasks finish, no new ones are taken.

use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Charge {
    order_id: String,
    amount: f64,
}

#[derive(Deserialize)]
struct Item {
    sku: String,
}

async fn charge(ctx: TaskContext) -> Result<Value, TaskFailure> {
    // A malformed input fails without retrying (`INVALID_INPUT`).
    let input: Charge = ctx.input_as()?;
    // The idempotency key is the same on every attempt of this step: give it to the
    // payment provider so a retried charge is not charged twice.
    eprintln!(
        "charging {} for order {} (key {})",
        input.amount,
        input.order_id,
        ctx.idempotency_key()
    );
    Ok(json!({ "charge_id": format!("ch-{}", input.order_id) }))
}

async fn reserve(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let item: Item = ctx.input_as()?;
    Ok(json!({ "reservation": format!("r-{}", item.sku) }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let worker = Worker::builder_from_env()?
        .task("payments.charge", "1", charge)
        .task("payments.refund", "1", |_ctx| async { Ok(json!({})) })
        .task("inventory.reserve", "1", reserve)
        .task("inventory.release", "1", |_ctx| async { Ok(json!({})) })
        .build()?;
    worker.run_until_signal().await?;
    Ok(())
}
