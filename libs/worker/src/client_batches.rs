//! [`Client`]'s batch jobs (`WorkflowService`'s batches: migrate, reset, and any action
//! over a query's executions): start one, describe, list and cancel them, and list a
//! batch's items.

use orbit_api::v1 as pb;

use crate::client::{Client, ClientError};

impl Client {
    /// Starts a batch job that migrates every execution of `workflow` (of `version` when
    /// given; RUNNING ones) to `to_version`, at most `rate_per_second` a second (0: 50);
    /// with `dry_run` nothing is started and the response lists what would happen to each.
    /// See docs/evolving.md, "Batches".
    ///
    /// # Errors
    ///
    /// The server's status: `INVALID_ARGUMENT` (a rate over 1000), `NOT_FOUND` for an
    /// unknown workflow or version, `PERMISSION_DENIED` without `update` on the workflow.
    pub async fn start_batch(
        &self,
        workflow: &str,
        version: Option<&str>,
        to_version: &str,
        rate_per_second: u32,
        dry_run: bool,
    ) -> Result<pb::StartBatchResponse, ClientError> {
        let action =
            pb::batch_action::Action::Migrate(pb::BatchMigrate { to_version: to_version.into() });
        let request = batch_request(workflow, version, &[], action, rate_per_second, dry_run);
        Ok(self.raw().start_batch(request).await?.into_inner())
    }

    /// Starts a batch job that resets every execution of `workflow` (of `version` when
    /// given) in `statuses` (empty: RUNNING) to just before `step` ([`Client::reset`] with
    /// [`Reset::to_step`]), at most `rate_per_second` a second; with `dry_run` nothing is
    /// started and each item carries the reset's plan. See docs/evolving.md, "Batches".
    ///
    /// # Errors
    ///
    /// As [`Client::start_batch`].
    pub async fn start_reset_batch(
        &self,
        workflow: &str,
        version: Option<&str>,
        statuses: &[pb::ExecutionStatus],
        step: &str,
        rate_per_second: u32,
        dry_run: bool,
    ) -> Result<pb::StartBatchResponse, ClientError> {
        let action = pb::batch_action::Action::Reset(pb::BatchReset {
            step: step.into(),
            ..pb::BatchReset::default()
        });
        let request = batch_request(workflow, version, statuses, action, rate_per_second, dry_run);
        Ok(self.raw().start_batch(request).await?.into_inner())
    }

    /// Starts a batch job that applies `action` (cancel, terminate, signal, delete, or
    /// migrate and reset) to every execution a list `query` (docs/queries.md) matches,
    /// ANDed with `workflow` when not empty; the query alone decides the statuses. At most
    /// `rate_per_second` a second (0: 50); `reason` is recorded with each command; with
    /// `dry_run` nothing is started and each item says what would happen.
    ///
    /// For example `start_query_batch("workflow = 'billing' AND status = 'RUNNING'", "",
    /// Action::Cancel(BatchCancel::default()), 100, "outage", false)`.
    ///
    /// # Errors
    ///
    /// As [`Client::start_batch`], and `INVALID_ARGUMENT` (`INVALID_QUERY`, with the
    /// position) for a malformed query.
    pub async fn start_query_batch(
        &self,
        query: &str,
        workflow: &str,
        action: pb::batch_action::Action,
        rate_per_second: u32,
        reason: &str,
        dry_run: bool,
    ) -> Result<pb::StartBatchResponse, ClientError> {
        let mut request = batch_request(workflow, None, &[], action, rate_per_second, dry_run);
        if let Some(selector) = request.selector.as_mut() {
            selector.query = query.into();
        }
        request.reason = reason.into();
        Ok(self.raw().start_batch(request).await?.into_inner())
    }

    /// A batch with its progress.
    ///
    /// # Errors
    ///
    /// The server's status (`NOT_FOUND`, `BATCH_NOT_FOUND`, for an unknown id).
    pub async fn describe_batch(&self, batch_id: &str) -> Result<pb::Batch, ClientError> {
        let request = pb::DescribeBatchRequest { batch_id: batch_id.into() };
        let response = self.raw().describe_batch(request).await?.into_inner();
        Ok(response.batch.unwrap_or_default())
    }

    /// One page of batches, newest first (`page_token`: the previous page's
    /// `next_page_token`, empty for the first).
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn list_batches(
        &self,
        page_token: &str,
    ) -> Result<pb::ListBatchesResponse, ClientError> {
        let request = pb::ListBatchesRequest { page_size: 0, page_token: page_token.into() };
        Ok(self.raw().list_batches(request).await?.into_inner())
    }

    /// One page of a batch's per-execution outcomes, by execution id (only the refused
    /// ones with `only_failed`).
    ///
    /// # Errors
    ///
    /// The server's status (`BATCH_NOT_FOUND` for an unknown id).
    pub async fn list_batch_items(
        &self,
        batch_id: &str,
        only_failed: bool,
        page_token: &str,
    ) -> Result<pb::ListBatchItemsResponse, ClientError> {
        let request = pb::ListBatchItemsRequest {
            batch_id: batch_id.into(),
            page_size: 0,
            page_token: page_token.into(),
            only_failed,
        };
        Ok(self.raw().list_batch_items(request).await?.into_inner())
    }

    /// Cancels a running batch; answers the batch and whether this call cancelled it.
    ///
    /// # Errors
    ///
    /// The server's status (`BATCH_NOT_FOUND` for an unknown id).
    pub async fn cancel_batch(
        &self,
        batch_id: &str,
        reason: &str,
    ) -> Result<pb::CancelBatchResponse, ClientError> {
        let request = pb::CancelBatchRequest { batch_id: batch_id.into(), reason: reason.into() };
        Ok(self.raw().cancel_batch(request).await?.into_inner())
    }
}

/// A `StartBatch` request: `action` on `workflow`'s executions (of `version`) in `statuses`
/// (empty: RUNNING).
fn batch_request(
    workflow: &str,
    version: Option<&str>,
    statuses: &[pb::ExecutionStatus],
    action: pb::batch_action::Action,
    rate_per_second: u32,
    dry_run: bool,
) -> pb::StartBatchRequest {
    pb::StartBatchRequest {
        selector: Some(pb::BatchSelector {
            workflow: workflow.into(),
            version: version.unwrap_or_default().into(),
            statuses: statuses.iter().map(|s| *s as i32).collect(),
            query: String::new(),
        }),
        action: Some(pb::BatchAction { action: Some(action) }),
        rate_per_second,
        dry_run,
        ..pb::StartBatchRequest::default()
    }
}
