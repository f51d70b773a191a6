//! [`Retention`] and [`Deletion`] on PostgreSQL: the sweeper's and the operator's
//! deletes, over the statements of `retention.rs`.

use super::{conn, error, retention, Kind, PgStore};
use crate::error::Result;
use crate::retention::{DeleteOutcome, DoneRowsDeleted, ExecutionsDeleted, OwnersReleased};
use crate::roles::{Deletion, Retention};

#[async_trait::async_trait]
impl Retention for PgStore {
    async fn delete_done_rows(&self, grace_ms: u64, limit: u32) -> Result<DoneRowsDeleted> {
        run!(self, Kind::Write, |c| retention::delete_done_rows(c, grace_ms, limit))
    }

    async fn release_closed_owners(&self, grace_ms: u64, limit: u32) -> Result<OwnersReleased> {
        run!(self, Kind::Write, |c| retention::release_closed_owners(c, grace_ms, limit))
    }

    async fn delete_expired(&self, now_ms: u64, limit: u32) -> Result<ExecutionsDeleted> {
        run!(self, Kind::Write, |c| retention::delete_expired(c, now_ms, limit))
    }

    async fn delete_idle_flow_rows(&self, limit: u32) -> Result<crate::FlowRowsDeleted> {
        run!(self, Kind::Write, |c| retention::delete_idle_flow_rows(c, limit))
    }

    async fn delete_finished_batches(
        &self,
        finished_before_ms: u64,
        limit: u32,
    ) -> Result<crate::BatchesDeleted> {
        run!(self, Kind::Write, |c| retention::delete_finished_batches(
            c,
            finished_before_ms,
            limit
        ))
    }
}

#[async_trait::async_trait]
impl Deletion for PgStore {
    async fn delete_execution(&self, execution_id: &str) -> Result<DeleteOutcome> {
        run!(self, Kind::Write, |c| retention::delete_execution(c, execution_id))
    }
}
