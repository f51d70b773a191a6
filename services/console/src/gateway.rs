//! The console's JSON gateway: `POST /ui/api/<package.Service>/<Method>` with the request
//! message in proto3 JSON answers the response message in proto3 JSON.
//!
//! No second source of truth: the request passes the server's own [`RequestGate`] (the
//! identities file: the same token, the same action table keyed by the gRPC method path,
//! the same `Caller` put in the extensions for the frontend's per-workflow checks), then
//! the very handler the gRPC server calls (`WorkflowApi`, `AdminApi`, `ScheduleApi`), in
//! process. JSON ⇄ protobuf goes through the API's descriptor set (`prost-reflect`), so a
//! field added to the API reaches the console without code here. Only the methods in
//! [`dispatch`] are reachable: reads and the operator actions of the pages (batches
//! included: start, describe, list, items, cancel; the named rate limits: set, list,
//! delete).

use orbit_api::v1::admin_service_server::AdminService;
use orbit_api::v1::schedule_service_server::ScheduleService;
use orbit_api::v1::workflow_service_server::WorkflowService;
use orbit_server_kit::{ErrorCode, OrbitError, RequestGate};
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use tonic::Status;

/// What the gateway calls: the frontend's handlers and the server's gate.
pub struct Gateway {
    pub(crate) workflows: orbit_frontend::WorkflowApi,
    pub(crate) admin: orbit_frontend::AdminApi,
    pub(crate) schedules: orbit_frontend::ScheduleApi,
    /// `None` without an identities file: every call passes, as on the gRPC port.
    pub(crate) gate: Option<Arc<dyn RequestGate>>,
    pool: DescriptorPool,
}

/// A refused or failed call: the HTTP status and the JSON error body.
#[derive(Debug)]
pub struct Refusal {
    /// The HTTP status (401 unauthenticated, 403 denied, 404 missing, …).
    pub http: u16,
    /// `{"code": "…", "message": "…", "details": [...]}`, `code` an Orbit error code.
    pub body: serde_json::Value,
}

impl Refusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal::from_status(&OrbitError::new(code, message).to_status())
    }

    /// The Orbit error a status carries (or its bare gRPC code), as HTTP.
    pub fn from_status(status: &Status) -> Refusal {
        use tonic::Code;
        let http = match status.code() {
            Code::Unauthenticated => 401,
            Code::PermissionDenied => 403,
            Code::NotFound => 404,
            Code::InvalidArgument | Code::OutOfRange => 400,
            Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => 409,
            // Too large is the request's fault (413); other exhaustion is "retry later".
            Code::ResourceExhausted
                if OrbitError::from_status(status)
                    .is_some_and(|e| e.code == ErrorCode::PayloadTooLarge) =>
            {
                413
            }
            Code::ResourceExhausted => 429,
            Code::Unavailable | Code::DeadlineExceeded => 503,
            Code::Unimplemented => 501,
            _ => 500,
        };
        let body = match OrbitError::from_status(status) {
            Some(e) => serde_json::json!({
                "code": e.code.as_str(),
                "message": e.message,
                "details": e.details.iter().map(|d| serde_json::json!({
                    "path": d.path, "code": d.code, "message": d.message,
                })).collect::<Vec<_>>(),
                "info": e.info,
            }),
            None => serde_json::json!({
                "code": format!("{:?}", status.code()).to_uppercase(),
                "message": status.message(),
                "details": [],
                "info": {},
            }),
        };
        Refusal { http, body }
    }
}

impl Gateway {
    /// A gateway over the frontend's handlers, checked by `gate`.
    ///
    /// # Panics
    /// Never in practice: the descriptor set is compiled into `orbit-api` by its build.
    #[must_use]
    pub fn new(
        frontend: &orbit_frontend::Frontend,
        schedule_wake: Arc<tokio::sync::Notify>,
        gate: Option<Arc<dyn RequestGate>>,
    ) -> Gateway {
        let pool = DescriptorPool::decode(orbit_api::FILE_DESCRIPTOR_SET)
            .expect("orbit-api's descriptor set decodes");
        Gateway {
            workflows: frontend.workflow_api(),
            admin: frontend.admin_api(),
            schedules: frontend.schedule_api(schedule_wake),
            gate,
            pool,
        }
    }

    /// Calls `method` (`orbit.v1.WorkflowService/ListExecutions`) with the JSON `body`,
    /// authenticated by the `authorization` header of `headers`.
    ///
    /// # Errors
    /// The refusal of the gate, a bad request, or the handler's error.
    pub async fn call(
        &self,
        method: &str,
        headers: &hyper::HeaderMap,
        peer: Option<SocketAddr>,
        body: &[u8],
    ) -> Result<serde_json::Value, Refusal> {
        // The gate first: without credentials nothing else is said, not even which
        // methods exist.
        let extensions = self.admit(method, headers, peer)?;
        let (service, name) = method.split_once('/').ok_or_else(|| unknown(method))?;
        let descriptor = self
            .pool
            .get_service_by_name(service)
            .and_then(|s| s.methods().find(|m| m.name() == name))
            .ok_or_else(|| unknown(method))?;
        let input = descriptor.input();
        let output = descriptor.output();
        let call = Call { input: &input, output: &output, body, extensions };
        dispatch(self, method, call).await
    }

