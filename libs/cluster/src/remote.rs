//! [`RemoteOwners`]: `orbit.internal.v1.OwnerService` for frontends and schedulers that run
//! apart from the owners.
//!
//! * `StartExecution` goes to the owner that rendezvous hashing of the ROOT id picks among
//!   the live owners (children share their root's owner). A start is idempotent by id, so an
//!   attempt that failed in transport (the owner died, or its address is stale) is retried
//!   after refreshing membership, with bounded backoff inside a bounded total time; then the
//!   caller gets `UNAVAILABLE` with the Orbit code.
//! * `Wake` answers at once: the inbox insert's notification wakes the owner.
//! * `QueryExecution` / `DescribeExecution` go to the execution's current owner (owners row
//!   → node → advertised address); `UNAVAILABLE` while that owner is not live.
//! * `ReportResult` (a worker's result handed to the owner, once per step) goes there too,
//!   but remembers which node owns the execution (the one that created it at a start
//!   through here, the one that handed the task over, `owner_node_id`, or as read) instead
//!   of reading the owners row for every result (issue 14): ownership only moves when its owner stops being live (a
//!   takeover), so the remembered node is used while it is live, and forgotten when the
//!   call fails or the owner does not record the result (not held, fenced: the caller then
//!   takes the inbox route, and the next result reads the row again).
//! * Every call carries this process's credentials when configured: the client
//!   certificate of its TLS options and/or a service token ([`RemoteOwners::with_bearer`]).

use crate::membership::Membership;
use crate::rendezvous;
use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_client::OwnerServiceClient;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_server_kit::{ErrorCode, OrbitError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

/// How hard [`RemoteOwners`] tries before answering `UNAVAILABLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The whole budget of one call, attempts and pauses included.
    pub total: Duration,
    /// The pause after the first failed attempt; it doubles up to `max_backoff`.
    pub first_backoff: Duration,
    /// The longest pause between attempts.
    pub max_backoff: Duration,
    /// How long to wait for a TCP connection to an owner.
    pub connect_timeout: Duration,
    /// How long one attempt may take: an owner that accepted the connection but does not
    /// answer (paused, overloaded) is given up on and the start tried again (it is
    /// idempotent by id), by then perhaps at another owner.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            total: Duration::from_secs(15),
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(4),
        }
    }
}

/// Routes owner calls to the right owner process over gRPC.
pub struct RemoteOwners {
    membership: Membership,
    retry: RetryPolicy,
    /// One client (and HTTP/2 connection) per advertised address.
    clients: Mutex<HashMap<String, OwnerServiceClient<Channel>>>,
    /// TLS of the connections to owners (plain text by default).
    tls: orbit_api::tls::ClientTls,
    /// `Bearer <service token>` sent with every call, when configured.
    bearer: Option<MetadataValue<Ascii>>,
    /// execution id → node id of its owner, as last read, for `ReportResult`.
    owner_nodes: Mutex<HashMap<String, String>>,
}

/// How many executions' owners a frontend remembers (a bounded map: cleared when full).
const OWNER_NODES: usize = 10_000;

/// A failed attempt worth another try, with what to report if none succeeds.
struct Retryable(String);

impl RemoteOwners {
    /// Routes by `membership`'s live owners.
    #[must_use]
    pub fn new(membership: Membership, retry: RetryPolicy) -> RemoteOwners {
        RemoteOwners {
            membership,
            retry,
            clients: Mutex::new(HashMap::new()),
            tls: orbit_api::tls::ClientTls::default(),
            bearer: None,
            owner_nodes: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `bearer` (`Bearer <token>`) as `authorization` metadata with every call, so
    /// owners enforcing an identities file admit this process as a `service` identity.
    #[must_use]
    pub fn with_bearer(mut self, bearer: MetadataValue<Ascii>) -> RemoteOwners {
        self.bearer = Some(bearer);
        self
    }

    /// A call carrying this process's credentials.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(bearer) = &self.bearer {
            request.metadata_mut().insert("authorization", bearer.clone());
        }
        request
    }

    /// Connects to owners with TLS: their certificates verified against the CA, and this
    /// process's client certificate presented when the owners require mutual TLS.
    #[must_use]
    pub fn with_tls(mut self, tls: orbit_api::tls::ClientTls) -> RemoteOwners {
        self.tls = tls;
        self
    }

