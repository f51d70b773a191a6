//! The shapes of names: workflow names and versions, task/signal/query keys, step ids and
//! `workflow: NAME[@VERSION]` references.
//!
//! Names are restricted to characters that survive every place they travel (URLs, unit
//! keys such as `on_signal:<signal>@<seq>:<step>`, metric labels) without escaping.

use crate::error::ErrorCode;
use crate::parse::reader::{is_identifier, Errors};

/// `[A-Za-z0-9_.-]+`: workflow, task, signal and query names.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `[A-Za-z0-9_.+-]+`: versions (`1`, `1.2.0`, `2024-05-01`, `1.0+build`).
pub(crate) fn is_version(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+'))
}

/// A version with `*` wildcards: the `from` of a migration hint.
pub(crate) fn is_version_pattern(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+' | '*'))
}

/// Checks a step id; records `INVALID_ID` when malformed.
pub(crate) fn check_step_id(id: &str, path: &str, errors: &mut Errors) {
    if !is_identifier(id) {
        errors.push(
            path,
            ErrorCode::InvalidId,
            format!(
                "step id `{id}` must match [A-Za-z_][A-Za-z0-9_]* (it is read as `steps.{id}`)"
            ),
        );
    }
}

/// Checks a key naming a task, signal or query; records `INVALID_ID` when malformed.
pub(crate) fn check_key(kind: &str, key: &str, path: &str, errors: &mut Errors) {
    if !is_name(key) {
        errors.push(
            path,
            ErrorCode::InvalidId,
            format!("{kind} name `{key}` must match [A-Za-z0-9_.-]+"),
        );
    }
}

/// The prefix of built-in names: a user's workflow or task may not take one, so a built-in
/// added later never collides with a registered name.
pub(crate) const RESERVED_PREFIX: &str = "orbit.";

/// The built-in tasks a definition may name (the HTTP step's task).
const BUILT_IN_TASKS: [&str; 1] = ["orbit.http"];

/// Records `RESERVED_NAME` for a workflow (`task: false`) or task name under `orbit.` that
/// is not a built-in.
pub(crate) fn check_reserved(kind: &str, name: &str, task: bool, path: &str, errors: &mut Errors) {
    if name.starts_with(RESERVED_PREFIX) && !(task && BUILT_IN_TASKS.contains(&name)) {
        errors.push(
            path,
            ErrorCode::ReservedName,
            format!(
                "{kind} name `{name}`: names under `{RESERVED_PREFIX}` are reserved for built-ins"
            ),
        );
    }
}

/// Splits `NAME[@VERSION]`; records `INVALID_VALUE` when malformed.
pub(crate) fn workflow_ref(
    text: &str,
    path: &str,
    errors: &mut Errors,
) -> Option<(String, Option<String>)> {
    let (name, version) = match text.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (text, None),
    };
    if is_name(name) && version.is_none_or(is_version) {
        return Some((name.to_string(), version.map(str::to_string)));
    }
    errors.push(
        path,
        ErrorCode::InvalidValue,
        format!(
            "`{text}` is not a workflow reference; write NAME or NAME@VERSION \
             (name [A-Za-z0-9_.-]+, version [A-Za-z0-9_.+-]+)"
        ),
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflow_references() {
        let mut errors = Errors::default();
        assert_eq!(
            workflow_ref("child@1", "p", &mut errors),
            Some(("child".into(), Some("1".into())))
        );
        assert_eq!(workflow_ref("ship.v2", "p", &mut errors), Some(("ship.v2".into(), None)));
        assert!(errors.is_empty());
        for bad in ["", "@1", "child@", "a b", "a@1@2", "child@1 0"] {
            assert_eq!(workflow_ref(bad, "p", &mut errors), None, "{bad}");
        }
        assert_eq!(errors.0.len(), 6);
    }

    #[test]
    fn names_and_versions() {
        assert!(is_name("payments.charge") && is_name("order-fulfilment") && is_name("a_1"));
        assert!(!is_name("a b") && !is_name("") && !is_name("a/b") && !is_name("é"));
        assert!(
            is_version("1.2.0") && is_version("1.0+b") && !is_version("1 2") && !is_version("")
        );
    }
}
