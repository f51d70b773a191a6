//! The scheduler service: durable timers and schedules.
//!
//! Owners write one timer row per execution (its next wake-up) in the same transaction as
//! the events that move it. The scheduler keeps the earliest due time, and when it passes
//! claims the due rows and turns each into a `timer` inbox entry for its owner, deleting the
//! row, in one transaction (`Timers::fire_due_timers`) — so a timer fires once however many
//! schedulers run — then wakes the owner. It sleeps until the next due time, or until an
//! owner says a nearer timer exists; a long idle sleep is only a safety net.
//!
//! Several schedulers may run at once (split mode): nothing here is shared between them but
//! the store. The owner they wake is an `Arc<dyn OwnerService>` — the in-process owner in
//! `orbit dev`, `RemoteOwners` otherwise (its `Wake` returns at once: the inbox insert's
//! notification already woke the owner) — and their wake-ups come from the database's
//! notifications in split mode. A scheduler that finds a due timer it could not fire backs
//! off briefly instead of spinning while another scheduler commits it.
//!
//! Batch jobs (`StartBatch`) run beside the loop, like the retention sweeper: a
//! [`BatchRunner`] leases one batch at a time and walks its executions (see `batches`).
//!
//! Schedules ride the same loop (see `schedules`): each wake-up also claims the due
//! schedules and fires them, and the sleep ends at the earlier of the next timer and the
//! next schedule due time. Writes of schedules wake it like timer writes do (`orbit_timers`
//! in split mode, the same `Notify` in `orbit dev`).
//!
//! Debounced starts (`dedupe: {keep: last}`) ride it too (see `debounces`): each wake-up
//! fires the due ones, and the sleep also ends at the next one due. A start that reserves
//! a new debounce wakes the scheduler the same way.

mod batch_item;
mod batches;
mod debounces;
mod schedules;
mod sweeper;

pub use batches::{
    window as batch_window, BatchRunner, BatchRunnerConfig, BATCH_POLL, LEASE_MS as BATCH_LEASE_MS,
    MAX_IN_FLIGHT as BATCH_MAX_IN_FLIGHT,
};

pub use debounces::LEASE_MS as DEBOUNCE_LEASE_MS;
pub use schedules::LEASE_MS as SCHEDULE_LEASE_MS;

pub use sweeper::{Sweeper, SweeperConfig, Swept};

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_api::internal::v1::scheduler_service_server::SchedulerService;
use orbit_clock::Clock;
use orbit_server_kit::payload::opt_ms_to_timestamp;
use orbit_store::SchedulerStore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// Timer rows fired per transaction.
const FIRE_BATCH: u32 = 1000;

/// The pause when a timer is due but this scheduler fired nothing: another scheduler holds
/// the due rows (PostgreSQL skips rows locked by a concurrent claim) and is firing them.
/// Without it, this one would spin on `next_timer_at` until the other commits.
const CONTENDED: Duration = Duration::from_millis(10);

/// The longest sleep without a wake-up (a safety net for a lost notification: every write
/// that moves a timer or a schedule wakes the scheduler; issue 14: an idle scheduler makes
/// no query of its own in between).
pub const IDLE_SAFETY_NET: Duration = Duration::from_secs(30);

/// The scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: String,
    store: Arc<dyn SchedulerStore>,
    owner: Arc<dyn OwnerService>,
    wake: Arc<Notify>,
    idle: Duration,
    clock: Clock,
    last_scan_ms: AtomicU64,
    schedules: schedules::Firing,
    debounces: debounces::Firing,
}