    /// The gate's decision for `method`, as the gRPC port would take it: the extensions
    /// it added (the caller) for the handler.
    fn admit(
        &self,
        method: &str,
        headers: &hyper::HeaderMap,
        peer: Option<SocketAddr>,
    ) -> Result<tonic::Extensions, Refusal> {
        let mut request = tonic::codegen::http::Request::new(tonic::body::Body::empty());
        *request.uri_mut() = format!("/{method}").parse().map_err(|_| unknown(method))?;
        if let Some(auth) = headers.get(hyper::header::AUTHORIZATION) {
            request.headers_mut().insert(hyper::header::AUTHORIZATION, auth.clone());
        }
        request.extensions_mut().insert(tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: peer,
        });
        if let Some(gate) = &self.gate {
            gate.admit(&mut request).map_err(|s| Refusal::from_status(&s))?;
        }
        let (parts, _) = request.into_parts();
        Ok(parts.extensions)
    }
}

fn unknown(method: &str) -> Refusal {
    Refusal::from_status(&Status::unimplemented(format!("the console serves no method {method}")))
}

fn internal(e: impl std::fmt::Display) -> Refusal {
    Refusal::from_status(&Status::internal(format!("response: {e}")))
}

/// One call's JSON and descriptors.
pub(crate) struct Call<'a> {
    input: &'a MessageDescriptor,
    output: &'a MessageDescriptor,
    body: &'a [u8],
    extensions: tonic::Extensions,
}

impl Call<'_> {
    /// The request message from the JSON body (`{}` when empty).
    fn request<T: prost::Message + Default>(&self) -> Result<tonic::Request<T>, Refusal> {
        let body = if self.body.iter().all(u8::is_ascii_whitespace) { b"{}" } else { self.body };
        // Strict JSON first: a repeated key is refused (as the gRPC API's JSON readers
        // refuse it), never resolved by the last one silently winning.
        let text = std::str::from_utf8(body).map_err(|e| {
            Refusal::new(ErrorCode::InvalidArgument, format!("request body: not UTF-8: {e}"))
        })?;
        let value = orbit_definition::strict_json(text)
            .map_err(|e| Refusal::new(ErrorCode::InvalidArgument, format!("request body: {e}")))?;
        let message = DynamicMessage::deserialize(self.input.clone(), value)
            .map_err(|e| Refusal::new(ErrorCode::InvalidArgument, format!("request body: {e}")))?;
        let message: T = message
            .transcode_to()
            .map_err(|e| Refusal::new(ErrorCode::InvalidArgument, format!("request body: {e}")))?;
        Ok(tonic::Request::from_parts(
            tonic::metadata::MetadataMap::new(),
            self.extensions.clone(),
            message,
        ))
    }

    /// The handler's answer as proto3 JSON (default values included, so pages need not
    /// guess absent fields).
    fn response<T: prost::Message>(
        &self,
        answer: Result<tonic::Response<T>, Status>,
    ) -> Result<serde_json::Value, Refusal> {
        let message = answer.map_err(|s| Refusal::from_status(&s))?.into_inner();
        let dynamic =
            DynamicMessage::decode(self.output.clone(), message.encode_to_vec().as_slice())
                .map_err(internal)?;
        let options = SerializeOptions::new().skip_default_fields(false);
        dynamic.serialize_with_options(serde_json::value::Serializer, &options).map_err(internal)
    }
}

/// Calls one handler by name. Every arm is the trait method the gRPC server calls.
macro_rules! route {
    ($method:expr, $call:expr, $( $path:literal => $api:expr, $trait:ident :: $fn:ident ),+ $(,)?) => {
        match $method {
            $( $path => {
                let request = $call.request()?;
                $call.response($trait::$fn(&$api, request).await)
            } )+
            other => Err(unknown(other)),
        }
    };
}

