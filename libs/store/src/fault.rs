//! Poison quarantine rows (`execution_faults`, migration 0003): how many attempts at an
//! execution's pending inbox entries failed, and whether it is parked.
//!
//! Invariants every backend keeps:
//! * a healthy execution has no row: rows are written only on failure and recovery paths;
//! * a note for another `inbox_seq` than the row's restarts the count (progress was made);
//! * a parked row is never changed by a note, only by park/unpark and cleared by
//!   [`OwnerWrites::clear_faults`](crate::OwnerWrites::clear_faults);
//! * park and unpark are fenced by the owner's epoch like a commit, and move the
//!   projection status (`SUSPENDED` while parked, the previous status back on unpark).

/// The projection status of a parked execution.
pub const SUSPENDED: &str = "SUSPENDED";

/// One `execution_faults` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRow {
    /// The execution.
    pub execution_id: String,
    /// The first pending inbox entry when the failures were counted (the offending entry
    /// once parked); `None` when no entry was involved (a child start).
    pub inbox_seq: Option<u64>,
    /// Attempts that failed (panicked, exceeded a budget, or ended with the process).
    pub failures: u32,
    /// The last failure.
    pub reason: String,
    /// When the execution was parked (store clock), `None` while only counted.
    pub parked_at_ms: Option<u64>,
    /// The projection status restored by unpark.
    pub resume_status: Option<String>,
    /// Last change (store clock).
    pub updated_at_ms: u64,
}

impl FaultRow {
    /// Whether the execution is parked.
    #[must_use]
    pub fn parked(&self) -> bool {
        self.parked_at_ms.is_some()
    }
}

/// A failure (or an attempt about to be made) to count for an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultNote {
    /// The execution.
    pub execution_id: String,
    /// Its first pending inbox entry now.
    pub inbox_seq: Option<u64>,
    /// Why (replaces the row's reason).
    pub reason: String,
    /// Added to `failures`: 1 for a new failure or an attempt about to be made (counted
    /// BEFORE it runs, so a process that dies in it leaves the count behind), 0 to only
    /// replace the reason of the attempt already counted.
    pub add: u32,
}
