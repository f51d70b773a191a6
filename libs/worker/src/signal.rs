//! Graceful shutdown on process signals: SIGTERM (what container runtimes and process
//! managers send) and SIGINT (Ctrl-C) start the worker's drain — `Drain` to the server, no
//! new tasks, in-flight tasks finish and their results are acknowledged — and
//! [`Worker::run`] then returns.

use tokio_util::sync::CancellationToken;

use crate::worker::{Worker, WorkerError};

/// A token cancelled at the first SIGTERM or SIGINT (on non-Unix systems: Ctrl-C), for
/// [`Worker::run`]. The handlers are installed before this returns, so a signal sent right
/// after is not missed. Call it inside a tokio runtime.
///
/// # Panics
///
/// Outside a tokio runtime.
#[must_use]
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    tokio::spawn(async move {
        #[cfg(unix)]
        match term {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: draining the worker"),
                    Ok(()) = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining the worker"),
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot watch SIGTERM; only Ctrl-C drains the worker");
                if tokio::signal::ctrl_c().await.is_err() {
                    return;
                }
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        fire.cancel();
    });
    token
}

impl Worker {
    /// Runs the worker until SIGTERM or SIGINT, then drains: see [`shutdown_on_signals`]
    /// and [`Worker::run`]. The usual `main` of a worker process.
    ///
    /// # Errors
    ///
    /// As [`Worker::run`].
    pub async fn run_until_signal(self) -> Result<(), WorkerError> {
        let shutdown = shutdown_on_signals();
        self.run(shutdown).await
    }
}
