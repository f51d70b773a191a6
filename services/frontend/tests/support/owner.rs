//! A minimal owner for the frontend's tests: implements `OwnerService` directly on the
//! store with the pure engine (start + advance; wake: apply pending inbox entries, advance,
//! commit with the replies). No epochs, timers or children; the real owner replaces it in
//! end-to-end tests.

use orbit_api::internal::v1 as internal;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_definition::{Definition, Limits};
use orbit_engine::{accept, advance, start, Command, Event, HistoryEvent, Origin, State};
use orbit_server_kit::payload::proto_to_json;
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::{CommitBatch, ExecutionRow, InboxDone, NewTask, ProjectionUpdate, Store};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{Mutex, Notify};
use tonic::{Request, Response, Status};

pub struct TestOwner {
    pub store: Arc<dyn Store>,
    pub tasks_ready: Arc<Notify>,
    lock: Mutex<()>,
}

impl TestOwner {
    pub fn new(store: Arc<dyn Store>, tasks_ready: Arc<Notify>) -> TestOwner {
        TestOwner { store, tasks_ready, lock: Mutex::new(()) }
    }
}

fn now_ms() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn orbit(code: &str, message: impl Into<String>) -> Status {
    OrbitError::new(code.parse().unwrap_or(ErrorCode::StorageError), message).to_status()
}

fn internal_err(e: impl std::fmt::Display) -> Status {
    orbit("STORAGE_ERROR", e.to_string())
}

async fn definition(
    store: &dyn Store,
    name: &str,
    version: Option<&str>,
) -> Result<Definition, Status> {
    let row = store.get_definition(name, version).await.map_err(internal_err)?;
    let row = row.ok_or_else(|| orbit("WORKFLOW_NOT_FOUND", format!("no workflow {name}")))?;
    orbit_definition::parse(&row.document).map_err(internal_err)
}

fn tasks(def: &Definition, events: &[HistoryEvent]) -> Vec<NewTask> {
    events
        .iter()
        .filter_map(|he| match &he.event {
            Event::StepScheduled { step, attempt, input, idempotency_key, redelivery } => {
                let task = orbit_wire::task_name(def, step)?;
                let version = def.tasks.get(&task).map(|t| t.version.clone()).unwrap_or_default();
                Some(NewTask {
                    unit_key: step.clone(),
                    attempt: *attempt,
                    offer: if *redelivery { 2 } else { 1 },
                    task,
                    task_version: version,
                    input: input.clone(),
                    idempotency_key: idempotency_key.clone(),
                })
            }
            _ => None,
        })
        .collect()
}

fn projection(state: &State, now: u64) -> ProjectionUpdate {
    ProjectionUpdate {
        status: state.status().as_str().to_string(),
        updated_at_ms: now,
        closed_at_ms: state.status().is_closed().then_some(now),
    }
}

fn command(kind: &str, token: Option<String>, p: &Value) -> Option<Command> {
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let token = token.unwrap_or_default();
    Some(match kind {
        "signal" => Command::Signal { name: s("name"), payload: p["payload"].clone() },
        "cancel" => Command::Cancel { reason: s("reason") },
        "dispatched" => Command::Dispatched {
            step: s("step"),
            token,
            worker_id: s("session"),
            session: s("session"),
        },
        "complete" => Command::Complete { token, output: p["output"].clone() },
        "fail" => Command::Fail { token, error: serde_json::from_value(p["error"].clone()).ok()? },
        "heartbeat" => Command::Heartbeat { token, details: Some(p["details"].clone()) },
        "uncertain" => Command::Uncertain { token, reason: s("reason") },
        _ => return None,
    })
}

