//! `max_active_executions`: a start is refused with `RESOURCE_EXHAUSTED` while the server
//! holds that many open executions. Counted once per start call (one indexed count), never
//! per step; a start of an id that already exists is an idempotent retry and is let through.
//! The count is a snapshot, so concurrent starts may overshoot by the number in flight: the
//! limit protects the server from runaway load, it is not an exact quota.

use crate::context::Inner;
use crate::error::OwnerError;
use orbit_engine::ErrorCode;

/// Refuses a new execution when the server is at `max_active_executions`.
pub(crate) async fn admit(inner: &Inner, execution_id: &str) -> Result<(), OwnerError> {
    let Some(max) = inner.cfg.max_active_executions else { return Ok(()) };
    let active = inner.store.count_active_executions().await?;
    if active < max {
        return Ok(());
    }
    if inner.store.get_execution(execution_id).await?.is_some() {
        return Ok(());
    }
    Err(OwnerError::new(
        ErrorCode::ResourceExhausted,
        format!(
            "the server holds {active} active executions (max_active_executions {max}); \
             retry once some have finished"
        ),
    ))
}
