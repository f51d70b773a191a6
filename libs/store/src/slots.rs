//! Workflow-level concurrency slots (issue 27; docs/flow-control.md, "Workflow
//! concurrency"): the table `execution_slots` holds, per scoped key, the executions that
//! hold a slot (`held`) and those waiting for one, in `ticket` order (start order). A
//! commit whose batches carry [`SlotOp`]s locks each key it touches (PostgreSQL:
//! `pg_advisory_xact_lock`, in key order; SQLite: the single writer), reads the key's rows,
//! and [`plan`] decides here, purely, what changes: rows to insert, grant or delete, and the
//! inbox entries that tell each execution (a `slot_granted` entry, or a `cancel` naming the
//! key), written in the same transaction. So at most `limit` executions hold a key, whichever
//! owner commits, and a grant reaches its execution's owner durably through the inbox.
//!
//! A commit without slot operations reads and writes nothing here.

pub use crate::batch::SlotOp;
use crate::batch::{CommitBatch, NewInbox};
use crate::inbox::{Cancel, SlotGranted};
use crate::InboxMessage;
use orbit_definition::OnLimit;
use std::collections::BTreeMap;

/// One row of `execution_slots`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    /// Start order (assigned by the database on insert).
    pub ticket: i64,
    /// The scoped key.
    pub key: String,
    /// The execution.
    pub execution_id: String,
    /// Whether it holds a slot (else it waits).
    pub held: bool,
    /// The limit it asked with.
    pub limit: u32,
}

/// What a commit changes in the slot table, and the inbox entries it writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlotWrites {
    /// Rows to insert, in ticket order (`ticket` here is only the order).
    pub insert: Vec<SlotRow>,
    /// Existing rows that now hold their slot: (key, execution).
    pub grant: Vec<(String, String)>,
    /// Existing rows to delete: (key, execution).
    pub delete: Vec<(String, String)>,
    /// Entries for the executions concerned (grants, cancels), by execution.
    pub inbox: Vec<NewInbox>,
    /// Requests that wait for a slot after this commit.
    pub queued: u64,
}

