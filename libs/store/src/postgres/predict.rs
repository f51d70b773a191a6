//! The owner's usual commit in one round trip: what round trip 1 would read, predicted from
//! the batches alone, and the [`Guard`] whose parameters make [`COMMIT_LOCK_CHECK`](super::sql::COMMIT_LOCK_CHECK)
//! fail the transaction when the rows say otherwise (see `commit.rs`).

use super::plan::Read;
use crate::batch::CommitBatch;
use std::collections::HashSet;
use tokio_postgres::types::ToSql;

/// What a commit expects round trip 1 to read, predicted from the batches alone, with the
/// parameters of [`COMMIT_LOCK_CHECK`](super::sql::COMMIT_LOCK_CHECK), which fails the transaction when the rows say
/// otherwise. Lets the owner's usual commit go in ONE round trip (see `commit.rs`).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Guard {
    owner_ids: Vec<String>,
    /// `None`: the row must not exist.
    owner_epochs: Vec<Option<i64>>,
    execution_ids: Vec<String>,
    execution_runs: Vec<Option<i64>>,
    execution_seqs: Vec<Option<i64>>,
    inbox_seqs: Vec<i64>,
    inbox_ids: Vec<String>,
    /// The workflow whose latest version a start took from a list, and its length.
    definition_name: Option<String>,
    definition_count: Option<i64>,
}

impl Guard {
    /// The statement's parameters: the locked ids and seqs, then the expectations.
    pub(crate) fn params<'a>(
        &'a self,
        ids: &'a Vec<String>,
        seqs: &'a Vec<i64>,
    ) -> [&'a (dyn ToSql + Sync); CHECK_PARAMS] {
        [
            ids,
            seqs,
            &self.owner_ids,
            &self.owner_epochs,
            &self.execution_ids,
            &self.execution_runs,
            &self.execution_seqs,
            &self.inbox_seqs,
            &self.inbox_ids,
            &self.definition_name,
            &self.definition_count,
        ]
    }
}

/// The [`Read`] the batches expect and the [`Guard`] that checks it, or `None` when that
/// cannot be told from the batches alone: an execution in two batches, an existing
/// execution's batch without events or starting another run, a fence together with a new
/// owner, more than one start that checks its versions. Such calls take the two round trips.
///
/// The prediction covers exactly what `plan::plan` looks at: the owners row of a fenced batch
/// (or its absence for a new owner), the executions row (its absence for a new execution,
/// else the run and last seq the first event continues), the inbox entries applied and the
/// number of versions a start saw of its workflow. So
/// when the check passes, planning on the real read would give the same writes.
pub(crate) fn predict(batches: &[CommitBatch]) -> Option<(Read, Guard)> {
    let mut read = Read::default();
    let mut guard = Guard::default();
    let mut seen = HashSet::new();
    for b in batches {
        let id = b.execution_id.as_str();
        if !seen.insert(id) {
            return None;
        }
        match (b.expected_epoch, &b.new_owner) {
            (Some(_), Some(_)) => return None,
            (Some(epoch), None) => {
                read.owners.insert(id.to_string(), epoch);
                guard.owner_ids.push(id.to_string());
                guard.owner_epochs.push(Some(i64::try_from(epoch).ok()?));
            }
            (None, Some(_)) => {
                guard.owner_ids.push(id.to_string());
                guard.owner_epochs.push(None);
            }
            (None, None) => {}
        }
        guard.execution_ids.push(id.to_string());
        if let (Some(row), Some(n)) = (&b.new_execution, b.versions_seen) {
            // One checked start per statement (the owner checks only a start alone in
            // its pass); more take the two round trips, which read every count.
            if guard.definition_name.is_some() {
                return None;
            }
            read.definitions.insert(row.workflow.clone(), i64::from(n));
            guard.definition_name = Some(row.workflow.clone());
            guard.definition_count = Some(i64::from(n));
        }
        if b.new_execution.is_some() {
            guard.execution_runs.push(None);
            guard.execution_seqs.push(None);
        } else {
            let first = b.events.first()?.seq.checked_sub(1)?;
            read.executions.insert(id.to_string(), (b.run, first));
            guard.execution_runs.push(Some(i64::from(b.run)));
            guard.execution_seqs.push(Some(i64::try_from(first).ok()?));
        }
        for d in &b.inbox_done {
            read.pending.insert(d.seq, id.to_string());
            guard.inbox_seqs.push(i64::try_from(d.seq).ok()?);
            guard.inbox_ids.push(id.to_string());
        }
    }
    Some((read, guard))
}

/// Parameters of [`COMMIT_LOCK_CHECK`](super::sql::COMMIT_LOCK_CHECK) ([`Guard::params`]).
pub(crate) const CHECK_PARAMS: usize = 11;
