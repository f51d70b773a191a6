//! `orbit scheduler`: durable timers. Timer notifications (and reconnects) make it look
//! for the earliest due time again; fired timers reach owners through the inbox. The
//! retention sweeper and the batch runner run beside the timer loop (any number of
//! schedulers may sweep; each runs one batch at a time under a lease).

use super::args::SchedulerArgs;
use super::backend::{Channel, Wakeup};
use super::node::{self, prepare};
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_owner::Clock;
use orbit_scheduler::{BatchRunner, BatchRunnerConfig, Scheduler, Sweeper};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::Notify;

/// Runs a scheduler until SIGINT/SIGTERM.
pub async fn run(args: SchedulerArgs) -> ExitCode {
    // Frontends' reply timeouts are their own flag; only a nonsensical interval is refused.
    if let Err(e) = args.sweep.check(0) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let node = match prepare("scheduler", "127.0.0.1:7235", &args.common).await {
        Ok(n) => n,
        Err(code) => return code,
    };
    let timers_changed = Arc::new(Notify::new());
    let owners: Arc<dyn OwnerService> = Arc::new(node.owners(&args.common));
    let scheduler = Scheduler::new(
        &node.node_id,
        node.database.store.clone(),
        owners.clone(),
        timers_changed.clone(),
        Clock::system(),
    );
    let listen = node.database.listen(
        &[Channel::Timers],
        Arc::new(move |w| {
            if matches!(w, Wakeup::Timers | Wakeup::Reconnected) {
                timers_changed.notify_one();
            }
        }),
        node.shutdown.clone(),
    );
    let sweeper = Sweeper::new(node.database.store.clone(), args.sweep.config(), Clock::system());
    let sweep = {
        let shutdown = node.shutdown.clone();
        tokio::spawn(async move { sweeper.run(shutdown).await })
    };
    // Batch jobs: no change hub here (a scheduler does not listen to every commit), so the
    // runner re-reads each reply until its owner applied it.
    let batches = BatchRunner::new(
        &node.node_id,
        node.database.store.clone(),
        owners.clone(),
        Clock::system(),
        BatchRunnerConfig::default(),
    );
    let batch_task = {
        let shutdown = node.shutdown.clone();
        tokio::spawn(async move { batches.run(shutdown).await })
    };
    let beat = node.heartbeat();
    let connections = node.connections(&args.common);
    node.announce();
    let served = scheduler
        .serve_with(node.listener, node.shutdown.clone(), connections)
        .await
        .map_err(Into::into);
    node::finish(&node.node_id, served, &node.shutdown, vec![listen, beat, sweep, batch_task]).await
}