#[tonic::async_trait]
impl OwnerService for TestOwner {
    async fn start_execution(
        &self,
        request: Request<internal::StartExecutionRequest>,
    ) -> Result<Response<internal::StartExecutionResponse>, Status> {
        let req = request.into_inner();
        let _guard = self.lock.lock().await;
        let store = self.store.as_ref();
        if let Some(row) = store.get_execution(&req.execution_id).await.map_err(internal_err)? {
            if row.workflow != req.workflow {
                return Err(orbit("EXECUTION_EXISTS", "taken"));
            }
            return Ok(Response::new(internal::StartExecutionResponse {
                execution_id: row.execution_id,
                run: row.run,
                created: false,
                version: row.version,
                definition_hash: row.definition_hash,
            }));
        }
        let version = (!req.version.is_empty()).then_some(req.version.as_str());
        let def = definition(store, &req.workflow, version).await?;
        let input = proto_to_json(req.input.unwrap_or_default()).map_err(internal_err)?;
        let limits = Limits::default();
        let created = start(&def, &req.execution_id, input, None, None, 1, &limits)
            .map_err(|e| orbit(e.code, e.message))?;
        let now = now_ms();
        let first =
            HistoryEvent { seq: 1, timestamp_ms: now, origin: Origin::Recorded, event: created };
        let mut state = State::default();
        state.apply(&first);
        let mut events = vec![first];
        events.extend(advance(&def, &mut state, now, &limits));
        let row = ExecutionRow {
            execution_id: req.execution_id.clone(),
            run: 1,
            root_id: req.execution_id.clone(),
            parent_id: None,
            workflow: def.name.clone(),
            version: def.version.clone(),
            definition_hash: def.hash.clone(),
            status: state.status().as_str().to_string(),
            schedule_id: None,
            created_at_ms: now,
            updated_at_ms: now,
            closed_at_ms: None,
            last_seq: 0,
        };
        let batch = CommitBatch {
            execution_id: req.execution_id.clone(),
            run: 1,
            new_execution: Some(row),
            tasks_to_insert: tasks(&def, &events),
            projection: Some(projection(&state, now)),
            events,
            ..CommitBatch::default()
        };
        store.commit(batch).await.map_err(internal_err)?;
        self.tasks_ready.notify_waiters();
        Ok(Response::new(internal::StartExecutionResponse {
            execution_id: req.execution_id,
            run: 1,
            created: true,
            version: def.version,
            definition_hash: def.hash,
        }))
    }

    async fn wake(
        &self,
        request: Request<internal::OwnerServiceWakeRequest>,
    ) -> Result<Response<internal::OwnerServiceWakeResponse>, Status> {
        let _guard = self.lock.lock().await;
        let store = self.store.as_ref();
        for id in request.into_inner().execution_ids {
            let pending = store.pending_inbox(Some(&id), 100).await.map_err(internal_err)?;
            if pending.is_empty() {
                continue;
            }
            let Some(row) = store.get_execution(&id).await.map_err(internal_err)? else { continue };
            let def = definition(store, &row.workflow, Some(&row.version)).await?;
            let history = store.load_history(&id, row.run).await.map_err(internal_err)?;
            let mut state = State::from_history(&history);
            let (now, limits) = (now_ms(), Limits::default());
            let mut events = Vec::new();
            let mut inbox_done = Vec::new();
            for entry in pending {
                let result = match command(&entry.kind, entry.token.clone(), &entry.payload) {
                    None => None,
                    Some(cmd) => match accept(&def, &state, cmd, now, &limits) {
                        Ok(recorded) => {
                            let first = if recorded.is_empty() { 0 } else { state.last_seq + 1 };
                            for event in recorded {
                                let he = HistoryEvent {
                                    seq: state.last_seq + 1,
                                    timestamp_ms: now,
                                    origin: Origin::Recorded,
                                    event,
                                };
                                state.apply(&he);
                                events.push(he);
                            }
                            Some(json!({"ok": true, "seq": first, "run": row.run}))
                        }
                        Err(e) => Some(json!({"error": {"code": e.code, "message": e.message}})),
                    },
                };
                inbox_done.push(InboxDone { seq: entry.seq, result });
            }
            let decided = advance(&def, &mut state, now, &limits);
            let new_tasks = tasks(&def, &decided);
            events.extend(decided);
            let has_tasks = !new_tasks.is_empty();
            let batch = CommitBatch {
                execution_id: id.clone(),
                run: row.run,
                projection: Some(projection(&state, now)),
                events,
                tasks_to_insert: new_tasks,
                inbox_done,
                ..CommitBatch::default()
            };
            store.commit(batch).await.map_err(internal_err)?;
            if has_tasks {
                self.tasks_ready.notify_waiters();
            }
        }
        Ok(Response::new(internal::OwnerServiceWakeResponse {}))
    }

    async fn query_execution(
        &self,
        _request: Request<internal::QueryExecutionRequest>,
    ) -> Result<Response<internal::QueryExecutionResponse>, Status> {
        Err(orbit("EXECUTION_NOT_FOUND", "the test owner keeps no hot state"))
    }

    async fn describe_execution(
        &self,
        _request: Request<internal::DescribeExecutionRequest>,
    ) -> Result<Response<internal::DescribeExecutionResponse>, Status> {
        Err(orbit("EXECUTION_NOT_FOUND", "the test owner keeps no hot state"))
    }
}
