//! Readiness: whether this process can do its work now (the database answers, its schema
//! is the one the binary expects, the node holds its cluster membership).
//!
//! [`Readiness`] runs its [`Probe`]s every interval (each bounded by a timeout, so a
//! database that hangs counts as down) and keeps the latest [`ReadyState`]. Two readers
//! follow it: the admin port's `/readyz` (200, or 503 with the reason) and gRPC health,
//! which [`crate::ServerKit`] keeps at SERVING only while the state is ready. Readers see
//! the cached state, so probes and load balancers never add queries of their own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the probes run by default.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How long one probe may take before it counts as failed.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One readiness check. `Err` carries the reason shown by `/readyz`.
pub trait Probe: Send + Sync + 'static {
    /// A short name for the reason (`database`, `membership`).
    fn name(&self) -> &'static str;
    /// Checks once.
    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>;
}

/// The latest result of the probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyState {
    /// No probe ran yet.
    Starting,
    /// Every probe passed.
    Ready,
    /// The first failing probe and its reason.
    NotReady {
        /// The probe's name.
        check: &'static str,
        /// Why it failed.
        reason: String,
    },
}

impl ReadyState {
    /// Whether the process is ready.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        matches!(self, ReadyState::Ready)
    }
}

/// The readiness of a process. Cheap to clone.
#[derive(Clone)]
pub struct Readiness {
    inner: Arc<Inner>,
}

struct Inner {
    probes: Vec<Arc<dyn Probe>>,
    state: watch::Sender<ReadyState>,
    interval: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").field("state", &self.state()).finish_non_exhaustive()
    }
}

impl Readiness {
    /// Readiness checked by `probes`, in order, with the default interval and timeout.
    #[must_use]
    pub fn new(probes: Vec<Arc<dyn Probe>>) -> Readiness {
        Readiness::with_timing(probes, DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT)
    }

    /// [`Readiness::new`] with an explicit interval and per-probe timeout.
    #[must_use]
    pub fn with_timing(
        probes: Vec<Arc<dyn Probe>>,
        interval: Duration,
        timeout: Duration,
    ) -> Readiness {
        let (state, _) = watch::channel(ReadyState::Starting);
        Readiness { inner: Arc::new(Inner { probes, state, interval, timeout }) }
    }

    /// The latest state.
    #[must_use]
    pub fn state(&self) -> ReadyState {
        self.inner.state.borrow().clone()
    }

    /// A receiver of every change of state.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<ReadyState> {
        self.inner.state.subscribe()
    }

    /// Runs the probes once and publishes the result.
    pub async fn check_now(&self) -> ReadyState {
        let mut state = ReadyState::Ready;
        for probe in &self.inner.probes {
            let outcome = match tokio::time::timeout(self.inner.timeout, probe.check()).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("no answer within {:?}", self.inner.timeout)),
            };
            if let Err(reason) = outcome {
                state = ReadyState::NotReady { check: probe.name(), reason };
                break;
            }
        }
        orbit_metrics::get().ready.set(i64::from(state.is_ready()));
        self.inner.state.send_if_modified(|current| {
            if *current == state {
                return false;
            }
            match &state {
                ReadyState::NotReady { check, reason } => {
                    tracing::warn!(check, %reason, "not ready");
                }
                _ => tracing::info!(state = ?state, "readiness changed"),
            }
            *current = state.clone();
            true
        });
        state
    }

    /// Checks every interval until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            self.check_now().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.inner.interval) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Flag(Arc<AtomicBool>);

    impl Probe for Flag {
        fn name(&self) -> &'static str {
            "database"
        }
        fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
            let up = self.0.load(Ordering::SeqCst);
            Box::pin(async move {
                if up {
                    Ok(())
                } else {
                    Err("connection refused".into())
                }
            })
        }
    }

    struct Hangs;

    impl Probe for Hangs {
        fn name(&self) -> &'static str {
            "membership"
        }
        fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn the_first_failing_probe_names_the_reason_and_recovery_is_seen() {
        let up = Arc::new(AtomicBool::new(true));
        let readiness = Readiness::new(vec![Arc::new(Flag(up.clone()))]);
        assert_eq!(readiness.state(), ReadyState::Starting);
        assert_eq!(readiness.check_now().await, ReadyState::Ready);
        up.store(false, Ordering::SeqCst);
        let rx = readiness.subscribe();
        let state = readiness.check_now().await;
        assert_eq!(
            state,
            ReadyState::NotReady { check: "database", reason: "connection refused".into() }
        );
        assert!(rx.has_changed().unwrap_or(false));
        up.store(true, Ordering::SeqCst);
        assert!(readiness.check_now().await.is_ready());
    }

    // Paused time: the default timeout, waited in none of the test's time.
    #[tokio::test(start_paused = true)]
    async fn a_probe_that_hangs_is_not_ready_after_the_timeout() {
        let readiness = Readiness::with_timing(
            vec![Arc::new(Hangs)],
            DEFAULT_PROBE_INTERVAL,
            DEFAULT_PROBE_TIMEOUT,
        );
        let began = tokio::time::Instant::now();
        let state = readiness.check_now().await;
        assert_eq!(began.elapsed(), DEFAULT_PROBE_TIMEOUT, "answered at the timeout");
        match state {
            ReadyState::NotReady { check, reason } => {
                assert_eq!(check, "membership");
                assert!(reason.contains("no answer"), "{reason}");
            }
            other => panic!("expected not ready, got {other:?}"),
        }
    }
}
