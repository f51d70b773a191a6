//! Updates: a signal with a reply. An accepted update records `UpdateAccepted` and
//! `UpdateCompleted` (with the reply) together; a refused one records nothing, so a
//! validator that says no leaves the history as it was.
//!
//! The handler's expressions see what a query sees (the state) plus `args`, the update's
//! argument after its input contract applied defaults.

use crate::command::{check_size, refuse, CommandError};
use crate::event::Event;
use crate::scope::{self, Site};
use crate::state::State;
use orbit_codes::ErrorCode;
use orbit_definition::{Definition, Expr, Limits, Template};
use serde_json::Value;

/// Checks and applies update `name` to an open execution.
///
/// # Errors
/// `UNKNOWN_UPDATE`; `INVALID_INPUT` (contract); `UPDATE_REJECTED` (the validator was not
/// true); `QUERY_FAILED` / `EXPRESSION_LIMIT` (an expression failed); the payload codes.
pub(crate) fn accept(
    def: &Definition,
    state: &State,
    limits: &Limits,
    name: String,
    args: Value,
    update_id: Option<String>,
) -> Result<Vec<Event>, CommandError> {
    let Some(handler) = def.updates.get(&name) else {
        return Err(refuse(
            ErrorCode::UnknownUpdate,
            format!("workflow `{}` has no update `{name}`", def.name),
        ));
    };
    let args = match &handler.input {
        Some(c) => c.apply(args).map_err(|v| {
            let list = v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            refuse(ErrorCode::InvalidInput, format!("update `{name}` args: {list}"))
        })?,
        None => args,
    };
    check_size(limits, &args, "update args")?;
    if let Some(validator) = &handler.validator {
        match eval(def, state, validator, &args, &name, "validator")? {
            Value::Bool(true) => {}
            other => {
                return Err(refuse(
                    ErrorCode::UpdateRejected,
                    format!("update `{name}` rejected: its validator returned {other}"),
                ))
            }
        }
    }
    let result = match &handler.reply {
        Some(reply) => eval(def, state, reply, &args, &name, "reply")?,
        None => Value::Null,
    };
    check_size(limits, &result, "update reply")?;
    Ok(vec![
        Event::UpdateAccepted { name: name.clone(), args, update_id },
        Event::UpdateCompleted { name, result },
    ])
}

fn eval(
    def: &Definition,
    state: &State,
    expr: &Expr,
    args: &Value,
    name: &str,
    field: &str,
) -> Result<Value, CommandError> {
    let template = Template::Expr(expr.clone());
    let mut scope = scope::build(def, state, &Site::main(), &[&template]);
    scope.set("args", args.clone());
    expr.eval(&scope).map_err(|e| CommandError {
        code: if e.is_limit() { ErrorCode::ExpressionLimit } else { ErrorCode::QueryFailed },
        message: format!("update `{name}` {field}: {e}"),
    })
}

/// The reply recorded for an update: the `UpdateCompleted` right after the `UpdateAccepted`
/// in `events` (what an accepted update command returned).
#[must_use]
pub fn reply(events: &[Event]) -> Option<&Value> {
    events.iter().find_map(|e| match e {
        Event::UpdateCompleted { result, .. } => Some(result),
        _ => None,
    })
}
