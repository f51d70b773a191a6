//! The requests of [`Client::reset`](crate::client::Client::reset) and
//! [`Client::fork`](crate::client::Client::fork): a run that goes on from an execution's
//! state at an earlier point, as the same execution's next run (`ResetExecution`) or as a
//! new execution (`ForkExecution`).
//!
//! Each is built from what it requires (the execution and the point; for a fork also the
//! seq and the new id) and the options are added one by one, so a request cannot lack its
//! point: `Reset::to_step("order-7", "charge").drop_signals().dry_run()`.

use orbit_api::v1 as pb;
use orbit_api::v1::reset_execution_request::To;

/// A reset of an execution's current run to an earlier point (see
/// [`Client::reset`](crate::client::Client::reset)).
#[derive(Debug, Clone, PartialEq)]
pub struct Reset(pb::ResetExecutionRequest);

impl Reset {
    fn new(execution_id: &str, to: To) -> Self {
        Self(pb::ResetExecutionRequest {
            execution_id: execution_id.into(),
            to: Some(to),
            ..Default::default()
        })
    }

    /// Back to just before main-body step `step` first started in the current run: the step
    /// and everything started after it run again.
    #[must_use]
    pub fn to_step(execution_id: &str, step: &str) -> Self {
        Self::new(execution_id, To::Step(step.into()))
    }

    /// Back to the state right after history event `seq` of the current run.
    #[must_use]
    pub fn to_seq(execution_id: &str, seq: u64) -> Self {
        Self::new(execution_id, To::Seq(seq))
    }

    /// Leaves out the signals the run received after the point (by default the new run
    /// receives them again, in order).
    #[must_use]
    pub fn drop_signals(mut self) -> Self {
        self.0.drop_signals = true;
        self
    }

    /// Migrates the new run to `version` of its workflow right away (checked like a
    /// migration; by default the version in effect at the point).
    #[must_use]
    pub fn to_version(mut self, version: &str) -> Self {
        self.0.to_version = version.into();
        self
    }

    /// Why, recorded in `WorkflowReset` and `RunRestored`.
    #[must_use]
    pub fn reason(mut self, reason: &str) -> Self {
        self.0.reason = reason.into();
        self
    }

    /// Makes the call idempotent: a retry with the same id resets once and answers the
    /// first result (the same id with other arguments is refused, `REQUEST_ID_REUSED`).
    #[must_use]
    pub fn request_id(mut self, request_id: &str) -> Self {
        self.0.request_id = request_id.into();
        self
    }

    /// Only computes the plan; nothing is written.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.0.dry_run = true;
        self
    }

    /// The request as sent.
    #[must_use]
    pub fn into_request(self) -> pb::ResetExecutionRequest {
        self.0
    }
}

/// A new execution from another's state at a history seq (see
/// [`Client::fork`](crate::client::Client::fork)).
#[derive(Debug, Clone, PartialEq)]
pub struct Fork(pb::ForkExecutionRequest);

impl Fork {
    /// Forks `execution_id`'s current run after its history event `at_seq` into a new
    /// execution `new_execution_id`.
    #[must_use]
    pub fn new(execution_id: &str, at_seq: u64, new_execution_id: &str) -> Self {
        Self(pb::ForkExecutionRequest {
            execution_id: execution_id.into(),
            at_seq,
            new_execution_id: new_execution_id.into(),
            ..Default::default()
        })
    }

    /// Forks this run of the source instead of its current one.
    #[must_use]
    pub fn run(mut self, run: u32) -> Self {
        self.0.run = run;
        self
    }

    /// Migrates the fork to `version` of the workflow right away (checked like a
    /// migration; by default the version in effect at the seq).
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        self.0.version = version.into();
        self
    }

    /// Why, recorded in the fork's `RunRestored`.
    #[must_use]
    pub fn reason(mut self, reason: &str) -> Self {
        self.0.reason = reason.into();
        self
    }

    /// Only computes the plan; nothing is written.
    #[must_use]
    pub fn dry_run(mut self) -> Self {
        self.0.dry_run = true;
        self
    }

    /// The request as sent.
    #[must_use]
    pub fn into_request(self) -> pb::ForkExecutionRequest {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_carries_its_point_and_options() {
        let r = Reset::to_step("e1", "charge").into_request();
        assert_eq!(r.to, Some(To::Step("charge".into())));
        assert!(
            !r.dry_run && !r.drop_signals && r.to_version.is_empty() && r.request_id.is_empty()
        );
        let r = Reset::to_seq("e1", 7)
            .drop_signals()
            .to_version("2")
            .reason("why")
            .request_id("r-1")
            .dry_run()
            .into_request();
        assert_eq!(
            r,
            pb::ResetExecutionRequest {
                execution_id: "e1".into(),
                to: Some(To::Seq(7)),
                drop_signals: true,
                to_version: "2".into(),
                reason: "why".into(),
                request_id: "r-1".into(),
                dry_run: true,
            }
        );
    }

    #[test]
    fn a_fork_carries_its_source_seq_and_new_id() {
        let f = Fork::new("e1", 7, "copy").into_request();
        assert_eq!(
            (f.execution_id.as_str(), f.at_seq, f.new_execution_id.as_str()),
            ("e1", 7, "copy")
        );
        assert!(f.run == 0 && f.version.is_empty() && !f.dry_run);
        let f = Fork::new("e1", 7, "copy").run(2).version("3").reason("what if").dry_run();
        let f = f.into_request();
        assert_eq!(
            (f.run, f.version.as_str(), f.reason.as_str(), f.dry_run),
            (2, "3", "what if", true)
        );
    }
}
