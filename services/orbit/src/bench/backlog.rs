//! What `--mode priority` and `--mode fairness` share: starting a backlog of executions,
//! `--concurrency` start calls in flight, and waiting for its tasks to drain.

use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_cli::client::Transport;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The longest a backlog may go without a task finishing before the run gives up.
const DRAIN_STALL: Duration = Duration::from_secs(60);

/// Hooks around one start call of [`start`]: `before` runs just before the call (its task
/// may reach a handler before the call returns), `failed` when the call failed.
pub trait StartHooks: Send + Sync + 'static {
    fn before(&self, _id: &str) {}
    fn failed(&self, _id: &str) {}
}

/// No hooks.
pub struct NoHooks;
impl StartHooks for NoHooks {}

/// Starts `n` executions, `request(i)` each, at most `concurrency` calls in flight, round
/// robin over `channels`; prints progress under `what`. Returns (started, failed).
pub async fn start(
    channels: &[Transport],
    n: u64,
    concurrency: usize,
    what: &str,
    request: impl Fn(u64) -> pb::StartExecutionRequest,
    hooks: Arc<dyn StartHooks>,
) -> anyhow::Result<(u64, u64)> {
    eprintln!("starting {n} {what}");
    let gate = Arc::new(Semaphore::new(concurrency.max(1)));
    let (started, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let began = Instant::now();
    let mut handles = Vec::new();
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await?;
        let channel = channels[usize::try_from(i).unwrap_or(0) % channels.len()].clone();
        let (started, failed, hooks) = (started.clone(), failed.clone(), hooks.clone());
        let request = request(i);
        handles.push(tokio::spawn(async move {
            let id = request.execution_id.clone();
            hooks.before(&id);
            match WorkflowServiceClient::new(channel).start_execution(request).await {
                Ok(_) => started.fetch_add(1, Ordering::Relaxed),
                Err(_) => {
                    hooks.failed(&id);
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
            drop(permit);
        }));
        if i % 1000 == 999 {
            eprint!("\r  {}/{n} started", i + 1);
        }
        if handles.len() >= 4 * concurrency.max(1) {
            handles.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
        }
    }
    for h in handles {
        h.await?;
    }
    let (ok, failed) = (started.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("\r  {ok}/{n} started in {:.1} s ({failed} failed)", began.elapsed().as_secs_f64());
    Ok((ok, failed))
}

/// Waits until `finished` reaches `accepted`; fails when it stalls for [`DRAIN_STALL`].
pub async fn drain(finished: &AtomicU64, accepted: u64, what: &str) -> anyhow::Result<()> {
    let (mut last, mut moved) = (u64::MAX, Instant::now());
    loop {
        let done = finished.load(Ordering::Relaxed);
        if done >= accepted {
            return Ok(());
        }
        if done != last {
            (last, moved) = (done, Instant::now());
        }
        anyhow::ensure!(
            moved.elapsed() < DRAIN_STALL,
            "the backlog stopped draining: {done} of {accepted} {what} ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
