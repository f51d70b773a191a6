//! A typed client for the public `orbit.v1.WorkflowService`: start an execution (with a
//! priority, [`Start`]), signal, query and update it, cancel it, migrate, reset or fork it,
//! describe it, read or watch its history, and wait for its result — with JSON payloads
//! (`serde_json::Value`) instead of `google.protobuf.Value`. Also the server-wide named
//! rate limits of `AdminService` ([`Client::set_rate_limit`] and its neighbours).
//!
//! A thin layer over the generated tonic clients ([`Client::raw`] and [`Client::raw_admin`]
//! hand them out for anything not covered here, such as listing executions or registering
//! workflows): each method is
//! one RPC, and errors are the server's [`tonic::Status`] (its `orbit-code` metadata
//! carries the stable error code, docs/errors.md).
//!
//! ```no_run
//! use orbit_worker::client::Client;
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), orbit_worker::client::ClientError> {
//! let client = Client::connect("127.0.0.1:7233").await?;
//! let started = client.start("hello", Some("hello-ada"), json!({"name": "Ada"})).await?;
//! let result = client.result(&started.execution_id).await?;
//! assert_eq!(result.output, json!({"greeting": "Hello, Ada!"}));
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use orbit_api::tls::ClientTls;
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::Value;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status, Streaming};

use crate::env::{tls_from_env, token_from_env};
use crate::value;

pub use crate::restore::{Fork, Reset};
pub use crate::start::Start;

/// Large histories may exceed tonic's 4 MiB default message size.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone, Debug)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(bearer) = &self.0 {
            request.metadata_mut().insert("authorization", bearer.clone());
        }
        Ok(request)
    }
}

/// The generated client with the bearer interceptor, as [`Client::raw`] returns it.
pub type RawClient = WorkflowServiceClient<InterceptedService<Channel, Bearer>>;

/// The generated `AdminService` client with the bearer interceptor, as
/// [`Client::raw_admin`] returns it.
pub type RawAdminClient = AdminServiceClient<InterceptedService<Channel, Bearer>>;

/// Why a [`Client`] call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// An invalid address, TLS option or token.
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The server could not be reached.
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// The server answered with an error status.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Box<Status>),
    /// A watch stream ended before the execution's result.
    #[error("the watch stream ended before the result")]
    WatchEnded,
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        Self::Status(Box::new(status))
    }
}

impl ClientError {
    /// The server's status, when the call got one.
    #[must_use]
    pub fn status(&self) -> Option<&Status> {
        match self {
            Self::Status(status) => Some(status),
            _ => None,
        }
    }
}

/// How a run ended, with its output or error as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionResult {
    /// The execution id.
    pub execution_id: String,
    /// The run the result belongs to.
    pub run: u32,
    /// `Completed`, `Failed`, `Cancelled`, `TimedOut`, `Terminated` or `ContinuedAsNew`.
    pub status: pb::ExecutionStatus,
    /// The output of a completed run (`null` otherwise).
    pub output: Value,
    /// The error of a run that did not complete.
    pub error: Option<pb::TaskError>,
}

impl From<pb::ExecutionResult> for ExecutionResult {
    fn from(r: pb::ExecutionResult) -> Self {
        Self {
            status: r.status(),
            execution_id: r.execution_id,
            run: r.run,
            output: value::from_proto_opt(r.output.as_ref()),
            error: r.error,
        }
    }
}

/// A client of `WorkflowService` (and of `AdminService`'s rate limits). Cheap to clone;
/// clones share the connection.
#[derive(Clone, Debug)]
pub struct Client {
    inner: RawClient,
    admin: RawAdminClient,
}

impl Client {
    /// Connects to `address` (`host:port` or a URI) with the TLS options and token of the
    /// environment (`ORBIT_TLS_CA`, `ORBIT_TLS_CLIENT_CERT`, `ORBIT_TLS_CLIENT_KEY`,
    /// `ORBIT_TOKEN`), as the worker and the `orbit` CLI read them.
    ///
    /// # Errors
    ///
    /// An invalid address or option, or an unreachable server.
    pub async fn connect(address: &str) -> Result<Self, ClientError> {
        Self::connect_with(address, &tls_from_env(), token_from_env().as_deref()).await
    }

    /// Connects to `address` with explicit TLS options (a CA for TLS, plus a client
    /// certificate and key for mutual TLS) and bearer token.
    ///
    /// # Errors
    ///
    /// An invalid address, option or token, or an unreachable server.
    pub async fn connect_with(
        address: &str,
        tls: &ClientTls,
        token: Option<&str>,
    ) -> Result<Self, ClientError> {
        let bearer = token
            .map(|t| format!("Bearer {t}").parse::<MetadataValue<Ascii>>())
            .transpose()
            .map_err(|_| ClientError::Config("the token must be printable ASCII".into()))?;
        let channel = tls
            .endpoint(address)
            .map_err(ClientError::Config)?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        Ok(Self::from_channel(channel, bearer))
    }

