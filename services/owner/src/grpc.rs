//! `orbit.internal.v1.OwnerService` over the owner: wire types are converted here, once, and
//! errors leave as `tonic::Status` carrying the Orbit code.

use crate::error::OwnerError;
use crate::owner::{Owner, StartRequest};
use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_engine::ParentRef;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use orbit_server_kit::{ErrorCode, OrbitError};
use std::str::FromStr;
use tonic::{Request, Response, Status};

impl From<OwnerError> for Status {
    fn from(e: OwnerError) -> Status {
        let code = ErrorCode::from_str(e.code).unwrap_or(ErrorCode::StorageError);
        OrbitError::new(code, e.message).to_status()
    }
}

fn invalid(message: impl Into<String>) -> Status {
    OrbitError::new(ErrorCode::InvalidArgument, message).to_status()
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

#[tonic::async_trait]
impl OwnerService for Owner {
    async fn start_execution(
        &self,
        request: Request<pb::StartExecutionRequest>,
    ) -> Result<Response<pb::StartExecutionResponse>, Status> {
        let r = request.into_inner();
        if r.execution_id.is_empty() {
            return Err(invalid("execution_id is required"));
        }
        let input = match r.input {
            Some(v) => proto_to_json(v).map_err(|e| invalid(format!("input: {e}")))?,
            None => serde_json::Value::Null,
        };
        let parent = non_empty(r.parent_id).map(|execution_id| {
            // The parent's unit is the last path segment of a child id (`<parent>/<unit>`).
            let step = r.execution_id.rsplit('/').next().unwrap_or_default().to_string();
            ParentRef { execution_id, step }
        });
        let started = self
            .start(StartRequest {
                execution_id: r.execution_id,
                workflow: r.workflow,
                version: non_empty(r.version),
                input,
                parent,
                root_id: non_empty(r.root_id),
                schedule_id: non_empty(r.schedule_id),
            })
            .await?;
        Ok(Response::new(pb::StartExecutionResponse {
            execution_id: started.execution_id,
            run: started.run,
            created: started.created,
            version: started.version,
            definition_hash: started.definition_hash,
        }))
    }

    async fn wake(
        &self,
        _request: Request<pb::OwnerServiceWakeRequest>,
    ) -> Result<Response<pb::OwnerServiceWakeResponse>, Status> {
        Owner::wake(self).await;
        Ok(Response::new(pb::OwnerServiceWakeResponse {}))
    }

    async fn query_execution(
        &self,
        request: Request<pb::QueryExecutionRequest>,
    ) -> Result<Response<pb::QueryExecutionResponse>, Status> {
        let r = request.into_inner();
        let (value, as_of_seq, run) = self.query(&r.execution_id, &r.name).await?;
        // A result over the payload limits would not fit (or decode in) the response.
        let what = format!("query `{}` result", r.name);
        orbit_server_kit::payload::check_limits(
            &what,
            &value,
            orbit_server_kit::payload::DEFAULT_MAX_PAYLOAD_BYTES,
        )?;
        Ok(Response::new(pb::QueryExecutionResponse {
            result: Some(json_to_proto(value)),
            as_of_seq,
            run,
        }))
    }

    async fn describe_execution(
        &self,
        request: Request<pb::DescribeExecutionRequest>,
    ) -> Result<Response<pb::DescribeExecutionResponse>, Status> {
        let r = request.into_inner();
        let snap = self.snapshot(&r.execution_id).await?;
        let last_event = snap
            .state
            .units
            .values()
            .filter_map(|u| u.scheduled_at)
            .max()
            .unwrap_or(snap.state.created_at);
        let info = orbit_wire::info_from_state(&snap.state, &snap.root_id, last_event);
        Ok(Response::new(pb::DescribeExecutionResponse {
            execution: Some(orbit_wire::describe(&snap.def, &snap.state, info)),
            epoch: snap.epoch.unwrap_or(0),
        }))
    }
}
