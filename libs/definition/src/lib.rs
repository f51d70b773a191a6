//! Orbit workflow definitions: the model the decider interprets, CEL expressions and JSON
//! Schema contracts.
//!
//! Pure code: no IO, no clock, no randomness. `parse` turns a YAML or JSON document into a
//! validated, normalised [`Definition`] with a stable `definition_hash`, or every problem
//! found, each with the offending path and a stable code.

pub mod contract;
pub mod expr;
pub mod model;

pub use contract::{Contract, Violation};
pub use expr::{Expr, ExprError, Scope, Template};
pub use model::*;
