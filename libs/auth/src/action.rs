//! The action of every RPC: one table from the full gRPC method path to what a caller needs
//! to be allowed to call it.
//!
//! The table is the single place a new RPC gets its access rule; a unit test walks the API's
//! descriptor set and fails when an RPC has no entry, so none can be forgotten. A path that
//! is not in the table is refused (fail closed), never served anonymously.

use std::fmt;
use std::str::FromStr;

/// What a client identity may be allowed to do (the `actions` list of the identities file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Start an execution.
    Start,
    /// Signal an execution.
    Signal,
    /// Query an execution.
    Query,
    /// Cancel, terminate or delete an execution.
    Cancel,
    /// Update, resume or migrate an execution.
    Update,
    /// Read definitions, executions and their history.
    Read,
    /// Register workflow definitions.
    Register,
    /// The admin RPCs (cluster status, workers, task queues, replay) and schedules.
    Admin,
}

impl Action {
    /// Every action, in the order the documentation lists them.
    pub const ALL: [Action; 8] = [
        Action::Start,
        Action::Signal,
        Action::Query,
        Action::Cancel,
        Action::Update,
        Action::Read,
        Action::Register,
        Action::Admin,
    ];

    /// The name used in the identities file and in refusals.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Signal => "signal",
            Action::Query => "query",
            Action::Cancel => "cancel",
            Action::Update => "update",
            Action::Read => "read",
            Action::Register => "register",
            Action::Admin => "admin",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Action {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        Action::ALL.into_iter().find(|a| a.as_str() == s).ok_or(())
    }
}

/// Who may call a method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, authenticated or not: health checks and reflection.
    Open,
    /// A client (or admin) identity holding this action.
    Client(Action),
    /// A worker identity (or admin): the worker session and its unary fallbacks.
    Worker,
    /// A service identity only: the internal `orbit.internal.v1.*` RPCs.
    Service,
}

impl Access {
    /// The name of what is required, for refusals and logs.
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            Access::Open => "open".to_owned(),
            Access::Client(action) => action.as_str().to_owned(),
            Access::Worker => "worker".to_owned(),
            Access::Service => "service".to_owned(),
        }
    }
}

/// Every Orbit RPC by full method path. Services whose every RPC shares one rule are in
/// [`SERVICE_RULES`] instead.
pub const METHOD_TABLE: &[(&str, Access)] = &[
    ("/orbit.v1.WorkflowService/RegisterWorkflow", Access::Client(Action::Register)),
    ("/orbit.v1.WorkflowService/GetWorkflow", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/ListWorkflows", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/StartExecution", Access::Client(Action::Start)),
    ("/orbit.v1.WorkflowService/DescribeExecution", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/GetHistory", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/WatchExecution", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/ListExecutions", Access::Client(Action::Read)),
    // The handler counts only the workflows the caller may read.
    ("/orbit.v1.WorkflowService/CountExecutions", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/ListSearchAttributes", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/SignalExecution", Access::Client(Action::Signal)),
    ("/orbit.v1.WorkflowService/QueryExecution", Access::Client(Action::Query)),
    ("/orbit.v1.WorkflowService/CancelExecution", Access::Client(Action::Cancel)),
    ("/orbit.v1.WorkflowService/ResumeExecution", Access::Client(Action::Update)),
    ("/orbit.v1.WorkflowService/TerminateExecution", Access::Client(Action::Cancel)),
    ("/orbit.v1.WorkflowService/MigrateExecution", Access::Client(Action::Update)),
    ("/orbit.v1.WorkflowService/ResetExecution", Access::Client(Action::Update)),
    // A fork creates an execution; the handler also checks `read` on the source.
    ("/orbit.v1.WorkflowService/ForkExecution", Access::Client(Action::Start)),
    ("/orbit.v1.WorkflowService/UpdateExecution", Access::Client(Action::Update)),
    ("/orbit.v1.WorkflowService/DeleteExecution", Access::Client(Action::Cancel)),
    ("/orbit.v1.WorkflowService/StartBatch", Access::Client(Action::Update)),
    ("/orbit.v1.WorkflowService/DescribeBatch", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/ListBatches", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/ListBatchItems", Access::Client(Action::Read)),
    ("/orbit.v1.WorkflowService/CancelBatch", Access::Client(Action::Update)),
    ("/orbit.v1.ScheduleService/GetSchedule", Access::Client(Action::Read)),
    ("/orbit.v1.ScheduleService/ListSchedules", Access::Client(Action::Read)),
    ("/orbit.v1.ScheduleService/CreateSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/UpdateSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/PauseSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/ResumeSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/TriggerSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/DeleteSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/BackfillSchedule", Access::Client(Action::Admin)),
    ("/orbit.v1.ScheduleService/PreviewSchedule", Access::Client(Action::Read)),
];

/// Rules for whole services (path prefixes ending in `/`), checked after [`METHOD_TABLE`].
pub const SERVICE_RULES: &[(&str, Access)] = &[
    ("/orbit.v1.AdminService/", Access::Client(Action::Admin)),
    ("/orbit.v1.WorkerService/", Access::Worker),
    ("/orbit.internal.v1.", Access::Service),
    ("/grpc.health.v1.Health/", Access::Open),
    ("/grpc.reflection.v1.ServerReflection/", Access::Open),
    ("/grpc.reflection.v1alpha.ServerReflection/", Access::Open),
];

/// The access rule of a full method path (`/package.Service/Method`), or `None` when the
/// path is in no table (the layer refuses those).
#[must_use]
pub fn access_of(path: &str) -> Option<Access> {
    if let Some((_, access)) = METHOD_TABLE.iter().find(|(p, _)| *p == path) {
        return Some(*access);
    }
    SERVICE_RULES.iter().find(|(prefix, _)| path.starts_with(prefix)).map(|(_, access)| *access)
}
