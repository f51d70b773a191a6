//! Execution and unit statuses ⇄ their proto enums.
//!
//! The store and the engine carry the engine's `Status`; the wire uses
//! `orbit.v1.ExecutionStatus`. `PENDING` (no `WorkflowCreated` yet) maps to `UNSPECIFIED`,
//! which never matches a filter.

use orbit_api::v1::{ExecutionStatus, UnitStatus as WireUnitStatus};
use orbit_engine::{Status, UnitStatus};

/// The wire enum of an engine status.
#[must_use]
pub fn execution_status(status: Status) -> ExecutionStatus {
    match status {
        Status::Pending => ExecutionStatus::Unspecified,
        Status::Running => ExecutionStatus::Running,
        Status::Compensating => ExecutionStatus::Compensating,
        Status::Completed => ExecutionStatus::Completed,
        Status::Failed => ExecutionStatus::Failed,
        Status::Cancelled => ExecutionStatus::Cancelled,
        Status::TimedOut => ExecutionStatus::TimedOut,
        Status::ContinuedAsNew => ExecutionStatus::ContinuedAsNew,
        Status::Suspended => ExecutionStatus::Suspended,
    }
}

/// The engine status of a wire status; `None` for `UNSPECIFIED`.
#[must_use]
pub fn status_of(status: ExecutionStatus) -> Option<Status> {
    match status {
        ExecutionStatus::Unspecified => None,
        ExecutionStatus::Running => Some(Status::Running),
        ExecutionStatus::Compensating => Some(Status::Compensating),
        ExecutionStatus::Completed => Some(Status::Completed),
        ExecutionStatus::Failed => Some(Status::Failed),
        ExecutionStatus::Cancelled => Some(Status::Cancelled),
        ExecutionStatus::TimedOut => Some(Status::TimedOut),
        ExecutionStatus::ContinuedAsNew => Some(Status::ContinuedAsNew),
        ExecutionStatus::Suspended => Some(Status::Suspended),
    }
}

/// The wire enum of a unit status.
#[must_use]
pub fn unit_status(status: UnitStatus) -> WireUnitStatus {
    match status {
        UnitStatus::Scheduled => WireUnitStatus::Scheduled,
        UnitStatus::Dispatched => WireUnitStatus::Dispatched,
        UnitStatus::Succeeded => WireUnitStatus::Succeeded,
        UnitStatus::AttemptFailed => WireUnitStatus::AttemptFailed,
        UnitStatus::RetryWait => WireUnitStatus::RetryWait,
        UnitStatus::Failed => WireUnitStatus::Failed,
        UnitStatus::Uncertain => WireUnitStatus::Uncertain,
        UnitStatus::Waiting => WireUnitStatus::Waiting,
        UnitStatus::Skipped => WireUnitStatus::Skipped,
        UnitStatus::Cancelled => WireUnitStatus::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for &status in Status::ALL {
            let wire = execution_status(status);
            if status == Status::Pending {
                assert_eq!(wire, ExecutionStatus::Unspecified);
            } else {
                assert_eq!(status_of(wire), Some(status), "{status:?}");
            }
        }
        assert_eq!(status_of(ExecutionStatus::Unspecified), None);
    }
}
