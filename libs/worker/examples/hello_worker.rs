//! A Rust worker for `examples/definitions/hello.yaml`: `greet` returns
//! `{"greeting": "Hello, <name>!"}`.
//!
//! ```text
//! cargo run -p orbit-worker --example hello_worker -- [ADDRESS] [MAX_TASKS]
//! ```
//!
//! ADDRESS defaults to `127.0.0.1:7233`; with MAX_TASKS the worker drains and exits after
//! that many tasks, otherwise on Ctrl-C.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use orbit_worker::{CancellationToken, TaskContext, TaskFailure, Worker};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct Input {
    name: String,
}

async fn greet(ctx: TaskContext) -> Result<Value, TaskFailure> {
    let input: Input = ctx.input_as()?;
    Ok(json!({ "greeting": format!("Hello, {}!", input.name) }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let address = args.next().unwrap_or_else(|| "127.0.0.1:7233".into());
    let max_tasks: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(0);

    let shutdown = CancellationToken::new();
    let done = Arc::new(AtomicUsize::new(0));
    let (stop, count) = (shutdown.clone(), Arc::clone(&done));
    let worker = Worker::builder(address)
        .max_concurrency(4)
        .task("greet", "1", move |ctx| {
            let (stop, count) = (stop.clone(), Arc::clone(&count));
            async move {
                let result = greet(ctx).await;
                if max_tasks > 0 && count.fetch_add(1, Ordering::SeqCst) + 1 >= max_tasks {
                    stop.cancel();
                }
                result
            }
        })
        .build()?;

    let ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    worker.run(shutdown).await?;
    println!("done after {} task(s)", done.load(Ordering::SeqCst));
    Ok(())
}