/// Every key the batches touch, sorted and once each: the locks to take, in this order.
#[must_use]
pub fn keys_of(batches: &[CommitBatch]) -> Vec<String> {
    let mut keys: Vec<String> = batches
        .iter()
        .flat_map(|b| &b.slots)
        .flat_map(|op| match op {
            SlotOp::Acquire { key, .. } => vec![key.clone()],
            SlotOp::Release { keys } => keys.clone(),
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Whether any batch touches the slot table.
#[must_use]
pub fn any(batches: &[CommitBatch]) -> bool {
    batches.iter().any(|b| !b.slots.is_empty())
}

/// Decides the batches' operations, in order, against the rows of their keys as read
/// under the keys' locks.
#[must_use]
pub fn plan(batches: &[CommitBatch], rows: Vec<SlotRow>) -> SlotWrites {
    let original: BTreeMap<(String, String), bool> =
        rows.iter().map(|r| ((r.key.clone(), r.execution_id.clone()), r.held)).collect();
    let mut next = rows.iter().map(|r| r.ticket).max().unwrap_or(0);
    let mut rows = rows;
    let mut inbox = Vec::new();
    for batch in batches {
        let id = batch.execution_id.as_str();
        for op in &batch.slots {
            match op {
                SlotOp::Acquire { key, limit, on_limit } => {
                    acquire(&mut rows, &mut inbox, &mut next, id, key, *limit, *on_limit);
                }
                SlotOp::Release { keys } => {
                    for key in keys {
                        rows.retain(|r| !(r.key == *key && r.execution_id == id));
                        grant_waiters(&mut rows, &mut inbox, key);
                    }
                }
            }
        }
    }
    let mut out = SlotWrites { inbox, ..SlotWrites::default() };
    rows.sort_by_key(|r| r.ticket);
    for r in &rows {
        match original.get(&(r.key.clone(), r.execution_id.clone())) {
            None => out.insert.push(r.clone()),
            Some(false) if r.held => out.grant.push((r.key.clone(), r.execution_id.clone())),
            Some(_) => {}
        }
        if !r.held {
            out.queued +=
                u64::from(!original.contains_key(&(r.key.clone(), r.execution_id.clone())));
        }
    }
    for (key, id) in original.keys() {
        if !rows.iter().any(|r| r.key == *key && r.execution_id == *id) {
            out.delete.push((key.clone(), id.clone()));
        }
    }
    out
}

fn acquire(
    rows: &mut Vec<SlotRow>,
    inbox: &mut Vec<NewInbox>,
    next: &mut i64,
    id: &str,
    key: &str,
    limit: u32,
    on_limit: OnLimit,
) {
    if let Some(mine) = rows.iter().find(|r| r.key == key && r.execution_id == id) {
        // Asked again (the next run after a continue-as-new, a redone commit): a slot held
        // is granted again; a request already waiting goes on waiting.
        if mine.held {
            inbox.push(granted(id, key));
        }
        return;
    }
    let of_key = |rows: &Vec<SlotRow>| rows.iter().filter(|r| r.key == key).count();
    let held = rows.iter().filter(|r| r.key == key && r.held).count();
    let full = held >= limit as usize || of_key(rows) > held;
    match on_limit {
        OnLimit::CancelNewest if full => {
            let reason = format!(
                "concurrency key `{key}` is full ({held} of {limit} held): on_limit \
                 cancel_newest cancels the new execution"
            );
            inbox.push(NewInbox {
                execution_id: id.to_string(),
                message: InboxMessage::Cancel(Cancel { reason, request_id: None }),
            });
            return;
        }
        OnLimit::CancelInProgress => {
            // The newest `limit` (this one included) stay; every older row is cancelled, and
            // a cancelled waiter leaves the queue at once (it never held the slot).
            let mut older: Vec<(i64, String, bool)> = rows
                .iter()
                .filter(|r| r.key == key)
                .map(|r| (r.ticket, r.execution_id.clone(), r.held))
                .collect();
            older.sort_by_key(|o| std::cmp::Reverse(o.0));
            let keep = (limit as usize).saturating_sub(1);
            for (_, other, was_held) in older.into_iter().skip(keep) {
                let reason = format!(
                    "a newer execution took concurrency key `{key}` (limit {limit}): on_limit \
                     cancel_in_progress cancels the oldest"
                );
                inbox.push(NewInbox {
                    execution_id: other.clone(),
                    message: InboxMessage::Cancel(Cancel { reason, request_id: None }),
                });
                if !was_held {
                    rows.retain(|r| !(r.key == key && r.execution_id == other));
                }
            }
        }
        _ => {}
    }
    *next += 1;
    rows.push(SlotRow {
        ticket: *next,
        key: key.to_string(),
        execution_id: id.to_string(),
        held: false,
        limit,
    });
    grant_waiters(rows, inbox, key);
}

/// Grants free slots of `key` to its waiters, oldest first, each within its own limit.
fn grant_waiters(rows: &mut [SlotRow], inbox: &mut Vec<NewInbox>, key: &str) {
    loop {
        let held = rows.iter().filter(|r| r.key == key && r.held).count();
        let first = rows.iter_mut().filter(|r| r.key == key && !r.held).min_by_key(|r| r.ticket);
        let Some(first) = first else { return };
        if held >= first.limit as usize {
            return;
        }
        first.held = true;
        inbox.push(granted(&first.execution_id, key));
    }
}

fn granted(id: &str, key: &str) -> NewInbox {
    NewInbox {
        execution_id: id.to_string(),
        message: InboxMessage::SlotGranted(SlotGranted { key: key.to_string() }),
    }
}

/// The batches with the plan's inbox entries added to the batch of the first execution of
/// the commit (every batch of a commit is one transaction: which one carries them does not
/// matter).
#[must_use]
pub fn with_entries(batches: &[CommitBatch], writes: &SlotWrites) -> Vec<CommitBatch> {
    let mut out = batches.to_vec();
    if let Some(first) = out.first_mut() {
        first.inbox_to_insert.extend(writes.inbox.iter().cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(id: &str, key: &str, limit: u32, on_limit: OnLimit) -> CommitBatch {
        let op = SlotOp::Acquire { key: key.into(), limit, on_limit };
        CommitBatch { execution_id: id.into(), slots: vec![op], ..CommitBatch::default() }
    }

    fn release(id: &str, key: &str) -> CommitBatch {
        let op = SlotOp::Release { keys: vec![key.into()] };
        CommitBatch { execution_id: id.into(), slots: vec![op], ..CommitBatch::default() }
    }

    fn row(ticket: i64, id: &str, held: bool) -> SlotRow {
        SlotRow { ticket, key: "k".into(), execution_id: id.into(), held, limit: 1 }
    }

    fn entries(w: &SlotWrites) -> Vec<(String, &'static str)> {
        w.inbox.iter().map(|e| (e.execution_id.clone(), e.message.kind().as_str())).collect()
    }

    #[test]
    fn the_first_holds_the_next_waits_and_the_release_grants_in_order() {
        let batches = [
            acquire("a", "k", 1, OnLimit::Queue),
            acquire("b", "k", 1, OnLimit::Queue),
            acquire("c", "k", 1, OnLimit::Queue),
        ];
        let w = plan(&batches, Vec::new());
        assert_eq!(entries(&w), [("a".to_string(), "slot_granted")]);
        assert_eq!(
            w.insert.iter().map(|r| (r.execution_id.as_str(), r.held)).collect::<Vec<_>>(),
            [("a", true), ("b", false), ("c", false)]
        );
        assert_eq!(w.queued, 2);
        let rows = vec![row(1, "a", true), row(2, "b", false), row(3, "c", false)];
        let w = plan(&[release("a", "k")], rows);
        assert_eq!(entries(&w), [("b".to_string(), "slot_granted")]);
        assert_eq!(w.grant, [("k".to_string(), "b".to_string())]);
        assert_eq!(w.delete, [("k".to_string(), "a".to_string())]);
    }

    #[test]
    fn asking_again_is_granted_again_and_a_waiter_keeps_waiting() {
        let rows = vec![row(1, "a", true), row(2, "b", false)];
        let w = plan(
            &[acquire("a", "k", 1, OnLimit::Queue), acquire("b", "k", 1, OnLimit::Queue)],
            rows,
        );
        assert_eq!(entries(&w), [("a".to_string(), "slot_granted")]);
        assert!(w.insert.is_empty() && w.grant.is_empty() && w.delete.is_empty());
    }

    #[test]
    fn cancel_newest_cancels_the_new_one_when_full() {
        let w = plan(&[acquire("b", "k", 1, OnLimit::CancelNewest)], vec![row(1, "a", true)]);
        assert_eq!(entries(&w), [("b".to_string(), "cancel")]);
        assert!(w.insert.is_empty());
        let w = plan(&[acquire("b", "k", 2, OnLimit::CancelNewest)], vec![row(1, "a", true)]);
        assert_eq!(entries(&w), [("b".to_string(), "slot_granted")]);
    }

    #[test]
    fn cancel_in_progress_cancels_the_oldest_and_the_new_one_waits_for_the_slot() {
        let rows = vec![row(1, "a", true), row(2, "b", false)];
        let w = plan(&[acquire("c", "k", 1, OnLimit::CancelInProgress)], rows);
        assert_eq!(entries(&w), [("b".to_string(), "cancel"), ("a".to_string(), "cancel")]);
        assert_eq!(w.delete, [("k".to_string(), "b".to_string())], "a cancelled waiter leaves");
        assert_eq!(w.insert.len(), 1);
        assert!(!w.insert[0].held, "the holder keeps the slot until it closes");
        let w = plan(&[acquire("c", "k", 2, OnLimit::CancelInProgress)], vec![row(1, "a", true)]);
        assert_eq!(entries(&w), [("c".to_string(), "slot_granted")], "room: nobody cancelled");
    }

    #[test]
    fn keys_are_locked_in_order_once() {
        let batches = [
            acquire("a", "z", 1, OnLimit::Queue),
            CommitBatch {
                execution_id: "b".into(),
                slots: vec![SlotOp::Release { keys: vec!["m".into(), "z".into()] }],
                ..CommitBatch::default()
            },
        ];
        assert_eq!(keys_of(&batches), ["m", "z"]);
        assert!(any(&batches) && !any(&[CommitBatch::default()]));
    }
}
