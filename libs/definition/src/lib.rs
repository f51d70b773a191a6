//! Orbit workflow definitions: the model the decider interprets, CEL expressions and JSON
//! Schema contracts.
//!
//! Pure code: no IO, no clock, no randomness. [`parse`] turns a YAML or JSON document into a
//! validated, normalised [`Definition`] with a stable `definition_hash`, or every problem
//! found, each with the offending path and a stable [`ErrorCode`] (all of which the API
//! reports as `INVALID_DEFINITION`). [`to_document`] writes the normalised document back.

pub mod contract;
pub mod cost;
pub mod dedupe;
mod document;
mod duration;
mod error;
pub mod expr;
pub mod flow;
pub mod limits;
pub mod model;
mod parse;
pub mod search;
pub mod version;

pub use contract::{Contract, Violation};
pub use dedupe::{Dedupe, Keep};
pub use document::{canonical_json, definition_hash, to_document};
pub use duration::{format_duration, parse_duration};
pub use error::{DefinitionError, DefinitionErrors, ErrorCode};
pub use expr::{Expr, ExprError, ExprErrorKind, Scope, Template};
pub use flow::{
    Concurrency, Fairness, Labels, OnLimit, Priority, RateLimit, RateLimitKind, StepFlow, Sticky,
    Weight, WorkflowConcurrency,
};
pub use model::*;
pub use parse::{parse, parse_as, parse_stored, parse_value, strict_json, Format};
pub use search::{coerce, SearchType, SearchValue};
