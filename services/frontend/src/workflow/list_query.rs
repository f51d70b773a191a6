//! `ListExecutionsRequest.query`: the list query language (`orbit-query`, docs/queries.md)
//! parsed and checked against the system attributes (or a catalog with the declared search
//! attributes, `search.rs`) at the edge, before the store sees it.
//! A refusal is `INVALID_QUERY` with the position in the error details.

use crate::error::ApiResult;
use orbit_query::{parse_and_check, Catalog, Checked, QueryError, Target};
use orbit_server_kit::OrbitError;

/// The checked query of a request; `None` when the field is empty or blank. Its `ORDER BY`
/// may name any system attribute (the store pages by it, then by `execution_id`).
pub(crate) fn list_query(text: &str) -> ApiResult<Option<Checked>> {
    list_query_in(text, &Catalog::system())
}

/// [`list_query`] against `catalog`.
pub(crate) fn list_query_in(text: &str, catalog: &Catalog) -> ApiResult<Option<Checked>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let refuse =
        |e: QueryError| OrbitError::invalid_query(&e.message, e.position, e.line, e.column);
    let checked = parse_and_check(text, catalog).map_err(refuse)?;
    if let Some(order) = &checked.order {
        if matches!(order.target, Target::Search { .. }) {
            let message = "ORDER BY takes a system attribute: the list pages by the sort value \
                           of the executions table, which holds no search attribute";
            return Err(refuse(QueryError::at_span(text, order.span, message)).into());
        }
    }
    Ok(Some(checked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FrontendError;

    fn refused(text: &str) -> OrbitError {
        match list_query(text) {
            Err(FrontendError::Api(e)) => e,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn blank_is_no_query_and_a_valid_one_is_checked() {
        assert!(list_query("").unwrap().is_none());
        assert!(list_query("  \n").unwrap().is_none());
        assert!(list_query("workflow = 'a' ORDER BY created DESC").unwrap().is_some());
        assert!(list_query("workflow = 'a' ORDER BY closed DESC").unwrap().is_some());
    }

    #[test]
    fn refusals_are_invalid_query_with_the_position() {
        let e = refused("workflow = 'a' AND created > 5");
        assert_eq!(e.code.as_str(), "INVALID_QUERY");
        assert_eq!(e.query_position(), Some((29, 1, 30)));
        let e = refused("workflow = 'a' ORDER BY nothing");
        assert_eq!(e.query_position(), Some((24, 1, 25)));
        // Search attributes are not declared yet: unknown.
        let e = refused("customer = 'acme'");
        assert!(e.message.contains("unknown attribute"), "{}", e.message);
    }
}
