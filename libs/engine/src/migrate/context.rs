//! What the parts of a migration plan share: the two definitions, the run and what a
//! migration hint mapped ([`Cx`]), what
//! they collect ([`Out`]), and how values are shown in a change's `detail`.

use super::classify::{Class, Units};
use super::hints::Hinted;
use crate::change::{Change, ChangeKind};
use crate::state::State;
use orbit_definition::{format_duration, Body, Definition};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Longest value shown in a change's `detail` before it is cut with `…`.
const SHOWN_CHARS: usize = 60;

/// The two definitions and the run a plan is made for.
pub(crate) struct Cx<'a> {
    /// The version the run is on.
    pub from: &'a Definition,
    /// The version it moves to.
    pub to: &'a Definition,
    /// The run (folded history).
    pub state: &'a State,
    /// Its units by step.
    pub units: Units<'a>,
    /// What the target's migration hint for the run's version mapped.
    pub hinted: Hinted,
}

/// What a plan collects.
#[derive(Debug, Default)]
pub(crate) struct Out {
    /// Every difference, in order.
    pub changes: Vec<Change>,
    /// Safe renames (body-qualified step names).
    pub renames: BTreeMap<String, String>,
    /// Units to cancel.
    pub cancel: BTreeSet<String>,
}

impl Out {
    /// Records a change.
    pub(crate) fn push(
        &mut self,
        kind: ChangeKind,
        step: &str,
        detail: impl Into<String>,
        safe: bool,
        reason: impl Into<String>,
    ) {
        self.changes.push(Change {
            kind,
            step: step.to_string(),
            detail: detail.into(),
            safe,
            reason: reason.into(),
        });
    }
}

/// One step's standing, and the rules that depend only on it.
pub(crate) struct Judge<'s> {
    /// The body.
    pub body: &'s Body,
    /// The step's id in the run.
    pub id: &'s str,
    /// Its body-qualified name.
    pub name: &'s str,
    /// How it stands.
    pub class: Class,
    /// `describe` of it: the start of every reason.
    pub why: &'s str,
}

impl Judge<'_> {
    /// Kind or what the step calls: safe only while it has not started.
    pub(crate) fn identity(&self, kind: ChangeKind, detail: String, what: &str, out: &mut Out) {
        let (safe, reason) = match self.class {
            Class::Pending => (true, self.why.to_string()),
            Class::Running => (false, format!("{}: the attempt in flight runs {what}", self.why)),
            Class::Done => (false, format!("{}: its recorded events come from {what}", self.why)),
        };
        out.push(kind, self.name, detail, safe, reason);
    }

    /// A value a unit starts with: unsafe only while a unit runs with the old one.
    pub(crate) fn input(&self, kind: ChangeKind, detail: String, out: &mut Out) {
        let (safe, reason) = match self.class {
            Class::Pending => (true, format!("{}: rendered when it starts", self.why)),
            Class::Running => {
                (false, format!("{}: the unit in flight used the old value", self.why))
            }
            Class::Done => (
                true,
                format!("{}: it already ran; the new value is not evaluated again", self.why),
            ),
        };
        out.push(kind, self.name, detail, safe, reason);
    }
}

/// A value in compact JSON, cut at [`SHOWN_CHARS`].
pub(crate) fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{cut}…")
}

/// An optional value, `none` when absent.
pub(crate) fn shown_opt(value: Option<Value>) -> String {
    value.map_or_else(|| "none".into(), |v| shown(&v))
}

/// An optional duration, `none` when absent.
pub(crate) fn duration(ms: Option<u64>) -> String {
    ms.map_or_else(|| "none".into(), format_duration)
}

/// `[a, b]`.
pub(crate) fn list<'s>(items: impl IntoIterator<Item = &'s String>) -> String {
    format!("[{}]", items.into_iter().map(String::as_str).collect::<Vec<_>>().join(", "))
}
