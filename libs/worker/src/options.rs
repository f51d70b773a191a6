//! A worker's settings besides its identity and tasks ([`Options`]), and the session hook.

use std::sync::Arc;
use std::time::Duration;

/// Settings of a [`Worker`](crate::Worker) besides its identity and tasks.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) backoff_initial: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) default_heartbeat_interval: Duration,
    pub(crate) outbox_capacity: Option<usize>,
    pub(crate) cancel_grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            default_heartbeat_interval: Duration::from_secs(10),
            outbox_capacity: None,
            cancel_grace: Duration::from_secs(5),
        }
    }
}

/// A callback run with the session id after each `Welcome`.
pub(crate) type SessionHook = Arc<dyn Fn(&str) + Send + Sync>;