    fn client(&self, addr: &str) -> Result<OwnerServiceClient<Channel>, Retryable> {
        let mut clients =
            self.clients.lock().map_err(|_| Retryable("client cache poisoned".into()))?;
        if let Some(c) = clients.get(addr) {
            return Ok(c.clone());
        }
        let endpoint = self
            .tls
            .endpoint(addr)
            .map_err(|e| Retryable(format!("owner address `{addr}`: {e}")))?
            .connect_timeout(self.retry.connect_timeout)
            .tcp_nodelay(true);
        let client = OwnerServiceClient::new(endpoint.connect_lazy());
        clients.insert(addr.to_string(), client.clone());
        Ok(client)
    }

    fn forget(&self, addr: &str) {
        if let Ok(mut clients) = self.clients.lock() {
            clients.remove(addr);
        }
    }

    /// The owner rendezvous hashing picks for `root_id`: (node id, address).
    fn pick(&self, root_id: &str) -> Result<(String, String), Retryable> {
        let owners = self.membership.live_owners();
        let node = rendezvous::pick(root_id, &owners)
            .ok_or_else(|| Retryable("no live owner".to_string()))?;
        let addr = node
            .addr
            .clone()
            .ok_or_else(|| Retryable(format!("owner {} advertises no address", node.node_id)))?;
        Ok((node.node_id.clone(), addr))
    }

    /// The address of the owner of `execution_id` as remembered, while that node is live;
    /// else read as [`RemoteOwners::owner_of`] does, and remembered.
    async fn remembered_owner_of(&self, execution_id: &str) -> Result<String, Status> {
        let node = self.owner_nodes.lock().ok().and_then(|m| m.get(execution_id).cloned());
        if let Some(node) = node {
            let live = self.membership.live_owners();
            if let Some(addr) = live.into_iter().find(|n| n.node_id == node).and_then(|n| n.addr) {
                return Ok(addr);
            }
        }
        let (node, addr) = self.owner_node_of(execution_id).await?;
        self.remember_owner(execution_id, node);
        Ok(addr)
    }

    fn remember_owner(&self, execution_id: &str, node_id: String) {
        if let Ok(mut m) = self.owner_nodes.lock() {
            if m.len() >= OWNER_NODES {
                m.clear();
            }
            m.insert(execution_id.to_string(), node_id);
        }
    }

    /// Forgets the remembered owner of `execution_id` (it did not take a result).
    fn forget_owner(&self, execution_id: &str) {
        if let Ok(mut m) = self.owner_nodes.lock() {
            m.remove(execution_id);
        }
    }

    /// The address of the live node that owns `execution_id` now.
    async fn owner_of(&self, execution_id: &str) -> Result<String, Status> {
        self.owner_node_of(execution_id).await.map(|(_, addr)| addr)
    }

    /// The live node that owns `execution_id` now, read from its owners row: (node id,
    /// address).
    async fn owner_node_of(&self, execution_id: &str) -> Result<(String, String), Status> {
        let store = self.membership.store();
        let row = store.get_owner(execution_id).await.map_err(|e| {
            OrbitError::new(e.code(), format!("reading the owner: {}", e.message())).to_status()
        })?;
        let Some(row) = row else {
            return Err(OrbitError::new(
                ErrorCode::ExecutionNotFound,
                format!("execution `{execution_id}` has no owner"),
            )
            .to_status());
        };
        let find = |owners: Vec<orbit_store::NodeRow>| {
            owners.into_iter().find(|n| n.node_id == row.node_id).and_then(|n| n.addr)
        };
        if let Some(addr) = find(self.membership.live_owners()) {
            return Ok((row.node_id, addr));
        }
        // The cache may predate the owner's first beat: look once more.
        let fresh = self.membership.refresh().await.unwrap_or_default();
        find(fresh).map(|addr| (row.node_id.clone(), addr)).ok_or_else(|| {
            OrbitError::new(
                ErrorCode::Unavailable,
                format!(
                    "owner {} of execution `{execution_id}` is not live; another owner takes it \
                     over within the node timeout",
                    row.node_id
                ),
            )
            .to_status()
        })
    }

