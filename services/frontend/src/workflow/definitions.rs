//! Registering, reading and listing workflow definitions.
//!
//! What is stored is the canonical JSON of the normalised document, so the stored text
//! hashes to the definition hash and parses back to the same definition.

use crate::error::{err, ApiResult, FrontendError};
use crate::scope::Scope;
use crate::validate;
use crate::Shared;
use orbit_api::v1::DefinitionFormat;
use orbit_api::v1::{
    GetWorkflowRequest, GetWorkflowResponse, ListWorkflowsRequest, ListWorkflowsResponse,
    RegisterWorkflowRequest, RegisterWorkflowResponse, WorkflowDefinition,
};
use orbit_auth::Action;
use orbit_definition::{canonical_json, to_document, Format};
use orbit_server_kit::payload::ms_to_timestamp;
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_server_kit::{ErrorCode, FieldViolation, OrbitError};
use orbit_store::{DefinitionRow, PutOutcome, StoreError};
use std::collections::HashMap;

/// The status message of a refused definition: every problem, one per line after a
/// count, for clients that read only the message; as many as fit the status message bound
/// (`MAX_STATUS_MESSAGE_BYTES`), then how many more the details list.
fn summary(problems: &[orbit_definition::DefinitionError]) -> String {
    /// Room left for the closing "... and N more" line within the 1 KiB message bound.
    const BUDGET: usize = orbit_server_kit::error::MAX_STATUS_MESSAGE_BYTES - 96;
    match problems {
        [] => "invalid definition: the document is invalid".to_string(),
        [only] => format!("invalid definition: {only}"),
        _ => {
            let mut text = format!("invalid definition: {} problems:", problems.len());
            for (i, p) in problems.iter().enumerate() {
                let line = format!("\n{p}");
                if text.len() + line.len() > BUDGET {
                    let more = problems.len() - i;
                    text.push_str(&format!("\n... and {more} more (in the error details)"));
                    break;
                }
                text.push_str(&line);
            }
            text
        }
    }
}

pub(crate) async fn register(
    shared: &Shared,
    scope: &Scope,
    req: RegisterWorkflowRequest,
) -> ApiResult<RegisterWorkflowResponse> {
    if req.document.trim().is_empty() {
        return Err(invalid("document", "is required").into());
    }
    let format = match DefinitionFormat::try_from(req.format) {
        Ok(DefinitionFormat::Unspecified) => Format::Detect,
        Ok(DefinitionFormat::Yaml) => Format::Yaml,
        Ok(DefinitionFormat::Json) => Format::Json,
        Err(_) => return Err(invalid("format", format!("unknown format {}", req.format)).into()),
    };
    // Parsing compiles every expression and checks the graph: CPU work sized by the
    // document (bounded by the definition limits), so it runs off the async runtime.
    let document = req.document;
    let parsed = tokio::task::spawn_blocking(move || orbit_definition::parse_as(&document, format))
        .await
        .map_err(|e| {
            err(ErrorCode::InvalidDefinition, format!("the definition check failed: {e}"))
        })?;
    let def = parsed.map_err(|errors| {
        let problems = errors.errors();
        OrbitError::new(ErrorCode::InvalidDefinition, summary(problems)).with_violations(
            problems.iter().map(|e| FieldViolation::new(&e.path, e.code.as_str(), &e.message)),
        )
    })?;
    // The name is in the document: checked once it is parsed, before anything is stored.
    scope.workflow(Action::Register, &def.name)?;
    super::search::declare(shared, &def).await?;
    let document = canonical_json(&to_document(&def));
    let outcome =
        shared.store.put_definition(&def.name, &def.version, &def.hash, &document).await.map_err(
            |e| match e {
                StoreError::Conflict(m) => err(
                    ErrorCode::DefinitionConflict,
                    format!(
                        "workflow {}@{} is already registered with another definition ({m})",
                        def.name, def.version
                    ),
                ),
                other => other.into(),
            },
        )?;
    // This frontend's next start of it reads the versions again (other frontends learn
    // from the owner, see `defs`).
    shared.defs.forget(&def.name);
    let row = shared.store.get_definition(&def.name, Some(&def.version)).await?;
    Ok(RegisterWorkflowResponse {
        name: def.name.clone(),
        version: def.version.clone(),
        definition_hash: def.hash.clone(),
        created: outcome == PutOutcome::Created,
        created_at: row.map(|r| ms_to_timestamp(r.created_at_ms)),
        warnings: unserved_tasks(shared, &def),
    })
}

