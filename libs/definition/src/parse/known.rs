//! What a step list is read against and what it reads to: the names the document
//! declares ([`Known`]) and a step as read, with what the graph checks need ([`Parsed`]).

use crate::error::ErrorCode;
use crate::model::Step;
use crate::parse::exprs::StepRef;
use crate::parse::reader::Errors;
use std::collections::BTreeSet;

/// Task and signal names the document declares (from the raw keys, so a contract with an
/// error does not also make every step that calls it an unknown task).
#[derive(Debug, Default)]
pub(crate) struct Known {
    pub tasks: BTreeSet<String>,
    pub signals: BTreeSet<String>,
    /// The declared search attributes (a step's `search:` keys must be among them).
    pub search: std::collections::BTreeMap<String, crate::search::SearchType>,
}

impl Known {
    pub fn check_task(&self, task: &str, path: &str, errors: &mut Errors) {
        if !self.tasks.contains(task) {
            let message =
                format!("task `{task}` is not declared in `tasks`{}", listing(&self.tasks));
            errors.push(path, ErrorCode::UnknownTask, message);
        }
    }

    pub fn check_signal(&self, signal: &str, path: &str, errors: &mut Errors) {
        if !self.signals.contains(signal) {
            let message =
                format!("signal `{signal}` is not declared in `signals`{}", listing(&self.signals));
            errors.push(path, ErrorCode::UnknownSignal, message);
        }
    }
}

fn listing(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        " (none are)".into()
    } else {
        format!(" (declared: {})", crate::parse::reader::short_list(names.iter()))
    }
}

/// A step as read, with what graph checks need: where it is and what it references.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub step: Step,
    pub path: String,
    /// Each `needs` entry with its path.
    pub needs: Vec<(String, String)>,
    pub refs: Vec<StepRef>,
}