    /// One start attempt at the owner picked for `root_id`.
    async fn try_start(
        &self,
        root_id: &str,
        request: &pb::StartExecutionRequest,
        deadline: Instant,
    ) -> Result<Result<pb::StartExecutionResponse, Status>, Retryable> {
        let (node_id, addr) = self.pick(root_id)?;
        let mut client = self.client(&addr)?;
        let mut call = self.request(request.clone());
        call.set_timeout(
            deadline.saturating_duration_since(Instant::now()).min(self.retry.attempt_timeout),
        );
        match client.start_execution(call).await {
            Ok(response) => {
                let response = response.into_inner();
                // The owner that created it holds it (its owners row names that node): a
                // result handed for it later needs no read of the row.
                if response.created {
                    self.remember_owner(&response.execution_id, node_id);
                }
                Ok(Ok(response))
            }
            Err(status) if retryable(&status) => {
                self.forget(&addr);
                Err(Retryable(format!("owner {node_id} at {addr}: {}", status.message())))
            }
            Err(status) => Ok(Err(refused(&node_id, status))),
        }
    }
}

/// An owner's answer, with its authentication refusals made recognisable: they are this
/// service's misconfiguration (no or wrong service credentials), not the end caller's.
fn refused(node_id: &str, status: Status) -> Status {
    if !matches!(status.code(), Code::Unauthenticated | Code::PermissionDenied) {
        return status;
    }
    tracing::error!(owner = %node_id, code = ?status.code(), error = %status.message(), "an owner refused this service's credentials: give it a `service` identity's token (--service-token) or client certificate");
    let message = format!(
        "owner {node_id} refused this service's credentials (--service-token or its client \
         certificate must be a `service` identity): {}",
        status.message()
    );
    match OrbitError::from_status(&status) {
        Some(orbit) => OrbitError::new(orbit.code, message).to_status(),
        None => Status::new(status.code(), message),
    }
}

/// Whether a failed call may succeed at another attempt (perhaps at another owner): the
/// transport failed, or the owner said it cannot serve now. Errors carrying another Orbit
/// code are answers, not failures.
fn retryable(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable | Code::Cancelled => true,
        // This attempt's own timeout (an owner that does not answer), not an Orbit answer.
        Code::DeadlineExceeded => OrbitError::from_status(status).is_none(),
        // Connection resets and the like surface as `Unknown` without an Orbit code.
        Code::Unknown => OrbitError::from_status(status).is_none(),
        _ => false,
    }
}

fn root_of(request: &pb::StartExecutionRequest) -> &str {
    if request.root_id.is_empty() {
        &request.execution_id
    } else {
        &request.root_id
    }
}

