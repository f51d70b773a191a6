//! Queries: named read-only expressions evaluated over the state with the same pure code
//! the decider uses.

use crate::command::CommandError;
use crate::scope::{self, Site};
use crate::state::State;
use orbit_codes::ErrorCode;
use orbit_definition::{Definition, Template};
use serde_json::Value;

/// Evaluates query `name`.
///
/// # Errors
/// `UNKNOWN_QUERY` when the workflow has no such query; `QUERY_FAILED` when it fails;
/// `EXPRESSION_LIMIT` when its evaluation is over budget.
pub fn query(def: &Definition, state: &State, name: &str) -> Result<Value, CommandError> {
    let Some(expr) = def.queries.get(name) else {
        return Err(CommandError::new(
            ErrorCode::UnknownQuery,
            format!("workflow `{}` has no query `{name}`", def.name),
        ));
    };
    let template = Template::Expr(expr.clone());
    let scope = scope::build(def, state, &Site::main(), &[&template]);
    expr.eval(&scope).map_err(|e| CommandError {
        code: if e.is_limit() { ErrorCode::ExpressionLimit } else { ErrorCode::QueryFailed },
        message: e.to_string(),
    })
}
