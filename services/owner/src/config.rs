//! The owner's settings ([`OwnerConfig`]) and their defaults.

use orbit_clock::Clock;
use orbit_definition::Limits;
use std::time::Duration;
use tokio::sync::watch;

/// The default `idle_pass`: how long an owner with nothing to do waits for a wake-up
/// before it reads its inbox anyway (a lost notification costs at most this).
pub const IDLE_PASS_SAFETY_NET: Duration = Duration::from_secs(30);

/// With membership changes driving takeover: the longest time between two rounds (the
/// safety net for an orphan no membership change announced, e.g. a round that failed).
pub const TAKEOVER_SAFETY_NET: Duration = Duration::from_secs(30);

/// The default of [`OwnerConfig::evict_after_ms`]: sleeps shorter than a second stay hot.
pub const DEFAULT_EVICT_AFTER_MS: u64 = 1000;

/// Owner settings.
#[derive(Debug, Clone)]
pub struct OwnerConfig {
    /// This node's id (owners rows carry it).
    pub node_id: String,
    /// Server-wide limits.
    pub limits: Limits,
    /// Open executions above which a start is refused (`RESOURCE_EXHAUSTED`); `None`: no
    /// limit. Checked once per start, see `admission`.
    pub max_active_executions: Option<u64>,
    /// Inbox entries taken per pass.
    pub max_batch: u32,
    /// A pass runs at least this often even without wake-ups, after a pass that found
    /// nothing to do (a safety net, not a poll interval: wake-ups drive the owner; issue
    /// 14: an idle owner makes no query of its own between two of them).
    pub idle_pass: Duration,
    /// After a pass that found work (or failed), the next runs within this even without a
    /// wake-up (at most `idle_pass`): entries left pending (a panic counted by the
    /// quarantine, a recovery attempt, a fenced commit, a store error) are retried soon.
    pub retry_pass: Duration,
    /// An owner whose last heartbeat is older than this is dead and its executions are
    /// taken over (used by the takeover loop).
    pub node_timeout_ms: u64,
    /// How often [`crate::Owner::run`] looks for executions of dead owners to take over; `None`
    /// turns takeover off (`orbit dev`: the only owner cannot die without the others).
    /// With `membership_changes` set, this is only the tick that notices a stall of this
    /// process; rounds run on membership changes (see [`crate::Owner::run_takeover`]).
    pub takeover_interval: Option<Duration>,
    /// Bumped whenever the live nodes change (`orbit_cluster::Membership::changes`: read
    /// in the heartbeat's own transaction). Set: takeover rounds run when it moves, while a
    /// round still finds orphaned roots, and at least every [`TAKEOVER_SAFETY_NET`];
    /// `None`: a round every `takeover_interval`.
    pub membership_changes: Option<watch::Receiver<u64>>,
    /// Failed attempts (caught panics, or deaths of the process while applying them) after
    /// which an execution is parked as SUSPENDED (poison quarantine).
    pub max_failures: u32,
    /// How long a finished execution is kept when its workflow sets no `retention`: the
    /// closing commit records `delete_after = closed_at + retention` for the sweeper.
    pub retention_ms: u64,
    /// Where a pass reads `now` (event timestamps, timer due times). Default: the system
    /// clock; tests inject one they move by hand.
    pub clock: Clock,
    /// The built-in adapters enabled (default none: http steps fail `ADAPTER_DISABLED`).
    /// On, an http attempt is queued under `orbit.http` like any task, for the built-in
    /// worker the process runs beside the owner (see `orbit dev --enable-http-step`).
    pub capabilities: orbit_engine::Capabilities,
    /// Bounded memory (see `evict`): an execution left only sleeping or awaiting by a
    /// commit, whose next timer is at least this many milliseconds away, is dropped from
    /// memory and reloaded from its history at its next event. `None`: every open execution
    /// stays in memory.
    pub evict_after_ms: Option<u64>,
}

impl Default for OwnerConfig {
    fn default() -> Self {
        OwnerConfig {
            node_id: "owner-1".into(),
            // The same default as the frontend's: the engine checks every value it records
            // against it (and against a workflow's own, stricter, limit).
            limits: Limits {
                max_payload_bytes: Some(orbit_server_kit::payload::DEFAULT_MAX_PAYLOAD_BYTES),
                ..Limits::default()
            },
            max_active_executions: None,
            max_batch: 4096,
            idle_pass: IDLE_PASS_SAFETY_NET,
            retry_pass: Duration::from_secs(1),
            node_timeout_ms: 10_000,
            takeover_interval: None,
            membership_changes: None,
            max_failures: 3,
            retention_ms: crate::effects::DEFAULT_RETENTION_MS,
            clock: Clock::system(),
            capabilities: orbit_engine::Capabilities::default(),
            evict_after_ms: Some(DEFAULT_EVICT_AFTER_MS),
        }
    }
}
