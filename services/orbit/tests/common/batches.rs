//! Helpers of the batch tests: start a `migrate` batch, describe it, wait (bounded) until
//! its counters or state say what the test waits for, and read its items.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A `migrate` batch of `workflow`'s executions of `version` (RUNNING ones) to `to`.
pub fn migrate_request(
    workflow: &str,
    version: &str,
    to: &str,
    rate: u32,
) -> pb::StartBatchRequest {
    pb::StartBatchRequest {
        selector: Some(pb::BatchSelector {
            workflow: workflow.into(),
            version: version.into(),
            statuses: vec![],
            query: String::new(),
        }),
        action: Some(pb::BatchAction {
            action: Some(pb::batch_action::Action::Migrate(pb::BatchMigrate {
                to_version: to.into(),
            })),
        }),
        rate_per_second: rate,
        reason: "batch test".into(),
        request_id: String::new(),
        dry_run: false,
    }
}

pub async fn start_batch(
    c: &mut WorkflowServiceClient<Channel>,
    request: pb::StartBatchRequest,
) -> pb::StartBatchResponse {
    c.start_batch(request).await.expect("start a batch").into_inner()
}

pub async fn describe(c: &mut WorkflowServiceClient<Channel>, id: &str) -> pb::Batch {
    let request = pb::DescribeBatchRequest { batch_id: id.into() };
    c.describe_batch(request).await.expect("describe a batch").into_inner().batch.expect("batch")
}

/// Reads the batch until `pred` holds (bounded by `within`); returns it.
pub async fn batch_until(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
    what: &str,
    pred: impl Fn(&pb::Batch) -> bool,
) -> pb::Batch {
    let deadline = Instant::now() + within;
    loop {
        let b = describe(c, id).await;
        if pred(&b) {
            return b;
        }
        assert!(Instant::now() < deadline, "batch {id}: not {what} within {within:?}: {b:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every item of a batch (only the failed ones with `only_failed`), by execution id.
pub async fn items(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    only_failed: bool,
) -> Vec<pb::BatchItem> {
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListBatchItemsRequest {
            batch_id: id.into(),
            page_size: 0,
            page_token,
            only_failed,
        };
        let page = c.list_batch_items(request).await.expect("list items").into_inner();
        all.extend(page.items);
        if page.next_page_token.is_empty() {
            return all;
        }
        page_token = page.next_page_token;
    }
}
