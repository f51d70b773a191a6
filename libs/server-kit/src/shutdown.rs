//! Turning process signals into a [`CancellationToken`].
//!
//! `main` calls [`signal_token`] once and hands clones of the token to every server and
//! background loop; the first SIGINT or SIGTERM cancels it, and everything drains.

use tokio_util::sync::CancellationToken;

/// Returns a token that is cancelled on the first SIGINT (Ctrl-C) or SIGTERM.
///
/// The signal handlers are installed before this returns, so a signal that arrives right
/// after is not lost; a spawned task waits for it. A handler that cannot be installed is
/// logged, and the token is then cancelled only by the other signal or by its holders.
///
/// # Panics
///
/// When called outside a tokio runtime.
#[must_use]
pub fn signal_token() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    let signals = Signals::install();
    tokio::spawn(async move {
        let signal = signals.recv().await;
        tracing::info!(signal, "shutdown signal received");
        cancel.cancel();
    });
    token
}

#[cfg(unix)]
struct Signals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

#[cfg(unix)]
impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let install = |kind: SignalKind, name: &'static str| {
            signal(kind)
                .inspect_err(|error| tracing::error!(%error, signal = name, "cannot listen"))
                .ok()
        };
        Self {
            interrupt: install(SignalKind::interrupt(), "SIGINT"),
            terminate: install(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// Waits for either signal and returns its name.
    async fn recv(mut self) -> &'static str {
        async fn next(signal: Option<&mut tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.interrupt.as_mut()) => "SIGINT",
            () = next(self.terminate.as_mut()) => "SIGTERM",
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> Self {
        Self
    }

    async fn recv(self) -> &'static str {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, signal = "ctrl-c", "cannot listen");
            std::future::pending::<()>().await;
        }
        "ctrl-c"
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use super::signal_token;

    #[tokio::test]
    async fn sigterm_cancels_the_token() {
        let token = signal_token();
        // No sleep needed: the handler is installed before `signal_token` returns.
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(killed.success());
        tokio::time::timeout(Duration::from_secs(5), token.cancelled())
            .await
            .expect("token cancelled by SIGTERM");
    }
}
