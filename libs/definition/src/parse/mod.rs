//! Document → validated [`Definition`]: read, check everything, collect every error.
//!
//! The pipeline: [`source`] turns text into JSON; [`definition`] reads the workflow-level
//! fields, [`steps`] each body (with [`kinds`], [`group`] for groups and switches,
//! [`branches`] for failure branches and races, [`repeat`] for loops, [`fields`] and
//! [`flow`]), compiling expressions with [`exprs`] as it goes; [`graph`] then checks ids,
//! references and cycles per body; [`migrations`] reads the migration hints against the
//! main body. Readers
//! never stop at the first problem: they record it and go on with a fallback, and the
//! definition is returned only if nothing was recorded.

mod branches;
mod contracts;
mod dedupe;
mod definition;
mod exprs;
mod fields;
mod flow;
mod graph;
mod group;
mod kinds;
mod known;
mod migrations;
mod names;
pub(crate) mod reader;
mod repeat;
mod search;
mod source;
mod steps;

pub use source::{strict_json, Format};

use crate::document::definition_hash;
use crate::error::{DefinitionError, DefinitionErrors, ErrorCode};
use crate::limits::{value_depth, MAX_DOCUMENT_BYTES, MAX_DOCUMENT_DEPTH};
use crate::model::Definition;
use serde_json::Value;

/// Parses a YAML or JSON document into a validated, normalised definition with its hash.
///
/// # Errors
/// Every problem found, each with its path and code; text that is not YAML or JSON, or is
/// not a mapping, is a single `PARSE_ERROR`; a document over the size limits of
/// [`crate::limits`] a single `DOCUMENT_LIMIT`.
pub fn parse(document: &str) -> Result<Definition, DefinitionErrors> {
    parse_as(document, Format::Detect)
}

/// As [`parse`], with the syntax declared rather than detected.
///
/// # Errors
/// As [`parse`].
pub fn parse_as(document: &str, format: Format) -> Result<Definition, DefinitionErrors> {
    if document.len() > MAX_DOCUMENT_BYTES {
        let message =
            format!("the document is {} bytes; the limit is {MAX_DOCUMENT_BYTES}", document.len());
        return Err(DefinitionError::new("", ErrorCode::DocumentLimit, message).into());
    }
    let value = source::read(document, format)?;
    parse_value(&value)
}

/// Parses a document stored by an earlier registration, perhaps before the current limits
/// existed: the document size, step count and expression limits are not applied at load
/// (the graph checks are iterative and expressions are parsed on a thread with a known
/// stack, so the load itself is safe); an expression over the expression limits evaluates
/// to an `EXPRESSION_LIMIT` failure instead of failing the load. Use [`parse`] for new
/// documents.
///
/// # Errors
/// As [`parse`], less the limits.
pub fn parse_stored(document: &str) -> Result<Definition, DefinitionErrors> {
    crate::expr::stored(|| {
        let value = source::read(document, Format::Detect)?;
        parse_value(&value)
    })
}

/// As [`parse`], from a JSON value.
///
/// # Errors
/// Every problem found, each with its path and code.
pub fn parse_value(document: &Value) -> Result<Definition, DefinitionErrors> {
    // Every reader below recurses over the document: bound its depth first, iteratively.
    let stored = crate::expr::is_stored();
    if !stored && value_depth(document, MAX_DOCUMENT_DEPTH) > MAX_DOCUMENT_DEPTH {
        let message = format!("the document nests deeper than {MAX_DOCUMENT_DEPTH} levels");
        return Err(DefinitionError::new("", ErrorCode::DocumentLimit, message).into());
    }
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
