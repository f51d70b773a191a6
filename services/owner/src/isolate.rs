//! Engine work, one execution at a time behind `catch_unwind`.
//!
//! A pass hands every execution's engine work (accept, decide to the fixpoint, batch
//! building) to [`run`] as one job per execution. The jobs run on one long-lived thread with a
//! generous explicit stack (deep but legitimate recursion in the engine does not overflow
//! the small stacks of runtime threads, and the runtime keeps serving health checks and
//! other RPCs meanwhile); a job that panics yields `Err(message)` for that execution only,
//! so the others still commit. A stack overflow or an abort cannot be caught here: those
//! kill the process, and the recovery mode of `recovery.rs` counts them across restarts.
//!
//! A pass of one execution (every step at one in flight) runs inline instead when the
//! calling thread has the engine's stack too ([`engine_sized_thread`], which the `orbit`
//! binary's runtime marks on every thread it starts): handing it to the engine thread and
//! back costs two thread wake-ups per step, the most expensive thing on a VM whose idle CPUs
//! wake slowly (docs/architecture.md, section 3), and one execution's work is short. Passes of
//! several executions, and every pass on an unmarked thread (tests' runtimes), still go to
//! the engine thread.

use crate::error::OwnerError;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tokio::sync::oneshot;

/// Stack of the engine thread. Reserved virtual memory, committed only as far as used.
pub const ENGINE_STACK_BYTES: usize = 128 * 1024 * 1024;

thread_local! {
    /// Whether this thread was started with at least [`ENGINE_STACK_BYTES`] of stack.
    static ENGINE_SIZED: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as started with a stack of at least [`ENGINE_STACK_BYTES`], so
/// a pass of one execution runs on it instead of waking the engine thread. For a runtime's
/// `on_thread_start` together with `thread_stack_size(ENGINE_STACK_BYTES)`; marking a
/// thread with a smaller stack would let deep engine recursion overflow it.
pub fn engine_sized_thread() {
    ENGINE_SIZED.with(|m| m.set(true));
}

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
    if jobs.len() == 1 && ENGINE_SIZED.with(Cell::get) {
        return Ok(run_each(jobs));
    }
    let (tx, rx) = oneshot::channel();
    submit(Box::new(move || {
        let _ = tx.send(run_each(jobs));
    }))?;
    rx.await.map_err(|_| OwnerError::unavailable("the engine thread ended without an answer"))
}

/// Runs `jobs` in order on the calling thread, each behind `catch_unwind`.
fn run_each<T>(jobs: Vec<(String, Job<T>)>) -> Vec<(String, Outcome<T>)> {
    jobs.into_iter()
        .map(|(id, job)| {
            let outcome = catch_unwind(AssertUnwindSafe(job)).map_err(|p| message(&*p));
            (id, outcome)
        })
        .collect()
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

    fn runtime(marked: bool) -> tokio::runtime::Runtime {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(1).enable_all();
        if marked {
            b.thread_stack_size(super::ENGINE_STACK_BYTES)
                .on_thread_start(super::engine_sized_thread);
        }
        b.build().unwrap()
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_string()
    }

    /// Recursion about 16 MiB deep: overflows a runtime thread's default 2 MiB stack.
    fn deep(n: u32) -> u64 {
        let pad = std::hint::black_box([n as u8; 4096]);
        if n == 0 {
            return u64::from(pad[0]);
        }
        deep(n - 1) + u64::from(pad[1])
    }

    #[test]
    fn one_job_runs_inline_on_an_engine_sized_thread() {
        let rt = runtime(true);
        let out = rt.block_on(async {
            tokio::spawn(async {
                let caller = thread_name();
                let jobs: Vec<(String, super::Job<(String, u64)>)> =
                    vec![("a".into(), Box::new(|| (thread_name(), deep(4_000))))];
                (caller, super::run(jobs).await.unwrap())
            })
            .await
            .unwrap()
        });
        let (caller, out) = out;
        let (ran_on, depth) = out[0].1.clone().unwrap();
        assert_eq!(ran_on, caller, "inline: no hand-off to the engine thread");
        assert_ne!(ran_on, "orbit-engine");
        let want: u64 = (1..=4_000u32).map(|n| u64::from(n as u8)).sum();
        assert_eq!(depth, want, "the deep recursion ran to the end");
        let panicked: Vec<(String, super::Job<u32>)> =
            vec![("p".into(), Box::new(|| panic!("inline boom")))];
        let out = rt.block_on(async { tokio::spawn(super::run(panicked)).await.unwrap() }).unwrap();
        assert_eq!(
            out[0],
            ("p".into(), Err("inline boom".into())),
            "a panic is still caught inline"
        );
    }

    #[test]
    fn unmarked_threads_and_several_jobs_use_the_engine_thread() {
        let run = |marked: bool, n: usize| -> Vec<String> {
            runtime(marked).block_on(async move {
                let jobs: Vec<(String, super::Job<String>)> = (0..n)
                    .map(|i| (i.to_string(), Box::new(thread_name) as super::Job<String>))
                    .collect();
                let out = tokio::spawn(super::run(jobs)).await.unwrap().unwrap();
                out.into_iter().map(|(_, o)| o.unwrap()).collect()
            })
        };
        assert_eq!(run(false, 1), vec!["orbit-engine".to_string()]);
        assert_eq!(run(true, 2), vec!["orbit-engine".to_string(); 2]);
    }
}
