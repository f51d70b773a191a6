//! `orbit scheduler`: durable timers. Timer notifications (and reconnects) make it look
//! for the earliest due time again; fired timers reach owners through the inbox.

use super::args::SchedulerArgs;
use super::backend::Wakeup;
use super::node::{self, prepare};
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_cluster::{RemoteOwners, RetryPolicy};
use orbit_owner::system_clock;
use orbit_scheduler::Scheduler;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::Notify;

/// Runs a scheduler until SIGINT/SIGTERM.
pub async fn run(args: SchedulerArgs) -> ExitCode {
    let node = match prepare("scheduler", "127.0.0.1:7235", &args.common).await {
        Ok(n) => n,
        Err(code) => return code,
    };
    let timers_changed = Arc::new(Notify::new());
    let owners: Arc<dyn OwnerService> =
        Arc::new(RemoteOwners::new(node.membership.clone(), RetryPolicy::default()));
    let scheduler = Scheduler::new(
        &node.node_id,
        node.database.store.clone(),
        owners,
        timers_changed.clone(),
        system_clock,
    );
    let listen = node.database.listen(
        Arc::new(move |w| {
            if matches!(w, Wakeup::Timers | Wakeup::Reconnected) {
                timers_changed.notify_one();
            }
        }),
        node.shutdown.clone(),
    );
    let beat = node.heartbeat();
    node.announce();
    let served = scheduler
        .serve_with(node.listener, node.shutdown.clone(), args.common.connections.options())
        .await
        .map_err(Into::into);
    node::finish(&node.node_id, served, &node.shutdown, vec![listen, beat]).await
}
