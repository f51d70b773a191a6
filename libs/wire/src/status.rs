//! Execution and unit status names ⇄ their proto enums.
//!
//! The store keeps the engine's status name (`RUNNING`, `CONTINUED_AS_NEW`, ...); the wire
//! uses `orbit.v1.ExecutionStatus`. `PENDING` (no `WorkflowCreated` yet) and unknown names
//! map to `UNSPECIFIED`, which never matches a filter.

use orbit_api::v1::{ExecutionStatus, UnitStatus as WireUnitStatus};
use orbit_engine::{Status, UnitStatus};

/// The status names of closed runs, as stored in the projection.
pub const TERMINAL_STATUSES: [&str; 5] =
    ["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT", "CONTINUED_AS_NEW"];

/// The wire enum of a stored status name (`UNSPECIFIED` for unknown names).
#[must_use]
pub fn execution_status_from_str(name: &str) -> ExecutionStatus {
    match name {
        "RUNNING" => ExecutionStatus::Running,
        "COMPENSATING" => ExecutionStatus::Compensating,
        "COMPLETED" => ExecutionStatus::Completed,
        "FAILED" => ExecutionStatus::Failed,
        "CANCELLED" => ExecutionStatus::Cancelled,
        "TIMED_OUT" => ExecutionStatus::TimedOut,
        "CONTINUED_AS_NEW" => ExecutionStatus::ContinuedAsNew,
        "SUSPENDED" => ExecutionStatus::Suspended,
        _ => ExecutionStatus::Unspecified,
    }
}

/// The wire enum of an engine status.
#[must_use]
pub fn execution_status(status: Status) -> ExecutionStatus {
    execution_status_from_str(status.as_str())
}

/// The stored status name of a wire status; `None` for `UNSPECIFIED`.
#[must_use]
pub fn status_name(status: ExecutionStatus) -> Option<&'static str> {
    match status {
        ExecutionStatus::Unspecified => None,
        ExecutionStatus::Running => Some("RUNNING"),
        ExecutionStatus::Compensating => Some("COMPENSATING"),
        ExecutionStatus::Completed => Some("COMPLETED"),
        ExecutionStatus::Failed => Some("FAILED"),
        ExecutionStatus::Cancelled => Some("CANCELLED"),
        ExecutionStatus::TimedOut => Some("TIMED_OUT"),
        ExecutionStatus::ContinuedAsNew => Some("CONTINUED_AS_NEW"),
        ExecutionStatus::Suspended => Some("SUSPENDED"),
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
    fn status_names_round_trip() {
        for status in [
            Status::Running,
            Status::Compensating,
            Status::Completed,
            Status::Failed,
            Status::Cancelled,
            Status::TimedOut,
            Status::ContinuedAsNew,
            Status::Suspended,
        ] {
            let wire = execution_status(status);
            assert_ne!(wire, ExecutionStatus::Unspecified, "{status:?}");
            assert_eq!(status_name(wire), Some(status.as_str()));
        }
        assert_eq!(execution_status(Status::Pending), ExecutionStatus::Unspecified);
        assert_eq!(execution_status_from_str("nonsense"), ExecutionStatus::Unspecified);
        assert_eq!(status_name(ExecutionStatus::Unspecified), None);
    }

    #[test]
    fn terminal_names_are_closed_statuses() {
        for name in TERMINAL_STATUSES {
            assert_ne!(execution_status_from_str(name), ExecutionStatus::Unspecified);
        }
    }
}
