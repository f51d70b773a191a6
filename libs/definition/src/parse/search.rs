//! `search_attributes: {name: type}`, the workflow's `search: {name: template}` and a main
//! step's `search:` (see `crate::search`).
//!
//! Refusals: a name that is not `[A-Za-z_][A-Za-z0-9_]*` (at most `MAX_SEARCH_NAME_BYTES`)
//! is `INVALID_ID`; a system attribute's name is `RESERVED_NAME`; an unknown type is
//! `INVALID_VALUE`; more than `MAX_SEARCH_ATTRIBUTES` is `DOCUMENT_LIMIT`; a `search:` key
//! not declared is `UNKNOWN_REFERENCE`; the workflow's `search:` reading `steps` is
//! `INVALID_EXPRESSION` (it is evaluated before any step ran).

use crate::error::ErrorCode;
use crate::expr::Template;
use crate::parse::exprs::{Compiler, StepRef, Vars};
use crate::parse::reader::{is_identifier, short_list, wrong_type, Errors, Obj};
use crate::search::{
    is_system_attribute, SearchType, MAX_SEARCH_ATTRIBUTES, MAX_SEARCH_NAME_BYTES,
};
use std::collections::BTreeMap;

const TYPES: &str = "keyword, text, int, double, bool, datetime, keyword_list";

/// Reads `search_attributes`, when written.
pub(crate) fn declared(obj: &mut Obj, errors: &mut Errors) -> BTreeMap<String, SearchType> {
    let mut out = BTreeMap::new();
    let Some(mut o) = obj.object("search_attributes", "search attribute types by name", errors)
    else {
        return out;
    };
    let keys = o.keys();
    if keys.len() > MAX_SEARCH_ATTRIBUTES {
        let message = format!(
            "{} search attributes are declared; the limit is {MAX_SEARCH_ATTRIBUTES} \
             (MAX_SEARCH_ATTRIBUTES)",
            keys.len()
        );
        errors.push(o.path(), ErrorCode::DocumentLimit, message);
    }
    for name in keys {
        let at = o.at(&name);
        let value = o.raw(&name);
        if !is_identifier(&name) || name.len() > MAX_SEARCH_NAME_BYTES {
            let message = format!(
                "search attribute name `{name}` must match [A-Za-z_][A-Za-z0-9_]* and be at \
                 most {MAX_SEARCH_NAME_BYTES} bytes"
            );
            errors.push(&at, ErrorCode::InvalidId, message);
            continue;
        }
        if is_system_attribute(&name) {
            let message = format!(
                "`{name}` is a system attribute of the list query language; choose another \
                 name for the search attribute"
            );
            errors.push(&at, ErrorCode::ReservedName, message);
            continue;
        }
        match value {
            Some(serde_json::Value::String(t)) => match SearchType::parse(t) {
                Some(ty) => {
                    out.insert(name, ty);
                }
                None => {
                    let message =
                        format!("`{t}` is not a search attribute type; expected one of {TYPES}");
                    errors.push(&at, ErrorCode::InvalidValue, message);
                }
            },
            Some(other) => wrong_type(errors, &at, "a search attribute type", other),
            None => {}
        }
    }
    o.finish(errors, &[]);
    out
}

/// Reads a `search: {name: template}` at `obj`'s field `search`; every key must be
/// declared. `step` is the id of the step it belongs to (`None`: the workflow's, which may
/// read only `input` and `execution`).
pub(crate) fn values(
    obj: &mut Obj,
    declared: &BTreeMap<String, SearchType>,
    step: Option<&str>,
    refs: &mut Vec<StepRef>,
    errors: &mut Errors,
) -> BTreeMap<String, Template> {
    let mut out = BTreeMap::new();
    let Some(mut o) = obj.object("search", "search attribute values by name", errors) else {
        return out;
    };
    for name in o.keys() {
        let at = o.at(&name);
        let Some(v) = o.raw(&name) else { continue };
        if !declared.contains_key(&name) {
            let listing = if declared.is_empty() {
                " (none are)".to_string()
            } else {
                format!(" (declared: {})", short_list(declared.keys()))
            };
            let message = format!(
                "search attribute `{name}` is not declared in `search_attributes`{listing}"
            );
            errors.push(&at, ErrorCode::UnknownReference, message);
            continue;
        }
        // Evaluated once, when the step succeeded: no ordering (a step reads its own output).
        let mut own = Vec::new();
        let mut c = Compiler { errors: &mut *errors, refs: &mut own };
        let Some(t) = c.template(v, &at, &Vars::default(), false) else { continue };
        if step.is_none() && t.variables().contains("steps") {
            let message = "the workflow's `search:` is evaluated at start: it may read `input` \
                           and `execution`, not `steps` (set it on a step's `search:`)";
            errors.push(&at, ErrorCode::InvalidExpression, message);
            continue;
        }
        refs.extend(own.into_iter().filter(|r| Some(r.id.as_str()) != step));
        out.insert(name, t);
    }
    o.finish(errors, &[]);
    out
}