#[tonic::async_trait]
impl OwnerService for RemoteOwners {
    async fn start_execution(
        &self,
        request: Request<pb::StartExecutionRequest>,
    ) -> Result<Response<pb::StartExecutionResponse>, Status> {
        let request = request.into_inner();
        let root_id = root_of(&request).to_string();
        let started = Instant::now();
        let deadline = started + self.retry.total;
        let mut backoff = self.retry.first_backoff;
        loop {
            let failure = match self.try_start(&root_id, &request, deadline).await {
                Ok(answer) => return answer.map(Response::new),
                Err(Retryable(why)) => why,
            };
            if Instant::now() + backoff >= deadline {
                tracing::warn!(execution_id = %request.execution_id, root_id = %root_id, error = %failure, "no owner accepted the start");
                return Err(OrbitError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "no owner accepted the start of `{}` within {} ms (last: {failure}); \
                         retry the same execution id",
                        request.execution_id,
                        started.elapsed().as_millis()
                    ),
                )
                .to_status());
            }
            tracing::debug!(execution_id = %request.execution_id, error = %failure, "start attempt failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.retry.max_backoff);
            if let Err(e) = self.membership.refresh().await {
                tracing::debug!(error = %e, "cannot refresh the live owners");
            }
        }
    }

    async fn wake(
        &self,
        _request: Request<pb::OwnerServiceWakeRequest>,
    ) -> Result<Response<pb::OwnerServiceWakeResponse>, Status> {
        // The inbox insert already notified the owners; nothing to wait for here.
        Ok(Response::new(pb::OwnerServiceWakeResponse {}))
    }

    async fn report_result(
        &self,
        request: Request<pb::ReportResultRequest>,
    ) -> Result<Response<pb::ReportResultResponse>, Status> {
        // One attempt at the execution's owner: the caller falls back to the inbox on any
        // failure, so retrying here would only delay the durable route.
        let request = request.into_inner();
        let execution_id = request.execution_id.clone();
        if !request.owner_node_id.is_empty() {
            // The owner that handed the task over: it owns the execution unless a takeover
            // moved it since, which a live owner only does after that node died.
            let handed = self
                .membership
                .live_owners()
                .into_iter()
                .any(|n| n.node_id == request.owner_node_id && n.addr.is_some());
            if handed {
                self.remember_owner(&execution_id, request.owner_node_id.clone());
            }
        }
        let addr = self.remembered_owner_of(&execution_id).await?;
        let mut client = match self.client(&addr) {
            Ok(c) => c,
            Err(failed) => {
                self.forget_owner(&execution_id);
                return Err(unavailable(failed));
            }
        };
        let mut call = self.request(request);
        call.set_timeout(self.retry.attempt_timeout);
        let answer = client.report_result(call).await.map_err(|s| {
            if retryable(&s) {
                self.forget(&addr);
            }
            refused(&addr, s)
        });
        // Not recorded (the node no longer holds the execution, or refused it) or failed:
        // read the owners row again next time.
        if !answer.as_ref().is_ok_and(|a| a.get_ref().recorded) {
            self.forget_owner(&execution_id);
        }
        answer
    }

    async fn query_execution(
        &self,
        request: Request<pb::QueryExecutionRequest>,
    ) -> Result<Response<pb::QueryExecutionResponse>, Status> {
        let request = request.into_inner();
        let addr = self.owner_of(&request.execution_id).await?;
        let mut client = self.client(&addr).map_err(unavailable)?;
        client.query_execution(self.request(request)).await.map_err(|s| refused(&addr, s))
    }

    async fn describe_execution(
        &self,
        request: Request<pb::DescribeExecutionRequest>,
    ) -> Result<Response<pb::DescribeExecutionResponse>, Status> {
        let request = request.into_inner();
        let addr = self.owner_of(&request.execution_id).await?;
        let mut client = self.client(&addr).map_err(unavailable)?;
        client.describe_execution(self.request(request)).await.map_err(|s| refused(&addr, s))
    }
}

