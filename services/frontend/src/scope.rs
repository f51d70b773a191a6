//! The checks of the identities file that need the request body: a client's workflow-name
//! patterns and a worker's task-name patterns.
//!
//! The auth layer (orbit-auth) decides at action level ("may this identity start?") and
//! puts the caller in the request extensions; which workflow or task a request is about is
//! only known here. A [`Scope`] is taken from the request once, before its body is
//! unwrapped, and is empty unless the caller's patterns can refuse something: anonymous
//! mode (no identities file), admins and clients or workers holding `*` pay nothing but
//! the extension look-up, and no handler reads anything extra for them.
//!
//! Two kinds of refusal:
//! - a name the request itself carries (the workflow to start, register, get or list) is
//!   refused with `PERMISSION_DENIED` naming the identity, the action and the workflow —
//!   the caller already knows the name, so the answer reveals nothing;
//! - an execution id whose execution runs a workflow outside the patterns is answered
//!   exactly as a missing execution (`EXECUTION_NOT_FOUND`), so a restricted client cannot
//!   probe which ids exist in other teams' workflows. The refusal is logged either way.

use crate::error::{err, no_execution, ApiResult};
use orbit_auth::{Action, Caller, Identity, Kind, Pattern};
use orbit_server_kit::ErrorCode;
use orbit_store::ExecutionRow;
use std::sync::Arc;

/// The caller of one request, when its patterns restrict it (see the module docs).
#[derive(Clone, Default)]
pub(crate) struct Scope(Option<Restricted>);

#[derive(Clone)]
struct Restricted {
    identity: Arc<Identity>,
    /// The peer address, for refusal logs (never the token).
    peer: String,
}

/// Whether a pattern list matches every name (`*`, `**`, ...).
fn matches_all(patterns: &[Pattern]) -> bool {
    patterns.iter().any(|p| p.as_str().bytes().all(|b| b == b'*'))
}

fn peer_of<T>(request: &tonic::Request<T>) -> String {
    // Plain-text connections carry `TcpConnectInfo`; TLS ones wrap it, as in the layer.
    let extensions = request.extensions();
    let tcp = extensions.get::<tonic::transport::server::TcpConnectInfo>().or_else(|| {
        extensions.get::<orbit_server_kit::tls::PeerCertificates>().map(|t| t.get_ref())
    });
    tcp.and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
        .map_or_else(|| "unknown".to_owned(), |a| a.to_string())
}

impl Scope {
    /// The scope of `request`: restricted only for a client whose workflow patterns, or a
    /// worker whose task patterns, do not match everything. (Service identities never
    /// reach public handlers; if one did, it would be restricted to nothing.)
    pub(crate) fn of<T>(request: &tonic::Request<T>) -> Scope {
        let Some(Caller(identity)) = request.extensions().get::<Caller>() else {
            return Scope(None);
        };
        let restricted = match identity.kind {
            Kind::Admin => false,
            Kind::Client => !matches_all(&identity.workflows),
            Kind::Worker => !matches_all(&identity.tasks),
            Kind::Service => true,
        };
        if !restricted {
            return Scope(None);
        }
        Scope(Some(Restricted { identity: identity.clone(), peer: peer_of(request) }))
    }

    /// Whether this caller's patterns can refuse anything (callers pay for look-ups only
    /// when this is true).
    pub(crate) fn is_restricted(&self) -> bool {
        self.0.is_some()
    }

    /// Whether the caller may see the workflow `name` (for filtering lists; no log).
    pub(crate) fn sees(&self, workflow: &str) -> bool {
        self.0.as_ref().is_none_or(|r| r.identity.may_act_on(workflow))
    }

    /// The workflow patterns bounding what this caller may act on, as written (`None`:
    /// nothing bounds it). A restricted identity that is not a client acts on no workflow:
    /// no pattern.
    pub(crate) fn workflow_patterns(&self) -> Option<Vec<String>> {
        let r = self.0.as_ref()?;
        Some(match r.identity.kind {
            Kind::Client => r.identity.workflows.iter().map(|p| p.as_str().to_owned()).collect(),
            Kind::Admin | Kind::Worker | Kind::Service => Vec::new(),
        })
    }

    /// Whether the caller may claim (and so report) the task `name` (no log).
    pub(crate) fn claims(&self, task: &str) -> bool {
        self.0.as_ref().is_none_or(|r| r.identity.may_claim(task))
    }

