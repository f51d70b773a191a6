//! Updates: a signal with a reply. An accepted update records `UpdateAccepted`; a refused
//! one records nothing, so a validator that says no leaves the history as it was.
//!
//! A handler without steps records `UpdateCompleted` (with the reply) together with its
//! acceptance. A handler with steps runs them as one instance inside the execution (unit
//! keys `update:<name>@<seq>:<step>`, like an `on_signal` instance), and the decider
//! records `UpdateCompleted{accepted: seq}` once they are all resolved: the reply evaluated
//! over their outputs, or an `UPDATE_FAILED` error when a step failed or the run wound down
//! first. A failed update step fails its update, never the run.
//!
//! The handler's expressions see what a query sees (the state) plus `args`, the update's
//! argument after its input contract applied defaults.

use crate::event::{Event, TaskError};
use crate::refusal::{check_size, refuse, CommandError};
use crate::scope::{self, Site};
use crate::state::{State, UnitStatus};
use crate::task_code::TaskCode;
use crate::unit::{Scope as UnitScope, UnitKey};
use orbit_codes::ErrorCode;
use orbit_definition::{Definition, Expr, Limits, Outcome, Template};
use serde_json::{json, Value};

/// The error code of an update whose handler's steps failed (or that the run's wind-down
/// abandoned): what `UpdateExecution` answers, as `ErrorCode::UpdateFailed`.
pub const UPDATE_FAILED: &str = TaskCode::UpdateFailed.as_str();

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
    if !handler.steps.is_empty() {
        // The steps run in the decider's rounds after this; the reply comes when they end.
        return Ok(vec![Event::UpdateAccepted { name, args, update_id }]);
    }
    let result = match &handler.reply {
        Some(reply) => eval(def, state, reply, &args, &name, "reply")?,
        None => Value::Null,
    };
    check_size(limits, &result, "update reply")?;
    Ok(vec![
        Event::UpdateAccepted { name: name.clone(), args, update_id },
        Event::UpdateCompleted { name, result, accepted: None, error: None },
    ])
}

/// The `UpdateCompleted` of the update accepted at `seq` whose steps are all resolved: the
/// reply over their outputs, or `UPDATE_FAILED` naming the first failed step (its error in
/// `details`), a failing reply expression or an oversized reply.
pub(crate) fn complete(
    def: &Definition,
    state: &State,
    limits: &Limits,
    seq: u64,
    name: &str,
) -> Event {
    let failed = |message: String, details: Option<Value>| Event::UpdateCompleted {
        name: name.to_string(),
        result: Value::Null,
        accepted: Some(seq),
        error: Some(TaskError { details, ..TaskError::fatal(UPDATE_FAILED, message) }),
    };
    let instance = UnitScope::Update(name.to_string(), seq);
    let handler = def.updates.get(name);
    let steps = handler.map_or(&[][..], |h| h.steps.as_slice());
    for step in steps {
        let key = UnitKey::step(instance.clone(), &step.id).to_string();
        if let Some(u) = state.unit(&key).filter(|u| u.status == UnitStatus::Failed) {
            let error = u.error.clone().unwrap_or_else(|| TaskCode::Failed.fatal(""));
            let message = format!(
                "update `{name}` step `{}` failed: {}: {}",
                step.id, error.code, error.message
            );
            return failed(message, Some(json!({"step": step.id, "error": error})));
        }
    }
    let result = match handler.and_then(|h| h.reply.as_ref()) {
        Some(reply) => {
            let template = Template::Expr(reply.clone());
            let site = Site { scope: &instance, element: None, group: "" };
            let scope = scope::build(def, state, &site, &[&template]);
            match reply.eval(&scope) {
                Ok(v) => v,
                Err(e) => return failed(format!("update `{name}` reply: {e}"), None),
            }
        }
        None => Value::Null,
    };
    if let Err(e) = check_size(limits, &result, "update reply") {
        return failed(format!("update `{name}`: {}", e.message), None);
    }
    Event::UpdateCompleted { name: name.to_string(), result, accepted: Some(seq), error: None }
}

/// The `UpdateCompleted` of an update whose steps the run's wind-down cancelled.
pub(crate) fn abandoned(seq: u64, name: &str, outcome: Outcome) -> Event {
    let message = format!(
        "update `{name}` did not finish: the execution is winding down ({})",
        outcome.as_str()
    );
    Event::UpdateCompleted {
        name: name.to_string(),
        result: Value::Null,
        accepted: Some(seq),
        error: Some(TaskError::fatal(UPDATE_FAILED, message)),
    }
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

/// The seq of the `UpdateAccepted` of this run that carries `update_id`, if any. An update
/// whose id was accepted already (update-with-start accepts it in the execution's first
/// commit, where no inbox entry carries its `request_id`; a retry then arrives as a new
/// entry) records nothing: the caller is answered with that first acceptance, and its reply
/// is read from the history after it (see [`completion`]).
///
/// Returns the (run, seq) of that acceptance: this run's, or an earlier run's carried into
/// this one by continue-as-new ([`MAX_CARRIED_UPDATE_IDS`] at most).
#[must_use]
pub fn accepted(state: &State, update_id: &str) -> Option<(u32, u64)> {
    match state.update_ids.get(update_id) {
        Some(seq) => Some((state.run, *seq)),
        None => state.carried_update_ids.get(update_id).copied(),
    }
}

/// Update ids the next run remembers: a retried update (or update-with-start) whose id an
/// earlier run accepted is answered by that acceptance for this many of the most recent
/// ids; an older id is forgotten (documented in docs/events.md).
pub const MAX_CARRIED_UPDATE_IDS: usize = 1_000;

/// The update ids a run carries into the next one at continue-as-new: its own and those it
/// carried, the most recent [`MAX_CARRIED_UPDATE_IDS`], in (run, seq) order.
#[must_use]
pub fn carried(finished: &State) -> Vec<crate::event::CarriedUpdate> {
    let own = finished.update_ids.iter().map(|(id, seq)| (finished.run, *seq, id));
    let earlier = finished.carried_update_ids.iter().map(|(id, (run, seq))| (*run, *seq, id));
    let mut all: Vec<(u32, u64, &String)> = own.chain(earlier).collect();
    all.sort_unstable();
    let skip = all.len().saturating_sub(MAX_CARRIED_UPDATE_IDS);
    all.into_iter()
        .skip(skip)
        .map(|(run, seq, id)| crate::event::CarriedUpdate { id: id.clone(), run, seq })
        .collect()
}

/// The reply recorded for an update: the `UpdateCompleted` right after the `UpdateAccepted`
/// in `events` (what an accepted update command returned). `None` for a handler with steps,
/// whose reply comes later (see [`completion`]).
#[must_use]
pub fn reply(events: &[Event]) -> Option<&Value> {
    events.iter().find_map(|e| match e {
        Event::UpdateCompleted { result, accepted: None, .. } => Some(result),
        _ => None,
    })
}

/// The outcome of the update accepted at `accepted_seq`, found in `events` (history after
/// it, in order): its reply or its error, or `None` while it runs.
#[must_use]
pub fn completion(
    events: &[crate::event::HistoryEvent],
    accepted_seq: u64,
) -> Option<Result<&Value, &TaskError>> {
    events.iter().find_map(|he| match &he.event {
        Event::UpdateCompleted { result, accepted, error, .. }
            if *accepted == Some(accepted_seq)
                || (accepted.is_none() && he.seq == accepted_seq + 1) =>
        {
            Some(error.as_ref().map_or(Ok(result), Err))
        }
        _ => None,
    })
}
