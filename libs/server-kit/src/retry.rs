//! Retrying a start-up step while the database is only briefly away.
//!
//! A service that has bound its port and announced itself must not exit because one
//! statement met a lost connection or a busy SQLite file: it retries the errors its caller
//! calls transient (the store's `Unavailable`) with a growing pause until the step succeeds
//! or the process is told to stop. Any other error is returned at once.

use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The first pause after a failure; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Runs `step` until it succeeds (`Some`), fails with an error `transient` does not
/// accept (that error), or `shutdown` is cancelled (`None`). The first failure is logged as
/// a warning with `what`, the recovery after it as info.
///
/// # Errors
/// The first error of `step` that is not transient.
pub async fn while_unavailable<T, E, F, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    transient: impl Fn(&E) -> bool,
    mut step: F,
) -> Result<Option<T>, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut pause = FIRST_PAUSE;
    let mut failures = 0u32;
    loop {
        match step().await {
            Ok(value) => {
                if failures > 0 {
                    tracing::info!(what, failures, "the database answers again");
                }
                return Ok(Some(value));
            }
            Err(e) if transient(&e) => {
                if failures == 0 {
                    tracing::warn!(what, error = %e, "database unavailable; retrying");
                }
                failures += 1;
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A stand-in for the store's error: transient or not.
    #[derive(Debug, PartialEq)]
    enum StoreError {
        Unavailable(&'static str),
        Storage(&'static str),
    }

    impl std::fmt::Display for StoreError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    type Result<T> = std::result::Result<T, StoreError>;

    fn unavailable(e: &StoreError) -> bool {
        matches!(e, StoreError::Unavailable(_))
    }

    // Paused time: the pauses between tries are real ones, and cost the test nothing.
    #[tokio::test(start_paused = true)]
    async fn unavailable_is_retried_until_it_succeeds() {
        let tries = AtomicU32::new(0);
        let stop = CancellationToken::new();
        let began = tokio::time::Instant::now();
        let got = while_unavailable("test", &stop, unavailable, || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(StoreError::Unavailable("busy")),
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(got.expect("no error"), Some(2));
        assert_eq!(tries.load(Ordering::SeqCst), 3);
        // Two pauses, the second longer than the first.
        assert!(began.elapsed() > FIRST_PAUSE * 2, "retried after {:?}", began.elapsed());
    }

    #[tokio::test]
    async fn other_errors_are_returned_at_once() {
        let tries = AtomicU32::new(0);
        let stop = CancellationToken::new();
        let got: Result<Option<()>> = while_unavailable("test", &stop, unavailable, || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::Storage("disk full"))
        })
        .await;
        assert!(matches!(got, Err(StoreError::Storage(_))), "{got:?}");
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_shutdown_ends_the_retries() {
        let stop = CancellationToken::new();
        stop.cancel();
        let got: Result<Option<()>> = while_unavailable("test", &stop, unavailable, || async {
            Err(StoreError::Unavailable("gone"))
        })
        .await;
        assert!(matches!(got, Ok(None)), "{got:?}");
    }
}