async fn dispatch(g: &Gateway, method: &str, call: Call<'_>) -> Result<serde_json::Value, Refusal> {
    route!(method, call,
        "orbit.v1.WorkflowService/ListExecutions" => g.workflows, WorkflowService::list_executions,
        "orbit.v1.WorkflowService/ListSearchAttributes" => g.workflows, WorkflowService::list_search_attributes,
        "orbit.v1.WorkflowService/CountExecutions" => g.workflows, WorkflowService::count_executions,
        "orbit.v1.WorkflowService/DescribeExecution" => g.workflows, WorkflowService::describe_execution,
        "orbit.v1.WorkflowService/GetHistory" => g.workflows, WorkflowService::get_history,
        "orbit.v1.WorkflowService/ListWorkflows" => g.workflows, WorkflowService::list_workflows,
        "orbit.v1.WorkflowService/GetWorkflow" => g.workflows, WorkflowService::get_workflow,
        "orbit.v1.WorkflowService/SignalExecution" => g.workflows, WorkflowService::signal_execution,
        "orbit.v1.WorkflowService/QueryExecution" => g.workflows, WorkflowService::query_execution,
        "orbit.v1.WorkflowService/CancelExecution" => g.workflows, WorkflowService::cancel_execution,
        "orbit.v1.WorkflowService/UpdateExecution" => g.workflows, WorkflowService::update_execution,
        "orbit.v1.WorkflowService/ResumeExecution" => g.workflows, WorkflowService::resume_execution,
        "orbit.v1.WorkflowService/TerminateExecution" => g.workflows, WorkflowService::terminate_execution,
        "orbit.v1.WorkflowService/MigrateExecution" => g.workflows, WorkflowService::migrate_execution,
        "orbit.v1.WorkflowService/ResetExecution" => g.workflows, WorkflowService::reset_execution,
        "orbit.v1.WorkflowService/ForkExecution" => g.workflows, WorkflowService::fork_execution,
        "orbit.v1.WorkflowService/StartBatch" => g.workflows, WorkflowService::start_batch,
        "orbit.v1.WorkflowService/DescribeBatch" => g.workflows, WorkflowService::describe_batch,
        "orbit.v1.WorkflowService/ListBatches" => g.workflows, WorkflowService::list_batches,
        "orbit.v1.WorkflowService/ListBatchItems" => g.workflows, WorkflowService::list_batch_items,
        "orbit.v1.WorkflowService/CancelBatch" => g.workflows, WorkflowService::cancel_batch,
        "orbit.v1.AdminService/ClusterStatus" => g.admin, AdminService::cluster_status,
        "orbit.v1.AdminService/ListWorkers" => g.admin, AdminService::list_workers,
        "orbit.v1.AdminService/DescribeTaskQueue" => g.admin, AdminService::describe_task_queue,
        "orbit.v1.AdminService/Replay" => g.admin, AdminService::replay,
        "orbit.v1.AdminService/SetRateLimit" => g.admin, AdminService::set_rate_limit,
        "orbit.v1.AdminService/ListRateLimits" => g.admin, AdminService::list_rate_limits,
        "orbit.v1.AdminService/DeleteRateLimit" => g.admin, AdminService::delete_rate_limit,
        "orbit.v1.ScheduleService/ListSchedules" => g.schedules, ScheduleService::list_schedules,
        "orbit.v1.ScheduleService/GetSchedule" => g.schedules, ScheduleService::get_schedule,
        "orbit.v1.ScheduleService/PauseSchedule" => g.schedules, ScheduleService::pause_schedule,
        "orbit.v1.ScheduleService/ResumeSchedule" => g.schedules, ScheduleService::resume_schedule,
        "orbit.v1.ScheduleService/TriggerSchedule" => g.schedules, ScheduleService::trigger_schedule,
        "orbit.v1.ScheduleService/PreviewSchedule" => g.schedules, ScheduleService::preview_schedule,
    )
}

#[cfg(test)]
mod tests {
    use super::Refusal;
    use orbit_server_kit::{ErrorCode, OrbitError};

    #[test]
    fn refusals_keep_the_orbit_code_and_map_to_http() {
        for (code, http) in [
            (ErrorCode::Unauthenticated, 401),
            (ErrorCode::PermissionDenied, 403),
            (ErrorCode::ExecutionNotFound, 404),
            (ErrorCode::InvalidArgument, 400),
            (ErrorCode::ExecutionFinished, 409),
            (ErrorCode::Unavailable, 503),
        ] {
            let refusal = Refusal::from_status(&OrbitError::new(code, "why").to_status());
            assert_eq!(refusal.http, http, "{code:?}");
            assert_eq!(refusal.body["code"], code.as_str());
            assert_eq!(refusal.body["message"], "why");
        }
        // An INVALID_QUERY refusal keeps its position for the query bar's caret.
        let query = OrbitError::invalid_query("expected a datetime", 29, 1, 30).to_status();
        let refusal = Refusal::from_status(&query);
        assert_eq!(refusal.http, 400);
        assert_eq!(refusal.body["info"]["column"], "30");
        assert_eq!(refusal.body["info"]["line"], "1");
        let bare = Refusal::from_status(&tonic::Status::unimplemented("no"));
        assert_eq!((bare.http, bare.body["code"].as_str()), (501, Some("UNIMPLEMENTED")));
    }
}
