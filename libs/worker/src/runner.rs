//! The task runner: a handler on its own tokio task, guarded against panics and stopped by
//! cancellation, and the conversion of how it ended into the `Complete` or `Fail` message
//! the worker reports.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt as _;
use opentelemetry::trace::FutureExt as _;
use orbit_api::v1::worker_message::{self, Kind as Out};
use orbit_api::v1::TaskError;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::task::{
    Event, Handler, Outcome, TaskContext, TaskFailure, CANCELLED, UNHANDLED_EXCEPTION,
};
use crate::value;

/// Runs a handler on its own tokio task. When `cancel` fires the handler is told (through
/// [`TaskContext::cancellation`]) and has `grace` to return on its own — its own result is
/// then reported, typically a `CANCELLED` failure saying what it cleaned up; after `grace`
/// its future is dropped and the worker reports `CANCELLED` itself. Sends
/// [`Event::Finished`] when done.
pub(crate) fn spawn_task(
    handler: Handler,
    ctx: TaskContext,
    cancel: CancellationToken,
    grace: Duration,
    events: mpsc::UnboundedSender<Event>,
) -> AbortHandle {
    let token = ctx.token().to_owned();
    let trace = crate::trace::task_context(&ctx);
    let handle = tokio::spawn(async move {
        // Calling the handler happens inside the guarded future, so a panic before its
        // first await is caught too. Inside the task span's context when traced.
        let in_span = trace.clone();
        let mut run = std::pin::pin!(AssertUnwindSafe(async move {
            match in_span {
                Some(cx) => handler(ctx).with_context(cx).await,
                None => handler(ctx).await,
            }
        })
        .catch_unwind());
        let ended = |result: std::thread::Result<_>| match result {
            Ok(result) => Outcome::Returned(result),
            Err(panic) => Outcome::Panicked(panic_message(panic.as_ref())),
        };
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => match tokio::time::timeout(grace, &mut run).await {
                Ok(result) => ended(result),
                Err(_) => Outcome::Cancelled,
            },
            result = &mut run => ended(result),
        };
        if let Some(cx) = &trace {
            crate::trace::finish(cx, &outcome);
        }
        let _ = events.send(Event::Finished { token, outcome });
    });
    handle.abort_handle()
}

/// The text of a panic payload.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// The `Complete` or `Fail` message for a finished task.
pub(crate) fn result_message(
    token: String,
    outcome: Outcome,
    cancel_reason: Option<String>,
) -> Out {
    match outcome {
        Outcome::Returned(Ok(output)) => match value::refused(&output, "output") {
            // The server could not take (or even decode) it: fail the attempt instead, so
            // the execution goes on rather than waiting for a result that never arrives.
            Some(refused) => fail_message(token, refused),
            None => Out::Complete(worker_message::Complete {
                token,
                output: value::to_proto_opt(&output),
            }),
        },
        Outcome::Returned(Err(failure)) => fail_message(token, failure),
        Outcome::Panicked(message) => {
            fail_message(token, TaskFailure::unhandled(format!("task handler panicked: {message}")))
        }
        Outcome::Cancelled => {
            let reason = cancel_reason
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "cancelled by the server".to_owned());
            fail_message(token, TaskFailure::fatal(CANCELLED, reason))
        }
    }
}

/// A `Fail` message; an empty code becomes `UNHANDLED_EXCEPTION` (the server requires one).
/// Details over the payload limits are dropped and the payload code reported instead.
pub(crate) fn fail_message(token: String, failure: TaskFailure) -> Out {
    let code = if failure.code.is_empty() { UNHANDLED_EXCEPTION.to_owned() } else { failure.code };
    let refused = failure.details.as_deref().and_then(|d| value::refused(d, "details"));
    let failure = match refused {
        Some(mut refused) => {
            refused.message = format!("{} (the task failed with {code})", refused.message);
            return fail_message(token, refused);
        }
        None => TaskFailure { code, ..failure },
    };
    let code = failure.code;
    Out::Fail(worker_message::Fail {
        token,
        error: Some(TaskError {
            code,
            message: failure.message,
            retryable: failure.retryable,
            details: failure.details.as_deref().and_then(value::to_proto_opt),
        }),
    })
}
