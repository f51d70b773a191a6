//! Everything that survives reconnects: credits ([`Credits`]), running tasks, the outbox of
//! unacknowledged results ([`Outbox`]) and the drain. A pure state machine driven by the
//! session loop: server messages and task events in, worker messages out on the current
//! stream (or none while disconnected), so its tests run without a network.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use orbit_api::v1::worker_message::{self, Kind as Out};
use orbit_api::v1::{server_message, ServerMessage};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::credits::Credits;
use crate::error::WorkerError;
use crate::outbox::Outbox;
use crate::runner::{fail_message, result_message, spawn_task};
use crate::stream::{send, Broken, OutTx};
use crate::task::{
    Event, Handlers, TaskContext, TaskFailure, TASK_NOT_REGISTERED, WORKER_OVER_CAPACITY,
};

/// A task running here.
struct Running {
    cancel: CancellationToken,
    abort: AbortHandle,
    cancel_reason: Option<String>,
}

impl Drop for Running {
    /// A task that is forgotten (finished, or the worker stops) is aborted: a no-op when it
    /// already finished.
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// Everything that survives reconnects: credits, running tasks, the outbox, the drain.
pub(crate) struct State {
    handlers: Arc<Handlers>,
    pub(crate) credits: Credits,
    outbox: Outbox<Out>,
    running: HashMap<String, Running>,
    pub(crate) draining: bool,
    pub(crate) drain_deadline: Option<Instant>,
    events: mpsc::UnboundedSender<Event>,
    /// How long a cancelled handler may take to return on its own.
    cancel_grace: Duration,
}

impl State {
    pub(crate) fn new(
        handlers: Arc<Handlers>,
        max_concurrency: u32,
        outbox_capacity: usize,
        cancel_grace: Duration,
        events: mpsc::UnboundedSender<Event>,
    ) -> Self {
        Self {
            handlers,
            credits: Credits::new(max_concurrency),
            outbox: Outbox::new(outbox_capacity),
            running: HashMap::new(),
            draining: false,
            drain_deadline: None,
            events,
            cancel_grace,
        }
    }

    /// Shutdown requested: take no more work, finish within `timeout`.
    pub(crate) fn begin_drain(&mut self, timeout: Duration) {
        info!(
            running = self.running.len(),
            unacknowledged = self.outbox.len(),
            "draining the worker"
        );
        self.draining = true;
        self.drain_deadline = Some(Instant::now() + timeout);
    }

    /// Draining and nothing left to finish or to get acknowledged.
    pub(crate) fn is_done(&self) -> bool {
        self.draining && self.running.is_empty() && self.outbox.is_empty()
    }

    pub(crate) fn drain_timeout_error(&self) -> WorkerError {
        WorkerError::DrainTimeout { running: self.running.len(), unacknowledged: self.outbox.len() }
    }

    /// Grants every free slot, unless draining or the outbox is full.
    pub(crate) fn grant(&mut self, out: &OutTx) -> Result<(), Broken> {
        if self.draining || self.outbox.is_full() {
            return Ok(());
        }
        match self.credits.grant() {
            0 => Ok(()),
            n => send(Some(out), Out::Credits(worker_message::Credits { n })),
        }
    }

    /// Sends every unacknowledged result again (after a reconnect).
    pub(crate) fn resend_outbox(&self, out: &OutTx) -> Result<(), Broken> {
        if !self.outbox.is_empty() {
            info!(results = self.outbox.len(), "re-sending unacknowledged results");
        }
        for result in self.outbox.pending() {
            send(Some(out), result.clone())?;
        }
        Ok(())
    }

    /// Records a result in the outbox and sends it if connected.
    fn report(&mut self, token: String, result: Out, out: Option<&OutTx>) -> Result<(), Broken> {
        self.outbox.push(token, result.clone());
        send(out, result)
    }