fn unavailable(Retryable(why): Retryable) -> Status {
    OrbitError::new(ErrorCode::Unavailable, why).to_status()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::MembershipConfig;
    use orbit_store::{SqliteStore, Store};
    use std::sync::Arc;

    fn start(id: &str) -> Request<pb::StartExecutionRequest> {
        Request::new(pb::StartExecutionRequest {
            execution_id: id.into(),
            workflow: "w".into(),
            ..Default::default()
        })
    }

    fn quick() -> RetryPolicy {
        RetryPolicy {
            total: Duration::from_millis(400),
            first_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(100),
            connect_timeout: Duration::from_millis(200),
            attempt_timeout: Duration::from_millis(200),
        }
    }

    async fn membership(dir: &tempfile::TempDir) -> (Arc<dyn Store>, Membership) {
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open_and_migrate(dir.path().join("r.db")).await.expect("store"));
        let m = Membership::new(
            store.clone(),
            MembershipConfig {
                node_id: "frontend-1".into(),
                service: "frontend".into(),
                addr: None,
                heartbeat_interval: Duration::from_millis(50),
                node_timeout_ms: 5_000,
            },
        );
        (store, m)
    }

    /// Registers a live owner `node_id` whose address refuses connections (a port just
    /// released), and lets `m` see it.
    async fn refusing_owner(store: &Arc<dyn Store>, m: &Membership, node_id: &str) {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let node = orbit_store::NodeInfo {
            node_id: node_id.into(),
            service: "owner".into(),
            incarnation: "1".into(),
            addr: Some(format!("127.0.0.1:{port}")),
            sessions: None,
        };
        store.heartbeat_node(&node).await.expect("beat");
        m.beat().await.expect("beat");
    }

    fn assert_unavailable(status: &Status) {
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let orbit = OrbitError::from_status(status).expect("an Orbit code");
        assert_eq!(orbit.code, ErrorCode::Unavailable);
    }

    #[tokio::test]
    async fn without_a_live_owner_a_start_is_unavailable_within_the_budget() {
        let dir = tempfile::tempdir().expect("dir");
        let (_store, m) = membership(&dir).await;
        let remote = RemoteOwners::new(m, quick());
        let began = Instant::now();
        let status = remote.start_execution(start("e1")).await.expect_err("no owner");
        assert_unavailable(&status);
        assert!(status.message().contains("no live owner"), "{}", status.message());
        let took = began.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test]
    async fn an_owner_that_does_not_answer_is_retried_then_unavailable() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, m) = membership(&dir).await;
        refusing_owner(&store, &m, "owner-x").await;
        let remote = RemoteOwners::new(m, quick());
        let status = remote.start_execution(start("e1")).await.expect_err("refused");
        assert_unavailable(&status);
        assert!(status.message().contains("owner-x"), "{}", status.message());
    }

    #[tokio::test]
    async fn reads_of_an_execution_without_owner_are_not_found() {
        let dir = tempfile::tempdir().expect("dir");
        let (_store, m) = membership(&dir).await;
        let remote = RemoteOwners::new(m, quick());
        let status = remote
            .query_execution(Request::new(pb::QueryExecutionRequest {
                execution_id: "nope".into(),
                name: "q".into(),
            }))
            .await
            .expect_err("no owner row");
        let orbit = OrbitError::from_status(&status).expect("an Orbit code");
        assert_eq!(orbit.code, ErrorCode::ExecutionNotFound);
    }

    /// A result goes to the owner that handed its task over (`owner_node_id`) while that
    /// node is live, without reading the owners row: here there is none, so without the
    /// hint the call ends `EXECUTION_NOT_FOUND`, with it at the (unreachable) owner.
    #[tokio::test]
    async fn a_result_goes_to_the_owner_that_handed_its_task() {
        let dir = tempfile::tempdir().expect("dir");
        let (store, m) = membership(&dir).await;
        refusing_owner(&store, &m, "owner-x").await;
        let remote = RemoteOwners::new(m, quick());
        let result = |hint: &str| {
            Request::new(pb::ReportResultRequest {
                execution_id: "e1".into(),
                token: "t".into(),
                worker_id: "w".into(),
                owner_node_id: hint.into(),
                result: Some(pb::report_result_request::Result::Output(Default::default())),
                ..pb::ReportResultRequest::default()
            })
        };
        let read = remote.report_result(result("")).await.expect_err("no owners row");
        let orbit = OrbitError::from_status(&read).expect("an Orbit code");
        assert_eq!(orbit.code, ErrorCode::ExecutionNotFound, "{read:?}");
        let hinted = remote.report_result(result("owner-x")).await.expect_err("unreachable");
        assert_eq!(hinted.code(), Code::Unavailable, "went to owner-x, which refuses: {hinted:?}");
        // A hint naming no live owner is not followed.
        let stale = remote.report_result(result("owner-gone")).await.expect_err("no row");
        let orbit = OrbitError::from_status(&stale).expect("an Orbit code");
        assert_eq!(orbit.code, ErrorCode::ExecutionNotFound, "{stale:?}");
    }

    #[test]
    fn only_transport_failures_and_unavailable_are_retried() {
        assert!(retryable(&Status::unavailable("tcp connect error")));
        assert!(retryable(&Status::unknown("connection reset")));
        assert!(retryable(&OrbitError::new(ErrorCode::Unavailable, "stopping").to_status()));
        assert!(!retryable(&OrbitError::new(ErrorCode::InvalidInput, "bad").to_status()));
        assert!(!retryable(&OrbitError::new(ErrorCode::WorkflowNotFound, "w").to_status()));
    }

    #[test]
    fn children_route_by_their_root() {
        let mut r =
            pb::StartExecutionRequest { execution_id: "p/child".into(), ..Default::default() };
        assert_eq!(root_of(&r), "p/child");
        r.root_id = "p".into();
        assert_eq!(root_of(&r), "p");
    }
}
