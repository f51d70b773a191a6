//! `orbit.internal.v1.OwnerService` over the owner: wire types are converted here, once, and
//! errors leave as `tonic::Status` carrying the Orbit code.

use crate::error::OwnerError;
use crate::owner::Owner;
use crate::reported;
use crate::requests::{ForkFrom, InitialUpdate, StartRequest};
use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_engine::ParentRef;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use orbit_server_kit::validate as rules;
use orbit_server_kit::{ErrorCode, OrbitError};
use tonic::{Request, Response, Status};

impl From<OwnerError> for Status {
    fn from(e: OwnerError) -> Status {
        OrbitError::new(e.code, e.message).to_status()
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A fork's source, checked: a fork is a top-level execution without an update.
fn fork_from(f: pb::ForkFrom, child_or_update: bool) -> Result<ForkFrom, Status> {
    if child_or_update {
        return Err(rules::invalid("fork", "a fork has no parent and no update").to_status());
    }
    rules::id("fork.source_execution_id", &f.source_execution_id).map_err(field)?;
    if f.at_seq == 0 {
        return Err(rules::invalid("fork.at_seq", "is required (1 or more)").to_status());
    }
    Ok(ForkFrom {
        source_execution_id: f.source_execution_id,
        source_run: f.source_run,
        at_seq: f.at_seq,
        reason: f.reason,
    })
}

fn field(e: OrbitError) -> Status {
    e.to_status()
}

/// Validates an internal start exactly like the public frontend does (shared id rules,
/// input size, workflow existence), and checks what only internal callers send: the
/// definition hash they resolved, and a child's relation to its parent.
async fn validated(owner: &Owner, r: pb::StartExecutionRequest) -> Result<StartRequest, Status> {
    let parent_id = rules::optional("parent_id", &r.parent_id).map_err(field)?.map(str::to_string);
    if parent_id.is_some() {
        rules::id("execution_id", &r.execution_id).map_err(field)?;
    } else {
        rules::new_execution_id("execution_id", &r.execution_id).map_err(field)?;
    }
    rules::id("workflow", &r.workflow).map_err(field)?;
    rules::optional("version", &r.version).map_err(field)?;
    rules::optional("root_id", &r.root_id).map_err(field)?;
    rules::optional("schedule_id", &r.schedule_id).map_err(field)?;
    rules::optional("definition_hash", &r.definition_hash).map_err(field)?;
    let input = match r.input {
        Some(v) => {
            proto_to_json(v).map_err(|e| rules::invalid("input", e.to_string()).to_status())?
        }
        None => serde_json::Value::Null,
    };
    let max = owner.inner.cfg.limits.max_payload_bytes.unwrap_or(rules::DEFAULT_MAX_PAYLOAD_BYTES);
    rules::check_size("input", &input, max).map_err(field)?;
    let def = owner.definition(&r.workflow, non_empty(r.version.clone()).as_deref()).await?;
    if !r.definition_hash.is_empty() && r.definition_hash != def.hash {
        return Err(rules::invalid(
            "definition_hash",
            format!("is not the hash of {}@{} ({})", def.name, def.version, def.hash),
        )
        .to_status());
    }
    let update = match r.update {
        Some(u) => Some(initial_update(u, max)?),
        None => None,
    };
    let (parent, root_id) = match parent_id {
        Some(parent_id) => {
            let (parent, root) = child_of(owner, &parent_id, &r.execution_id, &def.name).await?;
            if !r.root_id.is_empty() && r.root_id != root {
                return Err(rules::invalid(
                    "root_id",
                    format!("is not the parent's root `{root}`"),
                )
                .to_status());
            }
            (Some(parent), Some(root))
        }
        None => {
            if !r.root_id.is_empty() && r.root_id != r.execution_id {
                return Err(rules::invalid(
                    "root_id",
                    "must be empty or the execution id for an execution without a parent",
                )
                .to_status());
            }
            (None, None)
        }
    };
    let fork = match r.fork {
        Some(f) => Some(fork_from(f, parent.is_some() || update.is_some())?),
        None => None,
    };
    // A fork without a version keeps the one in effect at its seq (the owner reads it).
    let version =
        if fork.is_some() && r.version.is_empty() { None } else { Some(def.version.clone()) };
    // Only for a plain start that names its version (the frontend's cached latest).
    let versions_seen =
        (r.versions_seen > 0 && !r.version.is_empty() && fork.is_none() && parent.is_none())
            .then_some(r.versions_seen);
    Ok(StartRequest {
        execution_id: r.execution_id,
        workflow: def.name.clone(),
        // Pinned to the version resolved here, so the hash checked is the one that runs.
        version,
        input,
        parent,
        root_id,
        schedule_id: non_empty(r.schedule_id),
        update,
        fork,
        // Out of 1..=5 (the frontend refuses those first) is refused by the engine's start.
        priority: (r.priority > 0).then(|| u8::try_from(r.priority).unwrap_or(u8::MAX)),
        memo: r
            .memo
            .map(orbit_server_kit::payload::struct_to_json_object)
            .transpose()
            .map_err(|e| rules::invalid("memo", e.to_string()).to_status())?
            .map(serde_json::Value::Object),
        versions_seen,
    })
}

/// Validates an update-with-start's update like the public `UpdateExecution` does.
fn initial_update(u: pb::InitialUpdate, max: u64) -> Result<InitialUpdate, Status> {
    rules::id("update.name", &u.name).map_err(field)?;
    rules::optional("update.update_id", &u.update_id).map_err(field)?;
    let args = match u.args {
        Some(v) => proto_to_json(v)
            .map_err(|e| rules::invalid("update.args", e.to_string()).to_status())?,
        None => serde_json::Value::Null,
    };
    rules::check_size("update.args", &args, max).map_err(field)?;
    Ok(InitialUpdate { name: u.name, args, update_id: non_empty(u.update_id) })
}

/// The parent unit that started `child_id`, found in the parent's own state (the unit whose
/// `ChildStarted` named exactly this id, for this workflow), and the parent's root. A child
/// id the parent never derived is refused: it could otherwise resolve another step.
async fn child_of(
    owner: &Owner,
    parent_id: &str,
    child_id: &str,
    workflow: &str,
) -> Result<(ParentRef, String), Status> {
    let snap = owner.snapshot(parent_id).await.map_err(|e| {
        if e.code == ErrorCode::ExecutionNotFound {
            rules::invalid("parent_id", format!("execution `{parent_id}` does not exist"))
                .to_status()
        } else {
            Status::from(e)
        }
    })?;
    let unit = snap.state.units.iter().find(
        |(_, u)| matches!(&u.wait, Some(orbit_engine::state::Wait::Child(id)) if id == child_id),
    );
    let Some((key, _)) = unit else {
        return Err(rules::invalid(
            "execution_id",
            format!("execution `{parent_id}` started no child `{child_id}`"),
        )
        .to_status());
    };
    let step = orbit_engine::unit::UnitKey::parse(key).map(|k| k.step).unwrap_or_default();
    let expected = snap.def.step(step.as_str()).and_then(|s| match &s.kind {
        orbit_definition::StepKind::Workflow { workflow, .. } => Some(workflow.as_str()),
        _ => None,
    });
    if expected != Some(workflow) {
        return Err(rules::invalid(
            "workflow",
            format!("unit `{key}` of `{parent_id}` starts {expected:?}, not `{workflow}`"),
        )
        .to_status());
    }
    Ok((ParentRef { execution_id: parent_id.to_string(), step: key.clone() }, snap.root_id))
}

#[tonic::async_trait]
impl OwnerService for Owner {
    async fn start_execution(
        &self,
        request: Request<pb::StartExecutionRequest>,
    ) -> Result<Response<pb::StartExecutionResponse>, Status> {
        let start = validated(self, request.into_inner()).await?;
        let started = self.start(start).await?;
        Ok(Response::new(pb::StartExecutionResponse {
            execution_id: started.execution_id,
            run: started.run,
            created: started.created,
            version: started.version,
            definition_hash: started.definition_hash,
            update_seq: started.update_seq,
        }))
    }

    async fn wake(
        &self,
        _request: Request<pb::OwnerServiceWakeRequest>,
    ) -> Result<Response<pb::OwnerServiceWakeResponse>, Status> {
        Owner::wake(self).await;
        Ok(Response::new(pb::OwnerServiceWakeResponse {}))
    }

    async fn report_result(
        &self,
        request: Request<pb::ReportResultRequest>,
    ) -> Result<Response<pb::ReportResultResponse>, Status> {
        let max =
            self.inner.cfg.limits.max_payload_bytes.unwrap_or(rules::DEFAULT_MAX_PAYLOAD_BYTES);
        let r = reported::decode(request.into_inner(), max)?;
        let recorded = self.report_result(r.execution_id, r.worker_id, r.message).await?;
        Ok(Response::new(pb::ReportResultResponse { recorded }))
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
