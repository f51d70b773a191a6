//! A Rust worker for Orbit: runs leaf tasks over one `orbit.v1.WorkerService/Session`
//! bidirectional stream.
//!
//! ```no_run
//! use orbit_worker::{TaskContext, TaskFailure, Worker};
//! use serde_json::{json, Value};
//! use tokio_util::sync::CancellationToken;
//!
//! async fn greet(ctx: TaskContext) -> Result<Value, TaskFailure> {
//!     let name = ctx.input()["name"].as_str().unwrap_or("world");
//!     Ok(json!({ "greeting": format!("Hello, {name}!") }))
//! }
//!
//! # async fn demo() -> Result<(), orbit_worker::WorkerError> {
//! let shutdown = CancellationToken::new();
//! Worker::builder("127.0.0.1:7233")
//!     .worker_id("greeter-1")
//!     .max_concurrency(8)
//!     .task("greet", "1", greet)
//!     .run(shutdown)
//!     .await
//! # }
//! ```
//!
//! # Security
//!
//! The builder reads the same variables as the `orbit` CLI unless told otherwise:
//! `ORBIT_TLS_CA`, `ORBIT_TLS_CLIENT_CERT` and `ORBIT_TLS_CLIENT_KEY` for TLS
//! ([`tls_from_env`]; override with [`WorkerBuilder::tls`]) and `ORBIT_TOKEN` for the bearer
//! token sent on the session ([`token_from_env`]; override with
//! [`WorkerBuilder::bearer_token`]). A server that refuses the credentials or the `Hello`
//! (`UNAUTHENTICATED`, `PERMISSION_DENIED`) ends [`Worker::run`] with
//! [`WorkerError::Rejected`]: reconnecting would be refused the same way.
//!
//! # The protocol as implemented
//!
//! One stream at a time per [`Worker`]; everything below refers to `orbit.v1` messages.
//!
//! 1. **Handshake.** Connect (HTTP/2, `host:port` or an `http://`/`https://` URI — or several,
//!    comma-separated, tried in turn: a failed connection or a broken stream moves to the
//!    next frontend; optional `authorization: Bearer` metadata), open `Session` and send `Hello{worker_id, runtime:
//!    "rust <rustc version>", sdk: "orbit-rust <version>", tasks, max_concurrency, labels}` as the first
//!    message. The first server message must be `Welcome` (within the handshake timeout);
//!    its warnings are logged, its `heartbeat_interval` is used (a default when unset).
//! 2. **Start of every stream.** If shutting down, send `Drain{}` first. Re-send every
//!    result still in the outbox (see 5). Then grant `Credits{n}` with
//!    `n = max_concurrency − running − granted-but-unused` (credits are per stream: a new
//!    stream starts with none, while tasks from an earlier stream keep running and keep
//!    their slots).
//! 3. **Tasks.** Each `Task` uses one credit and runs on its own tokio task with a
//!    [`TaskContext`]. The handler is looked up by (task, version), then (task, `""`).
//!    Edge cases, each answered with a `Fail` through the outbox: a task beyond the
//!    granted credits (a server bug) → `WORKER_OVER_CAPACITY` (retryable, not run); no
//!    handler → `TASK_NOT_REGISTERED`
//!    (retryable, so another worker may take the retry). A token already running is ignored;
//!    a token whose result is in the outbox gets that result again.
//! 4. **Results.** A handler's `Ok(value)` becomes `Complete{token, output}` (`null` →
//!    unset); `Err(TaskFailure)` becomes `Fail{token, error}`; a panic becomes
//!    `Fail{code: "UNHANDLED_EXCEPTION", retryable: true}`. Every result first goes into the
//!    outbox, is sent if connected, and then `Credits` for the freed slot are granted
//!    (no credits are granted while draining or while the outbox is full).
//! 5. **Acks and the outbox.** A result stays in the outbox until `Ack{token}` arrives
//!    (accepted or not: a non-accepted ack means recorded and ignored). Results of tasks
//!    that finish while disconnected are kept and sent on the next stream; results sent but
//!    not acked before a stream broke are sent again (the server ignores duplicates by
//!    token).
//! 6. **Heartbeats.** Right after `Welcome` and then every `heartbeat_interval`,
//!    `Heartbeat{tokens: <every running task and unacknowledged result>, complete: true}`,
//!    also with no tasks (keeps the session alive; after a restart under the same worker
//!    id, the server redelivers at once the attempts the previous process left behind). [`TaskContext::heartbeat`] sends `Heartbeat{tokens: [its token], details}`
//!    at once (dropped while disconnected).
//! 7. **Cancel.** `Cancel{token, reason}` cancels the task's [`CancellationToken`]
//!    ([`TaskContext::cancellation`]): the handler observes it cooperatively and has the
//!    [cancel grace](WorkerBuilder::cancel_grace) to return; what it returns is reported.
//!    After the grace the handler's future is dropped and the worker reports
//!    `Fail{code: "CANCELLED", message: reason, retryable: false}`. Either result is
//!    recorded and ignored by the server, but it resolves the token and frees the slot on
//!    both sides; the credit is granted again. A `Cancel` for an unknown token is ignored.
//! 8. **Ping.** Ignored: `worker.proto` says the worker does not answer it (HTTP/2
//!    keepalives and the periodic heartbeat keep the connection observed).
//! 9. **Shutdown.** When the `shutdown` token fires: send `Drain{}`, grant nothing more, let
//!    running tasks finish and report, wait until the outbox is empty (all acked), then
//!    half-close the stream and wait briefly for the server to end it. A task the server
//!    still sends after `Drain` (a race) is run. If the drain timeout passes first,
//!    remaining tasks are aborted and [`Worker::run`] returns
//!    [`WorkerError::DrainTimeout`].
//! 10. **Reconnects.** Any connect error, stream error (except `INVALID_ARGUMENT`,
//!     `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED`, which end `run` with
//!     [`WorkerError::Rejected`]), missing welcome or server-side end of stream leads to a
//!     reconnect after a capped, jittered exponential backoff (reset after each `Welcome`).
//!     Running tasks are not interrupted; the same `worker_id` is sent again so the server
//!     can keep their attempts alive.
//!
//! Deadlines are not enforced by the worker ([`TaskContext::deadline`] is informational:
//! the server times the attempt out). Payloads are converted between
//! `google.protobuf.Value` and `serde_json::Value`; whole numbers within ±2^53 read as JSON
//! integers.

mod backoff;
mod builder;
pub mod client;
mod client_batches;
mod credits;
mod env;
mod error;
mod options;
mod outbox;
mod rate_limit;
mod restore;
mod runner;
mod search;
mod session;
mod signal;
mod start;
mod state;
mod stream;
mod task;
mod trace;
mod value;
mod worker;

pub use builder::{WorkerBuilder, RUNTIME, SDK};
pub use env::{tls_from_env, token_from_env};
pub use orbit_api::tls::ClientTls;
pub use search::ExecutionSearch;
pub use signal::shutdown_on_signals;
pub use task::{
    TaskContext, TaskFailure, CANCELLED, INVALID_INPUT, TASK_NOT_REGISTERED, UNHANDLED_EXCEPTION,
    WORKER_OVER_CAPACITY,
};
pub use tokio_util::sync::CancellationToken;
pub use worker::{Worker, WorkerError};
