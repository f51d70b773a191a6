//! Engine work off the async runtime, one execution at a time behind `catch_unwind`.
//!
//! A pass hands every execution's engine work (accept, decide to the fixpoint, batch
//! building) to [`run`] as one job per execution. The jobs run on one long-lived thread with a
//! generous explicit stack (deep but legitimate recursion in the engine does not overflow
//! the small stacks of runtime threads, and the runtime keeps serving health checks and
//! other RPCs meanwhile); a job that panics yields `Err(message)` for that execution only,
//! so the others still commit. A stack overflow or an abort cannot be caught here: those
//! kill the process, and the recovery mode of `recovery.rs` counts them across restarts.

use crate::error::OwnerError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tokio::sync::oneshot;

/// Stack of the engine thread. Reserved virtual memory, committed only as far as used.
pub(crate) const ENGINE_STACK_BYTES: usize = 128 * 1024 * 1024;

/// One execution's engine work.
pub(crate) type Job<T> = Box<dyn FnOnce() -> T + Send>;

/// What a job ended with: its value, or the panic message.
pub(crate) type Outcome<T> = Result<T, String>;

/// Runs `jobs` in order on the engine thread; each job's panic is caught and reported as
/// its outcome.
///
/// # Errors
/// `UNAVAILABLE` when the engine thread cannot be started.
pub(crate) async fn run<T: Send + 'static>(
    jobs: Vec<(String, Job<T>)>,
) -> Result<Vec<(String, Outcome<T>)>, OwnerError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let (tx, rx) = oneshot::channel();
    submit(Box::new(move || {
        let out: Vec<(String, Outcome<T>)> = jobs
            .into_iter()
            .map(|(id, job)| {
                let outcome = catch_unwind(AssertUnwindSafe(job)).map_err(|p| message(&*p));
                (id, outcome)
            })
            .collect();
        let _ = tx.send(out);
    }))?;
    rx.await.map_err(|_| OwnerError::unavailable("the engine thread ended without an answer"))
}

/// Work for the engine thread (a batch of jobs that catches its own panics).
type Batch = Box<dyn FnOnce() + Send>;

/// Hands a batch to the one long-lived engine thread of the process, started on first use.
/// One thread, not one per pass: starting a thread with a large stack for every pass cost a
/// quarter of the embedded throughput (docs/benchmarks.md). Passes of one owner are
/// sequential anyway; owners sharing a process (tests) take turns.
fn submit(batch: Batch) -> Result<(), OwnerError> {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::Mutex;
    static ENGINE: Mutex<Option<Sender<Batch>>> = Mutex::new(None);
    let mut engine = ENGINE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let sender = match engine.as_ref() {
        Some(sender) => sender.clone(),
        None => {
            let (sender, receiver) = channel::<Batch>();
            std::thread::Builder::new()
                .name("orbit-engine".into())
                .stack_size(ENGINE_STACK_BYTES)
                .spawn(move || {
                    // Each batch catches its jobs' panics, so one never ends this loop.
                    while let Ok(batch) = receiver.recv() {
                        batch();
                    }
                })
                .map_err(|e| {
                    OwnerError::unavailable(format!("cannot start the engine thread: {e}"))
                })?;
            *engine = Some(sender.clone());
            sender
        }
    };
    drop(engine);
    sender.send(batch).map_err(|_| OwnerError::unavailable("the engine thread is gone"))
}

/// The text of a panic payload.
fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".into()
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_panicking_job_fails_alone() {
        let jobs: Vec<(String, super::Job<u32>)> = vec![
            ("a".into(), Box::new(|| 1)),
            ("b".into(), Box::new(|| panic!("boom"))),
            ("c".into(), Box::new(|| 3)),
        ];
        let out = super::run(jobs).await.unwrap();
        assert_eq!(out[0], ("a".into(), Ok(1)));
        assert_eq!(out[1], ("b".into(), Err("boom".into())));
        assert_eq!(out[2], ("c".into(), Ok(3)));
    }
}
