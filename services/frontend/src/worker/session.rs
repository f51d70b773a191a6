//! One worker's `Session` stream: hello/welcome, the dispatcher that pushes claimed tasks
//! while the worker has credits, results with acks after commit, pings, and the cleanup
//! that hands the in-flight attempts to `loss` when the stream ends or goes silent.

use super::registry::{Session, WorkerMeta};
use super::results;
use super::supervise::{supervise, Supervised};
use crate::error::{err, invalid, ApiResult};
use crate::scope::Scope;
use crate::validate;
use crate::Shared;
use orbit_api::v1::server_message::{self, Ack, Ping, Task, Welcome};
use orbit_api::v1::worker_message::{Hello, Kind};
use orbit_api::v1::{ServerMessage, TraceContext, WorkerMessage};
use orbit_server_kit::payload::{json_to_proto, ms_to_duration, ms_to_timestamp};
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::{TaskRow, DISPATCHED_APPLY_DELAY};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

pub(crate) type Tx = mpsc::Sender<Result<ServerMessage, Status>>;

pub(crate) fn msg(kind: server_message::Kind) -> Result<ServerMessage, Status> {
    Ok(ServerMessage { kind: Some(kind) })
}

/// Runs a session to its end. Errors that end the stream are sent on it.
/// `caller` is the authenticated identity, if auth is on; its task patterns bound the hello.
/// `scope` is the same caller when its task patterns restrict it: results for tokens this
/// session did not claim are checked against them.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut inbound: Streaming<WorkerMessage>,
    tx: Tx,
    caller: Option<Arc<orbit_auth::Identity>>,
    scope: Scope,
) {
    let timeout = shared.config.session_timeout();
    let hello = match tokio::time::timeout(timeout, inbound.message()).await {
        Ok(Ok(Some(WorkerMessage { kind: Some(Kind::Hello(hello)) }))) => hello,
        // What worker.proto documents for a first message that is not a valid hello:
        // `INVALID_ARGUMENT` naming the field (`open` does the same for a hello that is
        // there but invalid). Later protocol mistakes stay `PROTOCOL_ERROR`.
        Ok(Ok(Some(_))) => {
            let e = invalid("hello", "the first message of a session must be `hello`");
            let _ = tx.send(Err(e)).await;
            return;
        }
        Ok(Ok(None)) => return,
        Ok(Err(status)) => return end_with(&tx, status).await,
        Err(_) => {
            let e = err(ErrorCode::ProtocolError, "no `hello` within the session timeout");
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    if let Err(e) = super::admit::admit(caller.as_deref(), &hello) {
        let _ = tx.send(Err(e)).await;
        return;
    }
    let principal = caller.as_ref().map(|c| c.name.clone());
    let session = match open(&hello) {
        Ok(session) => Arc::new(session.with_principal(principal)),
        Err(e) => {
            let _ = tx.send(Err(e)).await;
            return;
        }
    };
    // The SDK and runtime tell an operator which client library (and version) a worker
    // runs, for version compatibility questions; `ListWorkers` shows them too.
    tracing::info!(
        session = %session.id,
        worker_id = %session.worker_id,
        sdk = %hello.sdk,
        runtime = %hello.runtime,
        "worker session opened"
    );
    let welcome = Welcome {
        session_id: session.id.clone(),
        heartbeat_interval: Some(ms_to_duration(
            u64::try_from(shared.config.heartbeat_interval().as_millis()).unwrap_or(u64::MAX),
        )),
        session_timeout: Some(ms_to_duration(shared.config.session_timeout_ms)),
        warnings: super::welcome::warnings(&shared, &session.meta.tasks).await,
    };
    if tx.send(msg(server_message::Kind::Welcome(welcome))).await.is_err() {
        return;
    }
    session.attach(tx.clone());
    // The same worker back within its session timeout keeps its attempts (worker.proto).
    let adopted = shared.sessions.open(session.clone());
    if !adopted.is_empty() {
        tracing::info!(session = %session.id, worker_id = %session.worker_id, attempts = adopted.len(), "worker reconnected: in-flight attempts kept");
    }
    super::loss::supervise_adopted(&shared, &session, adopted);
    let dispatcher = tokio::spawn(dispatch(shared.clone(), session.clone(), tx.clone()));
    let pinger = tokio::spawn(ping(shared.config.heartbeat_interval(), tx.clone()));

    // Whether the session is over for good: silent for the whole session timeout, or ended
    // by the server for a message it refused (a protocol mistake, a message that does not
    // decode). Only a stream that merely went away (the worker crashed, restarted or lost
    // its connection) keeps its attempts for the worker's return.
    let mut over = false;
    loop {
        match tokio::time::timeout(timeout, inbound.message()).await {
            Ok(Ok(Some(message))) => {
                session.touch();
                if let Err(e) = handle(&shared, &session, &scope, message, &tx).await {
                    let _ = tx.send(Err(e)).await;
                    over = true;
                    break;
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(status)) => {
                tracing::debug!(session = %session.id, %status, "worker stream failed");
                over = status.code() == tonic::Code::InvalidArgument;
                end_with(&tx, status).await;
                break;
            }
            Err(_) => {
                tracing::warn!(session = %session.id, "worker session timed out");
                over = true;
                break;
            }
        }
    }

    // Stop claiming first and wait, so the in-flight set is final before it is handled.
    session.stop();
    session.detach();
    let _ = dispatcher.await;
    pinger.abort();
    shared.sessions.remove(&session.id);
    // Credits it lent to owners come back; a task handed under one meanwhile is lost.
    shared.lending.recall(&session.id);
    if over || !session.has_in_flight() {
        super::loss::lose_in_flight(&shared, &session).await;
    } else {
        super::loss::park(&shared, session.clone());
    }
    tracing::info!(session = %session.id, "worker session closed");
}

/// Ends the stream with the status the inbound side failed with: a worker message that
/// does not decode (invalid UTF-8, nested past protobuf's recursion limit) is answered
/// `INVALID_ARGUMENT` saying what was wrong, never a silent OK. A transport failure (the
/// worker went away) is sent too, to nobody.
async fn end_with(tx: &Tx, status: Status) {
    if status.code() == tonic::Code::InvalidArgument {
        tracing::warn!(error = %status.message(), "a worker message did not decode; closing its stream");
    }
    let _ = tx.send(Err(status)).await;
}

/// Validates a hello into a session.
pub(super) fn open(hello: &Hello) -> ApiResult<Session> {
    let worker_id = validate::id("hello.worker_id", &hello.worker_id)?;
    if hello.tasks.is_empty() {
        return Err(invalid("hello.tasks", "at least one task is required"));
    }
    if hello.max_concurrency == 0 {
        return Err(invalid("hello.max_concurrency", "must be at least 1"));
    }
    let mut names = Vec::new();
    for task in &hello.tasks {
        let name = validate::name("hello.tasks.name", &task.name)?;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    let id = format!("s-{}", validate::random_hex(12)?);
    let meta = WorkerMeta {
        runtime: hello.runtime.clone(),
        sdk: hello.sdk.clone(),
        tasks: hello.tasks.iter().map(|t| (t.name.clone(), t.version.clone())).collect(),
        labels: hello.labels.clone(),
    };
    Ok(Session::new(id, worker_id.to_string(), names, hello.max_concurrency).with_meta(meta))
}

/// One message after hello.
async fn handle(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    scope: &Scope,
    message: WorkerMessage,
    tx: &Tx,
) -> ApiResult<()> {
    let ack = match message.kind {
        Some(Kind::Hello(_)) => {
            return Err(err(ErrorCode::ProtocolError, "`hello` may only be sent once"));
        }
        None => return Err(err(ErrorCode::ProtocolError, "empty worker message")),
        Some(Kind::Credits(credits)) => {
            session.add_credits(credits.n);
            // A drained session lends them to owners at once, not after its dispatcher
            // wakes: a worker sends them with a result, whose commit may hand it the next
            // task (see `lend`; queued tasks waiting meanwhile get them back by a recall).
            if session.drained.load(Ordering::SeqCst) && shared.lending.active() {
                shared.lending.offer(session);
            }
            return Ok(());
        }
        Some(Kind::Drain(_)) => {
            session.drain();
            // No new task for it: owners give back what it lent them.
            shared.lending.recall(&session.id);
            return Ok(());
        }
        Some(Kind::Heartbeat(hb)) => {
            session.beat(&hb.tokens);
            if hb.complete {
                let lost = session.unconfirmed(&hb.tokens);
                if !lost.is_empty() {
                    tracing::info!(session = %session.id, attempts = lost.len(), "the worker restarted: adopted attempts it no longer holds are handed back");
                    super::loss::hand_back(shared, lost).await;
                }
            }
            // Any message keeps the session alive; details are recorded per token.
            if let Err(e) = results::heartbeat(shared, session, scope, &hb.tokens, hb.details).await
            {
                stream_error(e)?;
            }
            return Ok(());
        }
        Some(Kind::Complete(c)) => Report::Complete(c),
        Some(Kind::Fail(f)) => Report::Fail(f),
    };
    // Results are recorded concurrently: each waits for its own commit (and the owner's
    // reply), and a slow one never holds up the others on the stream.
    let (shared, session, tx) = (shared.clone(), session.clone(), tx.clone());
    let token = match &ack {
        Report::Complete(c) => c.token.clone(),
        Report::Fail(f) => f.token.clone(),
    };
    // Before the next message is read: a complete heartbeat after this result must not
    // hand the attempt back while its result is being recorded.
    session.reported(&token);
    // A token this session claimed passed the hello's task-pattern check when it was
    // offered (the dispatcher offers announced tasks only): no look-up. Any other token (a
    // reconnect under the same worker id, or a foreign one) of a pattern-restricted worker
    // is checked by task name. Unrestricted workers skip even the in-flight look-up.
    let scope = if scope.is_restricted() && session.execution_of(&token).is_none() {
        scope.clone()
    } else {
        Scope::default()
    };
    tokio::spawn(async move {
        // The database may be briefly unreachable (a restart, a failover): try again, with
        // backoff, for as long as the session may stay silent. The worker resends only on
        // a new stream, so giving up early would strand the result.
        let deadline = tokio::time::Instant::now() + shared.config.session_timeout();
        let mut pause = std::time::Duration::from_millis(50);
        let outcome = loop {
            let outcome = match &ack {
                Report::Complete(c) => {
                    results::complete(
                        &shared,
                        &scope,
                        &session.worker_id,
                        &c.token,
                        c.output.clone(),
                    )
                    .await
                }
                Report::Fail(f) => {
                    results::fail(&shared, &scope, &session.worker_id, &f.token, f.error.clone())
                        .await
                }
            };
            match outcome {
                Err(e)
                    if e.code() == tonic::Code::Unavailable
                        && tokio::time::Instant::now() + pause < deadline =>
                {
                    tracing::debug!(token = %token, error = %e, "recording a worker result: retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                other => break other,
            }
        };
        let (accepted, reason) = match outcome {
            Ok(o) => (o.accepted, o.reason),
            Err(e) => match stream_error(e) {
                Ok(reason) => (false, reason),
                Err(e) => {
                    // Not acknowledged: the worker keeps the result and sends it again.
                    tracing::warn!(token = %token, error = %e, "cannot record a worker result");
                    return;
                }
            },
        };
        // The result is durable (or refused) at this point; only now is it acknowledged.
        session.changed.notify_waiters();
        let ack = Ack { token, accepted, reason };
        let _ = tx.send(msg(server_message::Kind::Ack(ack))).await;
    });
    Ok(())
}

/// A worker result waiting to be recorded.
enum Report {
    Complete(orbit_api::v1::worker_message::Complete),
    Fail(orbit_api::v1::worker_message::Fail),
}

/// A bad request on the stream (a malformed result, one for another worker's token) is
/// answered as an ack reason and the session goes on; a storage or owner failure ends the
/// stream so the worker retries elsewhere.
fn stream_error(e: Status) -> ApiResult<String> {
    match OrbitError::from_status(&e) {
        Some(o)
            if matches!(
                o.code,
                ErrorCode::InvalidArgument
                    | ErrorCode::PayloadTooLarge
                    | ErrorCode::WorkerMismatch
                    | ErrorCode::PermissionDenied
            ) =>
        {
            Ok(format!("{}: {}", o.code, o.message))
        }
        _ => Err(e),
    }
}

/// Claims tasks for the session while it has credits, woken by "tasks ready", by credits
/// arriving, or by the fallback tick (a safety net, 30 s by default; sooner after a failed
/// claim).
async fn dispatch(shared: Arc<Shared>, session: Arc<Session>, tx: Tx) {
    let fallback = Duration::from_millis(shared.config.dispatch_fallback_ms.max(1));
    // Whether queued tasks may wait for this session (a "tasks ready" wake-up, the start,
    // the safety net): then it claims before it lends. Woken only by its own credits
    // while drained and lending (the split's hand-off, see `lend`), it lends them without
    // a claim: nothing was queued for it since its last claim found nothing.
    let mut must_claim = true;
    // Registered for wake-ups before looking, so none is missed while claiming. "Tasks
    // ready" stays registered until it fires: an iteration woken by something else may
    // skip its claim, so a notification must never fall between two registrations.
    let mut ready = Box::pin(shared.tasks_ready.clone().notified_owned());
    ready.as_mut().enable();
    loop {
        let changed = session.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if session.is_stopped() {
            return;
        }
        let lending = shared.lending.active();
        let drained = session.drained.load(Ordering::SeqCst);
        let mut failed = false;
        if must_claim || !drained || !lending {
            // One claim takes at most `MAX_CLAIM` rows; a full batch loops for more at once.
            // The credits are held meanwhile, so hand-offs (see `handoff`) cannot take them.
            let wanted = session.hold(orbit_store::MAX_CLAIM);
            if wanted > 0 {
                let claimed = shared
                    .store
                    .claim_matching(
                        &session.claim,
                        wanted,
                        &shared.config.node_id,
                        &session.id,
                        &session.worker_id,
                    )
                    .await;
                let full = matches!(&claimed, Ok(rows) if rows.len() >= wanted as usize);
                // Nothing more queued for this session: new tasks may be handed to it
                // directly.
                session.drained.store(claimed.is_ok() && !full, Ordering::SeqCst);
                match claimed {
                    Ok(rows) if !rows.is_empty() => {
                        must_claim = false;
                        deliver(&shared, &session, rows, &tx, false).await;
                        session.unhold(wanted);
                        if full {
                            continue;
                        }
                    }
                    Ok(_) => {
                        must_claim = false;
                        session.unhold(wanted);
                    }
                    Err(e) => {
                        session.unhold(wanted);
                        tracing::warn!(session = %session.id, error = %e, "claiming tasks failed");
                        // The store may be briefly away: look again soon, not at the safety
                        // net.
                        failed = true;
                    }
                }
            } else if must_claim && session.lent() > 0 {
                // Queued tasks may wait while owners hold this session's credits: they give
                // back what they have not used, and the session claims then.
                shared.lending.recall(&session.id);
            }
        }
        if lending && !must_claim && session.drained.load(Ordering::SeqCst) {
            shared.lending.offer(&session);
        }
        // With the frontend's queue watch running (`sampler`), a session needs no timer of
        // its own but for a failed claim: the watch's safety-net read wakes it.
        let watched = shared.queue_watched.load(std::sync::atomic::Ordering::SeqCst);
        let timer = async {
            match (failed, watched) {
                (true, _) => tokio::time::sleep(fallback.min(CLAIM_RETRY)).await,
                (false, true) => std::future::pending::<()>().await,
                (false, false) => tokio::time::sleep(fallback).await,
            }
        };
        tokio::select! {
            biased;
            () = &mut ready => {
                must_claim = true;
                ready = Box::pin(shared.tasks_ready.clone().notified_owned());
                ready.as_mut().enable();
            }
            () = &mut changed => {}
            () = timer => must_claim = true,
        }
    }
}

/// The pause before a failed claim is tried again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// Pushes claimed rows to the worker; their owners apply the `dispatched` entries the claim
/// wrote with the results, or when woken [`DISPATCHED_APPLY_DELAY`] later. A row whose push
/// fails stays in flight and is reported uncertain when the session ends. `handed`: the rows
/// were handed off by the owner (see `handoff`), their credits already taken; that owner
/// applies their entries itself (`orbit_owner::handoff`), so they wake no one here.
pub(super) async fn deliver(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    rows: Vec<TaskRow>,
    tx: &Tx,
    handed: bool,
) {
    let mut executions: HashMap<String, Option<Context>> = HashMap::new();
    let mut pushed = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(token) = row.token.clone() else { continue };
        if !handed {
            session.took(&token, &row.execution_id);
        }
        session.note_task(&token, &row.task, row.claimed_at_ms);
        if !executions.contains_key(&row.execution_id) {
            let ctx = context(shared, &row.execution_id, row.run).await;
            executions.insert(row.execution_id.clone(), ctx);
        }
        let ctx = executions.get(&row.execution_id).cloned().flatten();
        let timeouts = ctx
            .as_ref()
            .map(|c| orbit_wire::task_timeouts(&c.def, &row.unit_key))
            .unwrap_or_default();
        let started = row.claimed_at_ms.unwrap_or(row.created_at_ms);
        // The attempt's span (emitted by the owner) is the parent of the worker's task span;
        // `None`, and no work, while traces are off.
        let trace_context =
            orbit_telemetry::traceparent(&row.execution_id, &row.unit_key, row.attempt)
                .map(|traceparent| TraceContext { traceparent, tracestate: String::new() });
        // Both stamps come from the store's clock, so the latency is exact across nodes.
        let m = orbit_metrics::get();
        m.tasks_dispatched.with_label_values(&[&row.task]).inc();
        if handed {
            m.tasks_handed_off.with_label_values(&[&row.task]).inc();
        }
        if row.offer > 1 {
            m.tasks_redelivered.with_label_values(&[&row.task]).inc();
        }
        m.schedule_to_start
            .with_label_values(&[&row.task])
            .observe(orbit_metrics::seconds_between_ms(row.created_at_ms, started));
        let task = Task {
            token,
            execution_id: row.execution_id.clone(),
            workflow: ctx.map(|c| c.workflow).unwrap_or_default(),
            step: row.unit_key,
            task: row.task,
            version: row.task_version,
            input: Some(json_to_proto(row.input)),
            idempotency_key: row.idempotency_key,
            attempt: row.attempt,
            redelivery: row.offer > 1,
            deadline: timeouts.attempt_ms.map(|t| ms_to_timestamp(started.saturating_add(t))),
            trace_context,
            heartbeat_timeout: timeouts.heartbeat_ms.map(ms_to_duration),
        };
        if let Some(ms) = timeouts.heartbeat_ms {
            session.set_heartbeat_ms(&task.token, ms);
        }
        let supervised = Supervised {
            token: task.token.clone(),
            execution_id: task.execution_id.clone(),
            unit: Some((row.run, task.step.clone())),
            heartbeat_ms: timeouts.heartbeat_ms,
        };
        if !handed {
            pushed.push((task.token.clone(), task.execution_id.clone()));
        }
        let _ = tx.send(msg(server_message::Kind::Task(task))).await;
        tokio::spawn(supervise(shared.clone(), session.clone(), tx.clone(), supervised));
    }
    wake_owner_later(shared, session, pushed);
}

/// Wakes the owners of the pushed attempts (token, execution) still in flight on `session`
/// after [`DISPATCHED_APPLY_DELAY`] (the owner records `StepDispatched` from the entry in its
/// next pass, whichever wakes it; a result arriving first is applied together with its
/// entry, in one commit: `pass::pass` reads the inbox after taking the handed results). An attempt no longer in flight had its result recorded
/// (applied with its `dispatched` entry), or was cancelled, timed out or lost with its
/// session; each of those woke its owner itself.
fn wake_owner_later(shared: &Arc<Shared>, session: &Arc<Session>, pushed: Vec<(String, String)>) {
    if pushed.is_empty() {
        return;
    }
    let (shared, session) = (shared.clone(), session.clone());
    tokio::spawn(async move {
        tokio::time::sleep(DISPATCHED_APPLY_DELAY).await;
        let mut executions: Vec<String> = pushed
            .into_iter()
            .filter(|(token, _)| session.execution_of(token).is_some())
            .map(|(_, execution)| execution)
            .collect();
        executions.sort_unstable();
        executions.dedup();
        super::wake_owner(&shared, executions);
    });
}

#[derive(Clone)]
pub(crate) struct Context {
    workflow: String,
    def: Arc<orbit_definition::Definition>,
}

/// The workflow and definition of an execution's run, for the task message; `None` if
/// unknown. A run's workflow and pinned definition never change, so they are remembered
/// (a bounded map: cleared when full) instead of read for every task.
async fn context(shared: &Shared, execution_id: &str, run: u32) -> Option<Context> {
    let key = (execution_id.to_string(), run);
    if let Some(found) = shared.contexts.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Some(found);
    }
    let row = shared.store.get_execution(execution_id).await.ok()??;
    let def = shared
        .defs
        .pinned(shared.store.as_ref(), &row.workflow, &row.version, &row.definition_hash)
        .await
        .ok()?;
    let ctx = Context { workflow: row.workflow, def };
    if row.run == run {
        remember_context(shared, key, ctx.clone());
    }
    Some(ctx)
}

/// Remembers the context of a run an owner described with a handed task (workflow,
/// version, definition hash), so its delivery reads no execution row: the definition
/// comes from the cache (read once per hash).
pub(crate) async fn learn_context(
    shared: &Shared,
    execution_id: &str,
    run: u32,
    (workflow, version, hash): (&str, &str, &str),
) {
    let key = (execution_id.to_string(), run);
    if workflow.is_empty() || shared.contexts.lock().is_ok_and(|m| m.contains_key(&key)) {
        return;
    }
    let Ok(def) = shared.defs.pinned(shared.store.as_ref(), workflow, version, hash).await else {
        return;
    };
    remember_context(shared, key, Context { workflow: workflow.to_string(), def });
}

/// Keeps a run's context (a bounded map: cleared when full).
fn remember_context(shared: &Shared, key: (String, u32), ctx: Context) {
    if let Ok(mut m) = shared.contexts.lock() {
        if m.len() >= CONTEXTS {
            m.clear();
        }
        m.insert(key, ctx);
    }
}

/// How many runs' contexts a frontend remembers.
const CONTEXTS: usize = 10_000;

async fn ping(every: Duration, tx: Tx) {
    loop {
        tokio::time::sleep(every).await;
        if tx.send(msg(server_message::Kind::Ping(Ping {}))).await.is_err() {
            return;
        }
    }
}