/// A warning per task of `def` that no live worker session on this frontend would be
/// handed: none announces it at the declared version (or at any, with an empty version)
/// with the task's language, if it has one (the built-in `orbit.http` runs in the
/// server). Only this frontend's sessions are known here, so in a split topology a worker
/// on another frontend may serve it: a warning, never a refusal.
fn unserved_tasks(shared: &Shared, def: &orbit_definition::Definition) -> Vec<String> {
    let sessions = shared.sessions.snapshot();
    let live: Vec<_> = sessions.iter().filter(|s| !s.is_stopped()).collect();
    def.tasks
        .iter()
        .filter(|(name, _)| name.as_str() != orbit_engine::effects::HTTP_TASK)
        .filter(|(name, contract)| {
            let language = orbit_engine::effects::routing_language(def, name);
            !live.iter().any(|s| s.claim.admits(name, &contract.version, language.as_deref()))
        })
        .map(|(name, contract)| {
            format!(
                "no connected worker serves task {name} version {}: its steps wait in the \
                 queue until one does",
                contract.version
            )
        })
        .collect()
}

pub(crate) async fn get(
    shared: &Shared,
    scope: &Scope,
    req: GetWorkflowRequest,
) -> ApiResult<GetWorkflowResponse> {
    let name = rules::id("name", &req.name)?;
    let version = rules::optional("version", &req.version)?;
    scope.workflow(Action::Read, name)?;
    let row = shared.store.get_definition(name, version).await?;
    let Some(row) = row else {
        return Err(not_found(name, version));
    };
    let latest = match version {
        None => true,
        Some(_) => {
            let versions = shared.store.definition_versions(name).await?;
            orbit_store::VersionRow::latest(versions).is_some_and(|v| v.version == row.version)
        }
    };
    Ok(GetWorkflowResponse { workflow: Some(wire_definition(row, true, latest)) })
}

pub(crate) fn not_found(name: &str, version: Option<&str>) -> FrontendError {
    let what = match version {
        Some(v) => format!("{name}@{v}"),
        None => name.to_string(),
    };
    err(ErrorCode::WorkflowNotFound, format!("workflow {what} is not registered"))
}

/// Pages by offset into the ordered list: the token is the index of the next result. A
/// restricted caller's list holds only the workflows its patterns match (filtered before
/// paging, so pages stay full); a `name` filter outside them is refused.
pub(crate) async fn list(
    shared: &Shared,
    scope: &Scope,
    req: ListWorkflowsRequest,
) -> ApiResult<ListWorkflowsResponse> {
    let size = validate::page_size(req.page_size, 100, 1000);
    let start = usize::try_from(validate::numeric_token(&req.page_token)?.unwrap_or(0))
        .map_err(|_| invalid("page_token", "is out of range"))?;
    if !req.name.is_empty() {
        scope.workflow(Action::Read, &req.name)?;
    }
    let all = shared.store.list_definitions().await?;
    let matching: Vec<DefinitionRow> = all
        .into_iter()
        .filter(|d| (req.name.is_empty() || d.name == req.name) && scope.sees(&d.name))
        .collect();
    let end = start.saturating_add(size).min(matching.len());
    let next_page_token = if end < matching.len() { end.to_string() } else { String::new() };
    let latest = latest_versions(&matching);
    let workflows = matching
        .into_iter()
        .skip(start)
        .take(end.saturating_sub(start))
        .map(|row| {
            let is_latest = latest.get(row.name.as_str()) == Some(&row.version);
            wire_definition(row, req.include_document, is_latest)
        })
        .collect();
    Ok(ListWorkflowsResponse { workflows, next_page_token })
}

/// Per workflow name, its latest version (`orbit_definition::version::latest`) among
/// `rows`, which come by name then registration order.
fn latest_versions(rows: &[DefinitionRow]) -> HashMap<String, String> {
    let mut by_name: HashMap<&str, Vec<&str>> = HashMap::new();
    for row in rows {
        by_name.entry(&row.name).or_default().push(&row.version);
    }
    by_name
        .into_iter()
        .filter_map(|(name, versions)| {
            let i = orbit_definition::version::latest(&versions)?;
            Some((name.to_string(), versions[i].to_string()))
        })
        .collect()
}

fn wire_definition(row: DefinitionRow, with_document: bool, latest: bool) -> WorkflowDefinition {
    WorkflowDefinition {
        name: row.name,
        version: row.version,
        definition_hash: row.definition_hash,
        document: if with_document { row.document } else { String::new() },
        created_at: Some(ms_to_timestamp(row.created_at_ms)),
        latest,
    }
}
