//! The request of [`Client::start_with`](crate::client::Client::start_with): an execution
//! of a workflow, built from what it requires (the workflow and its input) with the
//! options added one by one, as [`Reset`](crate::client::Reset) and
//! [`Fork`](crate::client::Fork) are: `Start::new("orders", input).execution_id("o-7")
//! .priority(1)`.

use orbit_api::v1 as pb;
use serde_json::Value;

use crate::value;

/// A start of an execution (see [`Client::start_with`](crate::client::Client::start_with)).
#[derive(Debug, Clone, PartialEq)]
pub struct Start(pb::StartExecutionRequest);

impl Start {
    /// An execution of the latest version of `workflow` with `input` (`null`: none), under
    /// an id the server picks.
    #[must_use]
    pub fn new(workflow: &str, input: &Value) -> Self {
        Self(pb::StartExecutionRequest {
            workflow: workflow.into(),
            input: value::to_proto_opt(input),
            ..Default::default()
        })
    }

    /// Runs this version of the workflow instead of the latest (the highest semantic
    /// version).
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        self.0.version = version.into();
        self
    }

    /// A caller-chosen execution id, which makes the start idempotent: starting the same id
    /// again answers the existing run (`created: false`).
    #[must_use]
    pub fn execution_id(mut self, execution_id: &str) -> Self {
        self.0.execution_id = execution_id.into();
        self
    }

    /// The dispatch priority of the execution's tasks, 1 to 5: of the tasks queued for a
    /// worker, priority 1 is dispatched first and 5 last (a task that has waited long
    /// enough still goes before fresher ones, so none starves). Without it the workflow's
    /// `priority:` applies, else 3; a step that declares its own `priority:` keeps it. The
    /// server refuses other values (`INVALID_ARGUMENT`).
    #[must_use]
    pub fn priority(mut self, priority: u32) -> Self {
        self.0.priority = priority;
        self
    }

    /// A free memo, a JSON object, shown by describe
    /// ([`Client::search_attributes`](crate::client::Client::search_attributes)) and never
    /// indexed; anything but an object sends none.
    #[must_use]
    pub fn memo(mut self, memo: &Value) -> Self {
        self.0.memo = crate::search::memo_struct(memo);
        self
    }

    /// The request as sent.
    #[must_use]
    pub fn into_request(self) -> pb::StartExecutionRequest {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_start_carries_its_workflow_input_and_options() {
        let s = Start::new("orders", &Value::Null).into_request();
        assert_eq!(s.workflow, "orders");
        assert!(s.input.is_none() && s.version.is_empty() && s.execution_id.is_empty());
        assert_eq!(s.priority, 0, "unset: the workflow's priority, else 3");
        let s = Start::new("orders", &json!({"amount": 42}))
            .version("2")
            .execution_id("o-7")
            .priority(1)
            .into_request();
        assert_eq!((s.version.as_str(), s.execution_id.as_str(), s.priority), ("2", "o-7", 1));
        assert_eq!(value::from_proto_opt(s.input.as_ref()), json!({"amount": 42}));
    }
}
