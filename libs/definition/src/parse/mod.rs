//! Document → validated [`Definition`]: read, check everything, collect every error.
//!
//! The pipeline: [`source`] turns text into JSON; [`definition`] reads the workflow-level
//! fields, [`steps`] each body (with [`kinds`] and [`fields`]), compiling expressions with
//! [`exprs`] as it goes; [`graph`] then checks ids, references and cycles per body. Readers
//! never stop at the first problem: they record it and go on with a fallback, and the
//! definition is returned only if nothing was recorded.

mod contracts;
mod definition;
mod exprs;
mod fields;
mod graph;
mod kinds;
mod names;
pub(crate) mod reader;
mod source;
mod steps;

use crate::document::definition_hash;
use crate::error::DefinitionErrors;
use crate::model::Definition;
use serde_json::Value;

/// Parses a YAML or JSON document into a validated, normalised definition with its hash.
///
/// # Errors
/// Every problem found, each with its path and code; text that is not YAML or JSON, or is
/// not a mapping, is a single `PARSE_ERROR`.
pub fn parse(document: &str) -> Result<Definition, DefinitionErrors> {
    let value = source::read(document)?;
    parse_value(&value)
}

/// As [`parse`], from a JSON value.
///
/// # Errors
/// Every problem found, each with its path and code.
pub fn parse_value(document: &Value) -> Result<Definition, DefinitionErrors> {
    let mut errors = reader::Errors::default();
    let definition = definition::read(document, &mut errors);
    match definition {
        Some(mut d) if errors.is_empty() => {
            d.hash = definition_hash(&d);
            Ok(d)
        }
        _ => {
            // One mistake can surface twice through different readers; say it once.
            let mut out: Vec<_> = Vec::with_capacity(errors.0.len());
            for e in errors.0 {
                if !out.contains(&e) {
                    out.push(e);
                }
            }
            Err(DefinitionErrors(out))
        }
    }
}
