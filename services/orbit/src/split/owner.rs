//! `orbit owner`: the pass loop, the takeover loop and `OwnerService`. Inbox notifications
//! (and reconnects, after which some may have been missed) kick a pass.

use super::args::OwnerArgs;
use super::backend::{Channel, Wakeup};
use super::node::{self, prepare};
use orbit_owner::{Owner, OwnerConfig};
use orbit_store::ChangeHub;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Runs an owner until SIGINT/SIGTERM.
pub async fn run(args: OwnerArgs) -> ExitCode {
    let a = &args.common;
    let node = match prepare("owner", "127.0.0.1:7234", a).await {
        Ok(n) => n,
        Err(code) => return code,
    };
    let owner = Owner::new(
        OwnerConfig {
            node_id: node.node_id.clone(),
            node_timeout_ms: a.node_timeout_ms,
            // The tick that notices a stall of this process; rounds follow the live nodes
            // each heartbeat reads (one transaction per beat, nothing else while idle).
            takeover_interval: Some(Duration::from_millis(a.heartbeat_ms)),
            membership_changes: Some(node.membership.changes()),
            max_failures: args.max_failures,
            retention_ms: crate::retention::millis(args.retention.retention),
            limits: args.limits.engine(),
            max_active_executions: args.limits.max_active_executions,
            // The frontends' built-in worker runs the attempts (`crate::http_step`).
            capabilities: orbit_engine::Capabilities { http: args.http_step.enable_http_step },
            evict_after_ms: args.limits.evict_after_ms.0,
            ..OwnerConfig::default()
        },
        node.database.store.clone(),
        // Frontends and schedulers hear about tasks and timers from the database.
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    );
    let kicked = owner.clone();
    let listen = node.database.listen(
        &[Channel::Inbox],
        Arc::new(move |w| {
            if matches!(w, Wakeup::Inbox | Wakeup::Reconnected) {
                kicked.inbox_notified();
            }
        }),
        node.shutdown.clone(),
    );
    let beat = node.heartbeat();
    let connections = node.connections(a);
    node.announce();
    // Frontends lend this owner free credits of their workers' sessions: new tasks are
    // queued already claimed for them and sent straight over (`orbit_owner::Lenders`).
    // The streams also carry what its commits change, in place of `orbit_changes`.
    let lenders = orbit_owner::Lenders::install(&owner, Some(node.membership.clone()));
    let served =
        owner.serve_lent(node.listener, node.shutdown.clone(), connections, Some(lenders)).await;
    node::finish(&node.node_id, served, &node.shutdown, vec![listen, beat]).await
}