    fn from_channel(channel: Channel, bearer: Option<MetadataValue<Ascii>>) -> Self {
        let admin = AdminServiceClient::with_interceptor(channel.clone(), Bearer(bearer.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let inner = WorkflowServiceClient::with_interceptor(channel, Bearer(bearer))
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        Self { inner, admin }
    }

    /// The generated tonic client underneath, for the RPCs this type does not wrap.
    #[must_use]
    pub fn raw(&self) -> RawClient {
        self.inner.clone()
    }

    /// The generated `AdminService` client on the same connection, for the admin RPCs this
    /// type does not wrap (`ListWorkers`, `ClusterStatus`, ...).
    #[must_use]
    pub fn raw_admin(&self) -> RawAdminClient {
        self.admin.clone()
    }

    /// Starts an execution of the newest version of `workflow` with `input`. With an
    /// `execution_id`, starting the same id again returns the existing run
    /// (`created: false`) instead of a second one; without, the server picks an id.
    /// [`Client::start_with`] takes a version and a priority too.
    ///
    /// # Errors
    ///
    /// The server's status (`NOT_FOUND` for an unknown workflow, `INVALID_ARGUMENT` for an
    /// input that breaks the workflow's contract, ...).
    pub async fn start(
        &self,
        workflow: &str,
        execution_id: Option<&str>,
        input: Value,
    ) -> Result<pb::StartExecutionResponse, ClientError> {
        let start = Start::new(workflow, &input);
        self.start_with(match execution_id {
            Some(id) => start.execution_id(id),
            None => start,
        })
        .await
    }

    /// Starts an execution as [`Start`] describes it: the workflow and input, and
    /// optionally a version, an execution id (idempotent start) and a task priority
    /// (`Start::new("reindex", &input).priority(5)`).
    ///
    /// # Errors
    ///
    /// As [`Client::start`]; also `INVALID_ARGUMENT` for a priority outside 1..=5.
    pub async fn start_with(
        &self,
        start: Start,
    ) -> Result<pb::StartExecutionResponse, ClientError> {
        let request = start.into_request();
        Ok(self.inner.clone().start_execution(request).await?.into_inner())
    }

    /// Sends signal `name` with `payload` to the execution's current run; returns the
    /// sequence number of the recorded `SignalReceived` event.
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn signal(
        &self,
        execution_id: &str,
        name: &str,
        payload: Value,
    ) -> Result<u64, ClientError> {
        let request = pb::SignalExecutionRequest {
            execution_id: execution_id.into(),
            name: name.into(),
            payload: value::to_proto_opt(&payload),
            request_id: String::new(),
        };
        Ok(self.inner.clone().signal_execution(request).await?.into_inner().seq)
    }

    /// Evaluates query `name` on the execution's current state (read-only).
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn query(&self, execution_id: &str, name: &str) -> Result<Value, ClientError> {
        self.query_at(execution_id, name, 0).await
    }

    /// Evaluates query `name` on the state of the execution's current run as of history
    /// seq `at_seq` (its events 1..=`at_seq` folded, with the version the run had then);
    /// 0 means now, like [`Client::query`].
    ///
    /// # Errors
    ///
    /// The server's status (`INVALID_ARGUMENT` for a seq past the run's last event).
    pub async fn query_at(
        &self,
        execution_id: &str,
        name: &str,
        at_seq: u64,
    ) -> Result<Value, ClientError> {
        let request = pb::QueryExecutionRequest {
            execution_id: execution_id.into(),
            name: name.into(),
            run: 0,
            at_seq,
        };
        let response = self.inner.clone().query_execution(request).await?.into_inner();
        Ok(value::from_proto_opt(response.result.as_ref()))
    }

    /// Sends update `name` with `args` and waits for its result (validated and applied by
    /// the workflow, or refused with the status the update's validation gives).
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn update(
        &self,
        execution_id: &str,
        name: &str,
        args: Value,
    ) -> Result<Value, ClientError> {
        let request = pb::UpdateExecutionRequest {
            execution_id: execution_id.into(),
            name: name.into(),
            args: value::to_proto_opt(&args),
            request_id: String::new(),
            start: None,
        };
        let response = self.inner.clone().update_execution(request).await?.into_inner();
        Ok(value::from_proto_opt(response.result.as_ref()))
    }

    /// Requests cancellation of the execution's current run (compensation and `on`
    /// handlers run first; the run then ends `CANCELLED`). Returns the sequence number of
    /// the recorded `CancelRequested` event.
    ///
    /// # Errors
    ///
    /// The server's status (`FAILED_PRECONDITION` for a closed run).
    pub async fn cancel(&self, execution_id: &str, reason: &str) -> Result<u64, ClientError> {
        let request = pb::CancelExecutionRequest {
            execution_id: execution_id.into(),
            reason: reason.into(),
            request_id: String::new(),
        };
        Ok(self.inner.clone().cancel_execution(request).await?.into_inner().seq)
    }

    /// Moves a running execution to `to_version` of its workflow if every difference of the
    /// two step graphs is safe for its state; with `dry_run` only the diff is answered and
    /// nothing is written. Returns the diff, whether it was recorded, and the seq of its
    /// `DefinitionMigrated`.
    ///
    /// # Errors
    ///
    /// The server's status: `FAILED_PRECONDITION` (`MIGRATION_UNSAFE`, naming each unsafe
    /// difference; nothing written; or `EXECUTION_FINISHED`), `NOT_FOUND` for an unknown
    /// execution or version.
    pub async fn migrate(
        &self,
        execution_id: &str,
        to_version: &str,
        dry_run: bool,
    ) -> Result<pb::MigrateExecutionResponse, ClientError> {
        let request = pb::MigrateExecutionRequest {
            execution_id: execution_id.into(),
            to_version: to_version.into(),
            dry_run,
            reason: String::new(),
            request_id: String::new(),
        };
        Ok(self.inner.clone().migrate_execution(request).await?.into_inner())
    }

    /// Resets the execution to an earlier point of its current run ([`Reset::to_step`] or
    /// [`Reset::to_seq`]): the run ends and the execution goes on in the next run from the
    /// state at the point. Steps that succeeded or were skipped by then are kept (not run
    /// again); work open at the point, steps the old run's compensation undid and every
    /// step depending on those run again. A closed (`FAILED`, ...) execution is reopened.
    /// Returns the plan (kept, run again, signals after the point, the migration's diff
    /// with [`Reset::to_version`]), whether it was recorded (not for [`Reset::dry_run`]),
    /// the new run and the seq of its `RunRestored`.
    ///
    /// # Errors
    ///
    /// The server's status: `FAILED_PRECONDITION` (`RESET_POINT_INVALID`: a step that never
    /// started, a point where the run had ended or was winding down; `MIGRATION_UNSAFE`),
    /// `NOT_FOUND` for an unknown execution or version, `INVALID_ARGUMENT`.
    pub async fn reset(&self, reset: Reset) -> Result<pb::ResetExecutionResponse, ClientError> {
        let request = reset.into_request();
        Ok(self.inner.clone().reset_execution(request).await?.into_inner())
    }

    /// Creates a new execution from another's state at a history seq ([`Fork::new`]); the
    /// source is not touched. Kept and run again as for [`Client::reset`]; forking to the
    /// same new id again answers the existing fork (`created: false`). Returns the plan,
    /// whether the fork was created (not for [`Fork::dry_run`]), its id and its version.
    ///
    /// # Errors
    ///
    /// The server's status: `FAILED_PRECONDITION` (`RESET_POINT_INVALID`,
    /// `MIGRATION_UNSAFE`), `ALREADY_EXISTS` (`EXECUTION_EXISTS`: the id is another
    /// workflow's execution), `NOT_FOUND`, `INVALID_ARGUMENT`.
    pub async fn fork(&self, fork: Fork) -> Result<pb::ForkExecutionResponse, ClientError> {
        let request = fork.into_request();
        Ok(self.inner.clone().fork_execution(request).await?.into_inner())
    }

    /// One page of executions (their latest run each) matching `query` in the list query
    /// language (docs/queries.md), newest first unless the query orders (`page_token`:
    /// the previous page's `next_page_token`, empty for the first).
    ///
    /// # Errors
    ///
    /// The server's status: `INVALID_QUERY` (INVALID_ARGUMENT) for a query that does not
    /// parse or type-check, its `ErrorInfo` metadata holding `position`, `line`, `column`.
    pub async fn list_executions(
        &self,
        query: &str,
        page_token: &str,
    ) -> Result<pb::ListExecutionsResponse, ClientError> {
        let request = pb::ListExecutionsRequest {
            query: query.into(),
            page_token: page_token.into(),
            ..pb::ListExecutionsRequest::default()
        };
        Ok(self.inner.clone().list_executions(request).await?.into_inner())
    }

    /// How many executions `query` (the list query language; empty counts all) matches, in
    /// total and grouped by `group_by` (at most 3 of `workflow`, `version`, `status`,
    /// `schedule`, `parent`, `root`), the groups largest first, each group's values in
    /// `group_by`'s order (an absent value is empty). A restricted identity counts only
    /// the workflows it may read.
    ///
    /// # Errors
    ///
    /// The server's status: `INVALID_QUERY` (INVALID_ARGUMENT) for a bad query,
    /// `INVALID_ARGUMENT` (field `group_by`) for an attribute that cannot be grouped by.
    pub async fn count_executions(
        &self,
        query: &str,
        group_by: &[&str],
    ) -> Result<pb::CountExecutionsResponse, ClientError> {
        let request = pb::CountExecutionsRequest {
            query: query.into(),
            group_by: group_by.iter().map(|g| (*g).to_string()).collect(),
        };
        Ok(self.inner.clone().count_executions(request).await?.into_inner())
    }

    /// Every attribute a list query may name: the system attributes, then the declared
    /// search attributes by name (those of workflows a restricted identity may read), with
    /// their types (every page).
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn search_attribute_catalog(&self) -> Result<Vec<pb::SearchAttribute>, ClientError> {
        let mut all = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = pb::ListSearchAttributesRequest { page_size: 1000, page_token };
            let page = self.inner.clone().list_search_attributes(request).await?.into_inner();
            all.extend(page.attributes);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            page_token = page.next_page_token;
        }
    }

    /// Describes the execution's current run: its status, units, pending work and result.
    ///
    /// # Errors
    ///
    /// The server's status (`NOT_FOUND` for an unknown id).
    pub async fn describe(
        &self,
        execution_id: &str,
    ) -> Result<pb::ExecutionDescription, ClientError> {
        self.describe_at(execution_id, 0).await
    }

    /// Describes the execution's current run as it stood right after history seq `at_seq`
    /// (its events 1..=`at_seq` folded, with the version the run had then); 0 means now,
    /// like [`Client::describe`].
    ///
    /// # Errors
    ///
    /// The server's status (`NOT_FOUND` for an unknown id, `INVALID_ARGUMENT` for a seq
    /// past the run's last event).
    pub async fn describe_at(
        &self,
        execution_id: &str,
        at_seq: u64,
    ) -> Result<pb::ExecutionDescription, ClientError> {
        let request =
            pb::DescribeExecutionRequest { execution_id: execution_id.into(), run: 0, at_seq };
        let response = self.inner.clone().describe_execution(request).await?.into_inner();
        response.execution.ok_or_else(|| {
            ClientError::Status(Box::new(Status::internal("describe answered without a run")))
        })
    }

    /// The execution's current search attributes and its memo (issue 28).
    ///
    /// # Errors
    ///
    /// The server's status (`NOT_FOUND` for an unknown id).
    pub async fn search_attributes(
        &self,
        execution_id: &str,
    ) -> Result<crate::ExecutionSearch, ClientError> {
        let request =
            pb::DescribeExecutionRequest { execution_id: execution_id.into(), run: 0, at_seq: 0 };
        let response = self.inner.clone().describe_execution(request).await?.into_inner();
        Ok(crate::ExecutionSearch::of(&response))
    }

    /// The full history of the execution's current run, every page.
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn history(&self, execution_id: &str) -> Result<Vec<pb::HistoryEvent>, ClientError> {
        let mut events = Vec::new();
        let mut page_token = String::new();
        loop {
            let request = pb::GetHistoryRequest {
                execution_id: execution_id.into(),
                run: 0,
                page_size: 1000,
                page_token,
            };
            let page = self.inner.clone().get_history(request).await?.into_inner();
            events.extend(page.events);
            if page.next_page_token.is_empty() {
                return Ok(events);
            }
            page_token = page.next_page_token;
        }
    }

    /// Watches the execution's current run: every history event after `after_seq` (0: from
    /// the start), live, then the result, after which the server ends the stream.
    ///
    /// # Errors
    ///
    /// The server's status.
    pub async fn watch(
        &self,
        execution_id: &str,
        after_seq: u64,
    ) -> Result<Streaming<pb::WatchExecutionResponse>, ClientError> {
        let request = pb::WatchExecutionRequest {
            execution_id: execution_id.into(),
            after_seq,
            ..Default::default()
        };
        Ok(self.inner.clone().watch_execution(request).await?.into_inner())
    }

    /// Waits for the execution's current run to end and returns its result.
    ///
    /// # Errors
    ///
    /// The server's status, or [`ClientError::WatchEnded`] when the stream ended first.
    pub async fn result(&self, execution_id: &str) -> Result<ExecutionResult, ClientError> {
        let request = pb::WatchExecutionRequest {
            execution_id: execution_id.into(),
            result_only: true,
            ..Default::default()
        };
        let mut stream = self.inner.clone().watch_execution(request).await?.into_inner();
        while let Some(message) = stream.message().await? {
            if let Some(pb::watch_execution_response::Kind::Result(result)) = message.kind {
                return Ok(result.into());
            }
        }
        Err(ClientError::WatchEnded)
    }
}
