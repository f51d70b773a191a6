//! `WatchExecution`: the run's events as they are committed, then its result.
//!
//! The frontend holds no execution state: the stream reads new events from the store each
//! time the owner publishes a change of this execution that concerns it (and every
//! `watch_poll_ms` as a safety net), and ends after the run's terminal event (or follows
//! continue-as-new into the next run when asked). A client that goes away ends the stream.
//! A change says what the commit did (issue 14): a watch of events reads only when the run
//! grew past what it sent, a watch of the result only (`result_only`) only when the run
//! closed; a change without detail is read for, as before. A change that completed the
//! watched run carries its output, and a result-only watch answers from it without reading
//! the history back.

use super::reads::{resolve_run, scoped};
use crate::error::{ApiResult, FrontendError};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::watch_execution_response::Kind;
use orbit_api::v1::{WatchExecutionRequest, WatchExecutionResponse};
use orbit_auth::Action;
use orbit_engine::{State, Status};
use orbit_server_kit::ErrorCode;
use orbit_store::{ExecutionRow, Subscription};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status as GrpcStatus;

/// The server stream of `WatchExecution`.
pub type WatchStream = ReceiverStream<Result<WatchExecutionResponse, GrpcStatus>>;

pub(crate) async fn watch(
    shared: Arc<Shared>,
    scope: &Scope,
    req: WatchExecutionRequest,
) -> ApiResult<WatchStream> {
    let id = orbit_server_kit::validate::id("execution_id", &req.execution_id)?.to_string();
    // Subscribed before the first read, so a commit after that read is seen; the
    // authorisation's read is that first read (a result-only watch looks at the row it got).
    let changes = shared.changes.subscribe(&id);
    // A whole-history watch needs every step's progress, which owners send a frontend only
    // for executions it declared (`worker::lend`); a result watch needs only the changes
    // every reader gets.
    let interest = (!req.result_only).then(|| shared.lending.interest(&id));
    // Checked once: every later run of the execution runs the same workflow.
    let row = match scoped(&shared, scope, Action::Read, &id).await {
        // A debounced start's reserved id says when it will exist.
        Err(FrontendError::Api(e)) if e.code == ErrorCode::ExecutionNotFound => {
            return Err(super::dedupe::pending(&shared, &id)
                .await?
                .unwrap_or(FrontendError::Api(e)));
        }
        other => other?,
    };
    let run = resolve_run(&row, req.run)?;
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let _interest = interest;
        let first = Watching { changes, row: Some(row) };
        // The edge of the stream: an error that ends it is sent as its status.
        if let Err(e) = follow(&shared, &id, run, &req, &tx, first).await {
            let _ = tx.send(Err(e.into())).await;
        }
    });
    Ok(ReceiverStream::new(rx))
}

type Tx = mpsc::Sender<Result<WatchExecutionResponse, GrpcStatus>>;

/// The subscription a watch took before its first read, and the row that read returned.
struct Watching {
    changes: Subscription,
    row: Option<ExecutionRow>,
}

/// Streams until the watched run (or the last followed run) closes or the client leaves.
async fn follow(
    shared: &Shared,
    id: &str,
    mut run: u32,
    req: &WatchExecutionRequest,
    tx: &Tx,
    first: Watching,
) -> ApiResult<()> {
    let poll = Duration::from_millis(shared.config.watch_poll_ms.max(1));
    let Watching { changes, row: mut first_row } = first;
    let mut after = req.after_seq;
    let mut terminal_seen = false;
    let mut read = true;
    // A change said the run closed: no need to look at the row before reading the history.
    let mut known_closed = false;
    loop {
        let closed = if !read {
            false
        } else if known_closed {
            true
        } else if req.result_only {
            // Cheap check on the projection; the history is read once, at the end.
            let row = match first_row.take() {
                Some(row) => Some(row),
                None => shared.store.get_execution(id).await?,
            };
            row.is_some_and(|r| r.run > run || r.status.is_closed())
        } else {
            let events = shared.store.history_after(id, run, after).await?;
            for event in &events {
                let msg = WatchExecutionResponse {
                    kind: Some(Kind::Event(orbit_wire::history_event(event, run))),
                };
                if tx.send(Ok(msg)).await.is_err() {
                    return Ok(());
                }
                after = event.seq;
            }
            // Not `last()`: a late result recorded as stale may follow the terminal event.
            terminal_seen |= events.iter().any(|e| e.event.is_terminal());
            terminal_seen
        };
        if closed {
            let history = shared.store.load_history(id, run).await?;
            let state = State::from_history(&history);
            let closed_at = history.last().map_or(0, |e| e.timestamp_ms);
            if let Some(result) = orbit_wire::execution_result(&state, closed_at) {
                let msg = WatchExecutionResponse { kind: Some(Kind::Result(result)) };
                if tx.send(Ok(msg)).await.is_err() {
                    return Ok(());
                }
            }
            if state.status() == Status::ContinuedAsNew && req.follow_continue_as_new {
                run += 1;
                after = 0;
                terminal_seen = false;
                read = true;
                known_closed = false;
                continue;
            }
            return Ok(());
        }
        tokio::select! {
            seen = changes.changed() => {
                if req.result_only {
                    if let Some(done) = seen.completed(run) {
                        let result = orbit_wire::completed_result(id, run, done);
                        let _ = tx.send(Ok(WatchExecutionResponse { kind: Some(Kind::Result(result)) })).await;
                        return Ok(());
                    }
                }
                read = if req.result_only { seen.closed(run) } else { seen.events_after(run, after) };
                // The result-only watch of a run a change closed (or followed by a later run)
                // reads the history at once; the projection's row would only say the same.
                known_closed = req.result_only
                    && seen.changes.iter().any(|c| c.run > run || (c.run == run && c.closed));
            }
            () = tokio::time::sleep(poll) => read = true,
            () = tx.closed() => return Ok(()),
        }
    }
}