    /// A complete `Heartbeat`: every task this process holds, running or with a result not
    /// acknowledged yet (the server hands back adopted attempts it does not list).
    pub(crate) fn heartbeat_all(&self, out: &OutTx) -> Result<(), Broken> {
        let tokens = self.running.keys().chain(self.outbox.tokens()).cloned().collect();
        let heartbeat = worker_message::Heartbeat { tokens, details: None, complete: true };
        send(Some(out), Out::Heartbeat(heartbeat))
    }

    pub(crate) fn on_server_message(
        &mut self,
        message: ServerMessage,
        out: &OutTx,
    ) -> Result<(), Broken> {
        match message.kind {
            Some(server_message::Kind::Task(task)) => self.on_task(task, out),
            Some(server_message::Kind::Ack(ack)) => {
                if self.outbox.ack(&ack.token) && !ack.accepted {
                    debug!(token = %ack.token, reason = %ack.reason, "result recorded but not applied");
                }
                self.grant(out)
            }
            Some(server_message::Kind::Cancel(cancel)) => {
                match self.running.get_mut(&cancel.token) {
                    Some(running) => {
                        debug!(token = %cancel.token, reason = %cancel.reason, "cancelling task");
                        running.cancel_reason = Some(cancel.reason);
                        running.cancel.cancel();
                    }
                    None => debug!(token = %cancel.token, "cancel for a task not running here"),
                }
                Ok(())
            }
            // Keepalive only: the protocol says the worker does not answer it.
            Some(server_message::Kind::Ping(_)) => Ok(()),
            Some(server_message::Kind::Welcome(_)) => {
                warn!("ignoring a second welcome on the same stream");
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn on_task(&mut self, task: server_message::Task, out: &OutTx) -> Result<(), Broken> {
        let token = task.token.clone();
        if !self.credits.take() {
            warn!(%token, task = %task.task, "the server sent a task without a credit; refusing it");
            let failure = TaskFailure::retryable(
                WORKER_OVER_CAPACITY,
                "task delivered without a free credit on this worker",
            );
            return self.report(token.clone(), fail_message(token, failure), Some(out));
        }
        if self.running.contains_key(&token) {
            debug!(%token, "duplicate delivery of a running task");
            return self.grant(out);
        }
        if let Some(result) = self.outbox.get(&token) {
            debug!(%token, "delivery of a finished task; re-sending its result");
            send(Some(out), result.clone())?;
            return self.grant(out);
        }
        // A handler registered at version "" serves any version without its own handler.
        let handler = self
            .handlers
            .get(&(task.task.clone(), task.version.clone()))
            .or_else(|| self.handlers.get(&(task.task.clone(), String::new())))
            .cloned();
        let Some(handler) = handler else {
            warn!(%token, task = %task.task, version = %task.version, "no handler for task");
            let failure = TaskFailure::retryable(
                TASK_NOT_REGISTERED,
                format!("this worker has no handler for {}@{}", task.task, task.version),
            );
            self.report(token.clone(), fail_message(token, failure), Some(out))?;
            return self.grant(out);
        };
        let cancel = CancellationToken::new();
        let ctx = TaskContext::new(&task, cancel.clone(), self.events.clone());
        let abort =
            spawn_task(handler, ctx, cancel.clone(), self.cancel_grace, self.events.clone());
        self.credits.start();
        self.running.insert(token, Running { cancel, abort, cancel_reason: None });
        Ok(())
    }

    /// Handles an event from a task; `out` is `None` while disconnected.
    pub(crate) fn on_event(&mut self, event: Event, out: Option<&OutTx>) -> Result<(), Broken> {
        match event {
            Event::Finished { token, outcome } => {
                let Some(running) = self.running.remove(&token) else {
                    return Ok(());
                };
                self.credits.finish();
                let result = result_message(token.clone(), outcome, running.cancel_reason.clone());
                self.report(token, result, out)?;
                match out {
                    Some(out) => self.grant(out),
                    None => Ok(()),
                }
            }
            Event::Heartbeat { token, details } => {
                if self.running.contains_key(&token) {
                    let heartbeat =
                        worker_message::Heartbeat { tokens: vec![token], details, complete: false };
                    send(out, Out::Heartbeat(heartbeat))
                } else {
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