    /// A workflow named by the request: `PERMISSION_DENIED` naming the identity, the action
    /// and the workflow when it is outside the caller's patterns.
    pub(crate) fn workflow(&self, action: Action, workflow: &str) -> ApiResult<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        if r.identity.may_act_on(workflow) {
            return Ok(());
        }
        let identity = &r.identity;
        tracing::warn!(peer = %r.peer, identity = %identity.name, action = action.as_str(), workflow, "refused: workflow outside the identity's patterns");
        let patterns = identity.workflows.iter().map(Pattern::as_str).collect::<Vec<_>>();
        let message = format!(
            "identity {:?} ({}) may not {action} workflow {workflow:?} (its workflow patterns: {})",
            identity.name,
            identity.kind.as_str(),
            if patterns.is_empty() { "none".to_owned() } else { patterns.join(", ") }
        );
        Err(err(ErrorCode::PermissionDenied, message))
    }

    /// An execution addressed by id: one of a workflow outside the caller's patterns is
    /// answered as missing (`EXECUTION_NOT_FOUND`, the same message), and logged.
    pub(crate) fn execution(&self, action: Action, row: &ExecutionRow) -> ApiResult<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        if r.identity.may_act_on(&row.workflow) {
            return Ok(());
        }
        tracing::warn!(peer = %r.peer, identity = %r.identity.name, action = action.as_str(), execution_id = %row.execution_id, workflow = %row.workflow, "refused: execution of a workflow outside the identity's patterns (answered as not found)");
        Err(no_execution(&row.execution_id))
    }

    /// A worker result for a task named `task`: `PERMISSION_DENIED` naming the identity and
    /// the task when it is outside the caller's task patterns; nothing is recorded.
    pub(crate) fn task(&self, task: &str) -> ApiResult<()> {
        let Some(r) = &self.0 else { return Ok(()) };
        if r.identity.may_claim(task) {
            return Ok(());
        }
        let identity = &r.identity;
        tracing::warn!(peer = %r.peer, identity = %identity.name, task, "refused: a result for a task outside the identity's patterns");
        let message = format!(
            "identity {:?} ({}) may not report results for task {task:?} (its task patterns: {}); nothing was recorded",
            identity.name,
            identity.kind.as_str(),
            identity.tasks.iter().map(Pattern::as_str).collect::<Vec<_>>().join(", ")
        );
        Err(err(ErrorCode::PermissionDenied, message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_auth::token::hash_token_hex;
    use orbit_auth::Identities;
    use orbit_server_kit::OrbitError;
    use tonic::Status;

    /// The error as the client reads it.
    fn sent(e: crate::error::FrontendError) -> Status {
        Status::from(e)
    }

    fn scope_of(file: &str, token: &str) -> Scope {
        let ids = Identities::parse(file).unwrap();
        let mut request = tonic::Request::new(());
        request.extensions_mut().insert(Caller(ids.by_token(token).unwrap().clone()));
        Scope::of(&request)
    }

    fn file() -> String {
        let entry = |name: &str, kind: &str, extra: &str| {
            format!(
                "  - name: {name}\n    kind: {kind}\n    token_sha256: {}\n{extra}",
                hash_token_hex(name)
            )
        };
        [
            "identities:\n".to_owned(),
            entry("ops", "admin", ""),
            entry("billing", "client", "    actions: [start]\n    workflows: ['billing.*']\n"),
            entry("all", "client", "    actions: [start]\n    workflows: ['*']\n"),
            entry("bw", "worker", "    tasks: ['billing.*']\n"),
            entry("aw", "worker", "    tasks: ['**']\n"),
        ]
        .concat()
    }

    fn row(workflow: &str) -> ExecutionRow {
        ExecutionRow {
            execution_id: "e-1".into(),
            run: 1,
            root_id: "e-1".into(),
            parent_id: None,
            workflow: workflow.into(),
            version: "1".into(),
            definition_hash: String::new(),
            status: orbit_engine::Status::Running,
            schedule_id: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            closed_at_ms: None,
            last_seq: 0,
            failed_step: None,
            error_code: None,
        }
    }

    #[test]
    fn only_pattern_restricted_callers_are_restricted() {
        let file = file();
        assert!(!Scope::of(&tonic::Request::new(())).is_restricted(), "anonymous mode");
        for unrestricted in ["ops", "all", "aw"] {
            assert!(!scope_of(&file, unrestricted).is_restricted(), "{unrestricted}");
        }
        assert!(scope_of(&file, "billing").is_restricted());
        assert!(scope_of(&file, "bw").is_restricted());
    }

    #[test]
    fn named_workflows_are_denied_and_executions_hidden() {
        let billing = scope_of(&file(), "billing");
        billing.workflow(Action::Start, "billing.invoice").unwrap();
        let denied = billing.workflow(Action::Start, "shipping.pack").unwrap_err();
        let error = OrbitError::from_status(&sent(denied)).unwrap();
        assert_eq!(error.code, ErrorCode::PermissionDenied);
        assert_eq!(
            error.message,
            "identity \"billing\" (client) may not start workflow \"shipping.pack\" (its workflow patterns: billing.*)"
        );
        billing.execution(Action::Signal, &row("billing.invoice")).unwrap();
        let hidden = sent(billing.execution(Action::Signal, &row("shipping.pack")).unwrap_err());
        let missing = sent(no_execution("e-1"));
        assert_eq!(hidden.code(), missing.code());
        assert_eq!(hidden.message(), missing.message());
        assert!(billing.sees("billing.x") && !billing.sees("shipping.pack"));
    }

    #[test]
    fn worker_results_are_bounded_by_task_patterns() {
        let bw = scope_of(&file(), "bw");
        bw.task("billing.charge").unwrap();
        let denied = OrbitError::from_status(&sent(bw.task("shipping.pack").unwrap_err())).unwrap();
        assert_eq!(denied.code, ErrorCode::PermissionDenied);
        assert!(denied.message.contains("\"bw\"") && denied.message.contains("shipping.pack"));
        scope_of(&file(), "aw").task("shipping.pack").unwrap();
    }
}
