//! Search attributes at the frontend (issue 28 item 1): the server-wide catalog at
//! registration and at list time, and the values describe shows.
//!
//! The catalog is the union of the attributes registered definitions declare, kept in the
//! store's `search_attributes` table (one type per name). Registration declares a
//! definition's attributes before storing it and refuses a name another workflow declared
//! with another type (`SEARCH_ATTRIBUTE_CONFLICT`, naming that workflow). A list query is
//! checked against the system attributes first; only when that fails is the catalog read
//! (one small read) and the query checked again against it, so a query on system
//! attributes costs nothing more, and every frontend of a split topology sees a
//! registration at once (no cache to invalidate).

use crate::error::{err, ApiResult};
use crate::Shared;
use orbit_definition::{Definition, SearchValue};
use orbit_query::{Catalog, Checked};
use orbit_server_kit::{ErrorCode, OrbitError};
use serde_json::{json, Value};

/// Declares `def`'s search attributes, or `SEARCH_ATTRIBUTE_CONFLICT`.
pub(crate) async fn declare(shared: &Shared, def: &Definition) -> ApiResult<()> {
    if def.search_attributes.is_empty() {
        return Ok(());
    }
    let declared: Vec<_> = def.search_attributes.iter().map(|(n, t)| (n.clone(), *t)).collect();
    // A name a concurrent registration is inserting comes back missing: ask once more.
    for _ in 0..2 {
        let stored = shared.store.declare_search_attributes(&def.name, &declared).await?;
        for row in &stored {
            let Some(ty) = def.search_attributes.get(&row.name) else { continue };
            if *ty != row.ty {
                return Err(err(
                    ErrorCode::SearchAttributeConflict,
                    format!(
                        "search attribute `{}` is declared as `{}` but workflow `{}` declared it \
                         as `{}`; a name has one type server-wide: use that type or another name",
                        row.name,
                        ty.as_str(),
                        row.workflow,
                        row.ty.as_str()
                    ),
                ));
            }
        }
        if stored.len() == declared.len() {
            return Ok(());
        }
    }
    Err(err(
        ErrorCode::Unavailable,
        "the search attributes could not be declared while another registration declared \
         the same names; retry",
    ))
}

/// The catalog `text` is to be checked against: the system attributes when they answer it,
/// else with the declared search attributes (one small read, as [`list_query`]).
pub(crate) async fn catalog_for(shared: &Shared, text: &str) -> ApiResult<Catalog> {
    if text.trim().is_empty() || orbit_query::parse_and_check(text, &Catalog::system()).is_ok() {
        return Ok(Catalog::system());
    }
    let declared = shared.store.search_attributes().await?;
    Ok(Catalog::with_search(declared.into_iter().map(|r| (r.name, r.ty))))
}

/// The checked list query: against the system attributes, then (when that fails and some
/// search attribute is declared) against the catalog, whose answer is the one returned.
pub(crate) async fn list_query(shared: &Shared, text: &str) -> ApiResult<Option<Checked>> {
    let first = super::list_query::list_query(text);
    if first.is_ok() {
        return first;
    }
    let declared = shared.store.search_attributes().await?;
    if declared.is_empty() {
        return first;
    }
    let catalog = Catalog::with_search(declared.into_iter().map(|r| (r.name, r.ty)));
    super::list_query::list_query_in(text, &catalog)
}

/// The largest memo, as JSON bytes (and never more than the server's `max_payload_bytes`).
pub(crate) const MAX_MEMO_BYTES: u64 = 32 * 1024;

/// `StartExecutionRequest.memo`, checked: at most [`MAX_MEMO_BYTES`] (or the payload
/// limit, if lower) and the payload depth limit (`PAYLOAD_TOO_LARGE` / `PAYLOAD_TOO_DEEP`).
pub(crate) fn memo(
    memo: Option<prost_types::Struct>,
    max_payload_bytes: u64,
) -> Result<Option<prost_types::Struct>, OrbitError> {
    let Some(memo) = memo else { return Ok(None) };
    let value = prost_types::Value { kind: Some(prost_types::value::Kind::StructValue(memo)) };
    let json =
        crate::validate::payload("memo", Some(value), MAX_MEMO_BYTES.min(max_payload_bytes))?;
    let Value::Object(map) = json else { return Ok(None) };
    Ok(Some(orbit_server_kit::payload::json_object_to_struct(map)))
}

/// The run's search attributes and memo, for `DescribeExecutionResponse`.
pub(crate) fn described(
    state: &orbit_engine::State,
) -> (std::collections::HashMap<String, prost_types::Value>, Option<prost_types::Struct>) {
    use orbit_server_kit::payload::{json_object_to_struct, json_to_proto};
    let search =
        state.search.iter().map(|(n, v)| (n.clone(), json_to_proto(value_json(v)))).collect();
    let memo = match &state.memo {
        Some(Value::Object(map)) => Some(json_object_to_struct(map.clone())),
        _ => None,
    };
    (search, memo)
}

/// A recorded value as JSON for describe: datetimes as RFC 3339, lists as lists.
pub(crate) fn value_json(value: &SearchValue) -> Value {
    match value {
        SearchValue::Keyword(s) | SearchValue::Text(s) => json!(s),
        SearchValue::Int(i) => json!(i),
        SearchValue::Double(d) => json!(d),
        SearchValue::Bool(b) => json!(b),
        SearchValue::Datetime(ms) => {
            json!(u64::try_from(*ms).map_or_else(|_| ms.to_string(), orbit_engine::scope::rfc3339))
        }
        SearchValue::KeywordList(items) => json!(items),
        SearchValue::Unset => Value::Null,
    }
}

/// `ListSearchAttributes`: the system attributes, then the declared ones by name (those of
/// workflows the caller may read), paged by offset like `ListWorkflows`.
pub(crate) async fn list_attributes(
    shared: &Shared,
    scope: &crate::scope::Scope,
    req: orbit_api::v1::ListSearchAttributesRequest,
) -> ApiResult<orbit_api::v1::ListSearchAttributesResponse> {
    use orbit_api::v1::{ListSearchAttributesResponse, SearchAttribute};
    let size = crate::validate::page_size(req.page_size, 100, 1000);
    let start = usize::try_from(crate::validate::numeric_token(&req.page_token)?.unwrap_or(0))
        .map_err(|_| orbit_server_kit::validate::invalid("page_token", "is out of range"))?;
    let mut declared = shared.store.search_attributes().await?;
    declared.retain(|r| scope.sees(&r.workflow));
    declared.sort_by(|a, b| a.name.cmp(&b.name));
    let system = orbit_query::SYSTEM_ATTRIBUTES.iter().map(|a| SearchAttribute {
        name: a.name.to_string(),
        r#type: a.ty.name().to_string(),
        system: true,
        workflow: String::new(),
    });
    let all: Vec<SearchAttribute> = system
        .chain(declared.into_iter().map(|r| SearchAttribute {
            name: r.name,
            r#type: r.ty.as_str().to_string(),
            system: false,
            workflow: r.workflow,
        }))
        .collect();
    let end = start.saturating_add(size).min(all.len());
    let next_page_token = if end < all.len() { end.to_string() } else { String::new() };
    let attributes = all.into_iter().skip(start).take(end.saturating_sub(start)).collect();
    Ok(ListSearchAttributesResponse { attributes, next_page_token })
}
