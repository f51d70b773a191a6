//! The workflow's `dedupe: {key, window, keep?}` (see `crate::dedupe`).
//!
//! The key is evaluated by the frontend before the execution exists, so it may read only
//! `input`: `steps` and `execution` are `INVALID_EXPRESSION` at `dedupe.key`.

use crate::dedupe::{Dedupe, Keep, MAX_DEDUPE_WINDOW_MS, MIN_DEDUPE_WINDOW_MS};
use crate::error::ErrorCode;
use crate::format_duration;
use crate::parse::exprs::{Compiler, Vars};
use crate::parse::fields::duration;
use crate::parse::reader::{wrong_type, Errors, Obj};
use serde_json::Value;

const FIELDS: [&str; 3] = ["key", "window", "keep"];

/// Reads `dedupe`, when written.
pub(crate) fn workflow_dedupe(obj: &mut Obj, errors: &mut Errors) -> Option<Dedupe> {
    let mut o = obj.object("dedupe", "a dedupe `{key, window, keep?}`", errors)?;
    let key = o.required("key", errors).and_then(|v| key(v, &o.at("key"), errors));
    let window_ms = duration(&mut o, "window", true, errors);
    if o.peek("window").is_none() {
        errors.push(o.path(), ErrorCode::MissingField, "missing field `window`");
    }
    let window_ms = window_ms.filter(|ms| {
        let ok = (MIN_DEDUPE_WINDOW_MS..=MAX_DEDUPE_WINDOW_MS).contains(ms);
        if !ok {
            let message = format!(
                "the window must be from {} to {}",
                format_duration(MIN_DEDUPE_WINDOW_MS),
                format_duration(MAX_DEDUPE_WINDOW_MS)
            );
            errors.push(&o.at("window"), ErrorCode::InvalidValue, message);
        }
        ok
    });
    let keep = match o.string("keep", errors) {
        None | Some("first") => Some(Keep::First),
        Some("last") => Some(Keep::Last),
        Some(other) => {
            let message = format!("`{other}` is not a keep; expected `first` or `last`");
            errors.push(&o.at("keep"), ErrorCode::InvalidValue, message);
            None
        }
    };
    o.finish(errors, &FIELDS);
    Some(Dedupe { key: key?, window_ms: window_ms?, keep: keep? })
}

fn key(value: &Value, path: &str, errors: &mut Errors) -> Option<crate::Template> {
    match value {
        Value::String(s) if s.is_empty() => {
            errors.push(path, ErrorCode::InvalidValue, "a key must not be empty");
            None
        }
        Value::String(_) => {
            let mut refs = Vec::new();
            let t = Compiler { errors: &mut *errors, refs: &mut refs }.template(
                value,
                path,
                &Vars::default(),
                false,
            )?;
            let outside: Vec<String> =
                t.variables().into_iter().filter(|v| v == "steps" || v == "execution").collect();
            if outside.is_empty() {
                Some(t)
            } else {
                let message = format!(
                    "the dedupe key is evaluated before the execution exists: it may read \
                     `input` only, not `{}`",
                    outside.join("`, `")
                );
                errors.push(path, ErrorCode::InvalidExpression, message);
                None
            }
        }
        other => {
            wrong_type(errors, path, "a string or a `${{ ... }}` expression", other);
            None
        }
    }
}
