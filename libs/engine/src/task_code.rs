//! The failure codes Orbit itself gives a step or an attempt ([`TaskCode`]): a closed set,
//! so the engine never spells one as a string literal and the docs can list them all.
//! A worker's own codes (`CARD_DECLINED`, the SDKs' `UNHANDLED_EXCEPTION`, the HTTP step's
//! `HTTP_*`) stay free-form strings in [`TaskError::code`].

use crate::event::TaskError;
use std::fmt;

/// A failure code the engine (or the server) records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskCode {
    /// The step or the execution was cancelled.
    Cancelled,
    /// An attempt, a signal wait or the workflow ran out of time.
    Timeout,
    /// A server or workflow limit was reached (history, fan-out, timers).
    LimitExceeded,
    /// A step's or run's failure without a recorded error.
    Failed,
    /// An expression of the definition failed to evaluate.
    ExpressionError,
    /// An expression ran out of its evaluation budget.
    ExpressionLimit,
    /// A step's input does not match its `input` contract.
    InputContractViolation,
    /// A step's output does not match its `output` contract.
    OutputContractViolation,
    /// An attempt failed without a recorded error.
    Unknown,
    /// The worker sent no heartbeat within the step's `heartbeat_timeout`.
    HeartbeatTimeout,
    /// The attempt's worker was lost more than `retry.max_redeliveries` times.
    WorkerLost,
    /// A built-in adapter (the HTTP step) is off on this server.
    AdapterDisabled,
    /// An update handler's step failed (the update's reply, never the run).
    UpdateFailed,
    /// A value is larger than the payload limit.
    PayloadTooLarge,
    /// A value is nested deeper than the payload limit.
    PayloadTooDeep,
}

impl TaskCode {
    /// Every code, for docs and tests.
    pub const ALL: [TaskCode; 15] = [
        TaskCode::Cancelled,
        TaskCode::Timeout,
        TaskCode::LimitExceeded,
        TaskCode::Failed,
        TaskCode::ExpressionError,
        TaskCode::ExpressionLimit,
        TaskCode::InputContractViolation,
        TaskCode::OutputContractViolation,
        TaskCode::Unknown,
        TaskCode::HeartbeatTimeout,
        TaskCode::WorkerLost,
        TaskCode::AdapterDisabled,
        TaskCode::UpdateFailed,
        TaskCode::PayloadTooLarge,
        TaskCode::PayloadTooDeep,
    ];

    /// The stable string recorded in histories.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskCode::Cancelled => "CANCELLED",
            TaskCode::Timeout => "TIMEOUT",
            TaskCode::LimitExceeded => "LIMIT_EXCEEDED",
            TaskCode::Failed => "FAILED",
            TaskCode::ExpressionError => "EXPRESSION_ERROR",
            TaskCode::ExpressionLimit => "EXPRESSION_LIMIT",
            TaskCode::InputContractViolation => "INPUT_CONTRACT_VIOLATION",
            TaskCode::OutputContractViolation => "OUTPUT_CONTRACT_VIOLATION",
            TaskCode::Unknown => "UNKNOWN",
            TaskCode::HeartbeatTimeout => "HEARTBEAT_TIMEOUT",
            TaskCode::WorkerLost => "WORKER_LOST",
            TaskCode::AdapterDisabled => "ADAPTER_DISABLED",
            TaskCode::UpdateFailed => "UPDATE_FAILED",
            TaskCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            TaskCode::PayloadTooDeep => "PAYLOAD_TOO_DEEP",
        }
    }

    /// The code named `s`, if it is one of Orbit's.
    #[must_use]
    pub fn parse(s: &str) -> Option<TaskCode> {
        TaskCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether no retry can fix a failure with this code (the retry policy is not asked).
    #[must_use]
    pub const fn never_retried(self) -> bool {
        matches!(
            self,
            TaskCode::InputContractViolation
                | TaskCode::OutputContractViolation
                | TaskCode::AdapterDisabled
                | TaskCode::ExpressionError
                | TaskCode::ExpressionLimit
                | TaskCode::PayloadTooLarge
                | TaskCode::PayloadTooDeep
                | TaskCode::Cancelled
        )
    }

    /// An error with this code that another attempt may fix (the retry policy decides).
    #[must_use]
    pub fn retryable(self, message: impl Into<String>) -> TaskError {
        TaskError::retryable(self.as_str(), message)
    }

    /// An error with this code that is never retried.
    #[must_use]
    pub fn fatal(self, message: impl Into<String>) -> TaskError {
        TaskError::fatal(self.as_str(), message)
    }
}

impl fmt::Display for TaskCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<TaskCode> for String {
    fn eq(&self, code: &TaskCode) -> bool {
        self == code.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::TaskCode;

    #[test]
    fn every_code_round_trips_and_is_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for code in TaskCode::ALL {
            assert_eq!(TaskCode::parse(code.as_str()), Some(code));
            assert!(seen.insert(code.as_str()), "{code} twice");
            let s = code.as_str();
            assert!(s.chars().all(|c| c.is_ascii_uppercase() || c == '_'), "{s}");
        }
        assert_eq!(TaskCode::parse("CARD_DECLINED"), None, "a worker's code is not Orbit's");
    }

    #[test]
    fn codes_no_retry_can_fix_skip_the_policy_and_the_others_do_not() {
        assert!(TaskCode::InputContractViolation.never_retried());
        assert!(TaskCode::Cancelled.never_retried());
        assert!(!TaskCode::Timeout.never_retried(), "a timed-out attempt may succeed next");
        assert!(!TaskCode::HeartbeatTimeout.never_retried());
        assert!(!TaskCode::WorkerLost.never_retried());
        assert!(TaskCode::Timeout.retryable("x").retryable);
        assert!(!TaskCode::Timeout.fatal("x").retryable);
        assert_eq!(TaskCode::WorkerLost.retryable("m").code, "WORKER_LOST");
    }
}