impl Scheduler {
    /// A scheduler over `store`; `wake` is notified when a nearer timer may exist; `owner` is
    /// woken after timers fire.
    #[must_use]
    pub fn new(
        node_id: &str,
        store: Arc<dyn SchedulerStore>,
        owner: Arc<dyn OwnerService>,
        wake: Arc<Notify>,
        clock: Clock,
    ) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                node_id: node_id.to_string(),
                schedules: schedules::Firing {
                    node_id: node_id.to_string(),
                    store: store.clone(),
                    owner: owner.clone(),
                },
                debounces: debounces::Firing { store: store.clone(), owner: owner.clone() },
                store,
                owner,
                wake,
                idle: IDLE_SAFETY_NET,
                clock,
                last_scan_ms: AtomicU64::new(0),
            }),
        }
    }

    /// Fires timers until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        let inner = &self.inner;
        while !shutdown.is_cancelled() {
            let now = inner.clock.now();
            inner.last_scan_ms.store(now, Ordering::Relaxed);
            let mut claimed = match inner.schedules.pass(now).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot fire schedules");
                    0
                }
            };
            match inner.debounces.pass(now).await {
                // A full batch goes on at once, as a full batch of schedules does.
                Ok(n) if n == debounces::BATCH as usize => claimed = schedules::BATCH as usize,
                Ok(n) => claimed += n,
                Err(e) => tracing::warn!(error = %e, "cannot fire debounced starts"),
            }
            let sleep_for = match self.fire(now).await {
                Ok(n) if n == FIRE_BATCH as usize || claimed == schedules::BATCH as usize => {
                    continue
                }
                Ok(fired) => match self.next_due().await {
                    Ok(Some(at)) => {
                        let wait = Duration::from_millis(at.saturating_sub(inner.clock.now()));
                        if wait.is_zero() && fired == 0 && claimed == 0 {
                            CONTENDED
                        } else {
                            wait.min(inner.idle)
                        }
                    }
                    Ok(None) => inner.idle,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the next timer");
                        Duration::from_millis(200)
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "cannot fire timers");
                    Duration::from_millis(200)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = inner.wake.notified() => {}
                () = tokio::time::sleep(sleep_for) => {}
            }
        }
    }

    /// The earliest of the next timer, the next schedule due time and the next debounced
    /// start due (or fire whose lease runs out).
    async fn next_due(&self) -> Result<Option<u64>, orbit_store::StoreError> {
        let timer = self.inner.store.next_timer_at().await?;
        let schedule = self.inner.store.next_schedule_due_at().await?;
        let debounce = self.inner.store.next_debounce_at().await?;
        Ok([timer, schedule, debounce].into_iter().flatten().min())
    }

    /// Fires what is due at `now`; returns how many timers fired.
    async fn fire(&self, now: u64) -> Result<usize, orbit_store::StoreError> {
        let fired = self.inner.store.fire_due_timers(now, FIRE_BATCH).await?;
        if !fired.is_empty() {
            tracing::debug!(count = fired.len(), "timers fired");
            let lag = &orbit_metrics::get().timer_lag;
            for (timer, _) in &fired {
                lag.observe(orbit_metrics::seconds_between_ms(timer.fire_at_ms, now));
            }
            let ids: Vec<String> = fired.iter().map(|(t, _)| t.execution_id.clone()).collect();
            let owner = self.inner.owner.clone();
            tokio::spawn(async move {
                if let Err(e) = owner
                    .wake(Request::new(pb::OwnerServiceWakeRequest { execution_ids: ids }))
                    .await
                {
                    tracing::warn!(error = %e, "cannot wake the owner after firing timers");
                }
            });
        }
        Ok(fired.len())
    }
}

#[tonic::async_trait]
impl SchedulerService for Scheduler {
    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let next = self.next_due().await.map_err(|e| Status::internal(e.to_string()))?;
        let now = self.inner.clock.now();
        let due = self
            .inner
            .store
            .due_timers(now, FIRE_BATCH)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::StatusResponse {
            node_id: self.inner.node_id.clone(),
            next_fire_at: opt_ms_to_timestamp(next),
            due_timers: due.len() as u64,
            due_schedules: self
                .inner
                .store
                .count_due_schedules(now)
                .await
                .map_err(|e| Status::internal(e.to_string()))?,
            last_scan_at: opt_ms_to_timestamp(Some(
                self.inner.last_scan_ms.load(Ordering::Relaxed),
            )),
        }))
    }
}

impl Scheduler {
    /// Runs the scheduler as its own service: the timer loop plus
    /// `orbit.internal.v1.SchedulerService` (with health and reflection) on `listener`, until
    /// `shutdown`.
    ///
    /// # Errors
    /// The server fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), orbit_server_kit::ServeError> {
        self.serve_with(listener, shutdown, orbit_server_kit::ConnectionOptions::default()).await
    }

    /// [`Scheduler::serve`] with the given keepalive and idle settings for connections.
    ///
    /// # Errors
    /// The server fails.
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
        connections: orbit_server_kit::ConnectionOptions,
    ) -> Result<(), orbit_server_kit::ServeError> {
        let runner = self.clone();
        let stop = shutdown.clone();
        let timers = tokio::spawn(async move { runner.run(stop).await });
        let served = orbit_server_kit::ServerKit::new()
            .connections(connections)
            .register_file_descriptor_set(orbit_api::FILE_DESCRIPTOR_SET)
            .add_service(
                orbit_api::internal::v1::scheduler_service_server::SchedulerServiceServer::new(
                    self,
                ),
            )
            .serve(listener, shutdown.clone())
            .await;
        shutdown.cancel();
        let _ = timers.await;
        served
    }
}
