//! Compiling expressions and templates where they appear in a document, checking the names
//! they read against the scope of that place and collecting the steps they reference.
//!
//! Scope: `input`, `steps` and `execution` everywhere; the `for_each` element name and
//! `index` in the fields evaluated per element (not in `when` or `for_each` itself, which
//! are evaluated once before the fan-out); `event` in `on_signal` handlers; `failure` in
//! `on` handlers. CEL's type names (`int`, `string`, ...) parse as identifiers, so they
//! are allowed too. Anything else would only fail at run time, so it fails here.

use crate::error::ErrorCode;
use crate::expr::{Expr, Part, Template};
use crate::parse::reader::{a_kind, field_path, index_path, Errors};
use serde_json::Value;

/// Names every expression may read.
const ALWAYS: [&str; 3] = ["input", "steps", "execution"];

/// CEL type identifiers, usable as values (`type(x) == string`).
const CEL_TYPES: [&str; 10] =
    ["int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"];

/// The extra names in scope at one place of the document.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vars(Vec<String>);

impl Vars {
    /// A scope with these extra names.
    pub fn with(&self, names: &[&str]) -> Vars {
        let mut v = self.0.clone();
        v.extend(names.iter().map(|n| (*n).to_string()));
        Vars(v)
    }

    fn contains(&self, name: &str) -> bool {
        ALWAYS.contains(&name) || CEL_TYPES.contains(&name) || self.0.iter().any(|n| n == name)
    }

    fn describe(&self) -> String {
        ALWAYS
            .iter()
            .copied()
            .chain(self.0.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A `steps.<id>` read by an expression.
#[derive(Debug, Clone)]
pub(crate) struct StepRef {
    /// The step id read.
    pub id: String,
    /// Where the expression is.
    pub path: String,
    /// Whether reading it orders the reader after the step (false for compensation, which
    /// runs after everything, and for workflow-level fields).
    pub dep: bool,
}

/// Compiles expressions at one place and checks them.
pub(crate) struct Compiler<'e> {
    pub errors: &'e mut Errors,
    pub refs: &'e mut Vec<StepRef>,
}

impl Compiler<'_> {
    /// Any JSON as a template.
    pub fn template(
        &mut self,
        value: &Value,
        path: &str,
        vars: &Vars,
        dep: bool,
    ) -> Option<Template> {
        match Template::compile(value) {
            Ok(t) => {
                self.check(&t, path, vars, dep);
                Some(t)
            }
            Err(errs) => {
                for e in errs {
                    let at = format!("{path}{}", e.path);
                    let code = if e.error.is_limit() {
                        ErrorCode::ExpressionLimit
                    } else {
                        ErrorCode::InvalidExpression
                    };
                    self.errors.push(&at, code, one_line(&e.error.message));
                }
                None
            }
        }
    }

    /// A string that must be exactly one `${{ }}` expression (`what` names the field).
    pub fn single(
        &mut self,
        value: &Value,
        path: &str,
        vars: &Vars,
        dep: bool,
        what: &str,
    ) -> Option<Expr> {
        let Value::String(_) = value else {
            let got = a_kind(value);
            let message = format!("{what} must be one `${{{{ ... }}}}` expression, got {got}");
            self.errors.push(path, ErrorCode::InvalidType, message);
            return None;
        };
        match self.template(value, path, vars, dep)? {
            Template::Expr(e) => Some(e),
            _ => {
                let message = format!(
                    "{what} must be exactly one `${{{{ ... }}}}` expression with no text around it"
                );
                self.errors.push(path, ErrorCode::InvalidExpression, message);
                None
            }
        }
    }

    /// Checks every expression's names and collects its step references.
    fn check(&mut self, t: &Template, path: &str, vars: &Vars, dep: bool) {
        match t {
            Template::Literal(_) => {}
            Template::Expr(e) => self.check_expr(e, path, vars, dep),
            Template::Interpolated(parts) => {
                for part in parts {
                    if let Part::Expr(e) = part {
                        self.check_expr(e, path, vars, dep);
                    }
                }
            }
            Template::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.check(item, &index_path(path, i), vars, dep);
                }
            }
            Template::Object(fields) => {
                for (k, v) in fields {
                    self.check(v, &field_path(path, k), vars, dep);
                }
            }
        }
    }

    fn check_expr(&mut self, e: &Expr, path: &str, vars: &Vars, dep: bool) {
        for name in e.variables().iter().filter(|n| !vars.contains(n)) {
            let message = format!(
                "unknown name `{name}` in `{}`; in scope here: {}",
                e.source(),
                vars.describe()
            );
            self.errors.push(path, ErrorCode::InvalidExpression, message);
        }
        self.refs.extend(e.step_refs().iter().map(|id| StepRef {
            id: id.clone(),
            path: path.to_string(),
            dep,
        }));
    }
}

/// The CEL parser's message on one line: errors are reported one per line, and its
/// caret drawing only makes sense under the source, which the message already locates.
fn one_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    let Some(rest) = first.strip_prefix("ERROR: <input>:") else {
        return first.to_string();
    };
    let mut parts = rest.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(line), Some(col), Some(what)) => {
            format!("does not compile (line {line}, column {col}):{what}")
        }
        _ => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(
        value: Value,
        vars: &Vars,
    ) -> (Option<Template>, Vec<(ErrorCode, String)>, Vec<String>) {
        let mut errors = Errors::default();
        let mut refs = Vec::new();
        let t = Compiler { errors: &mut errors, refs: &mut refs }.template(
            &value,
            "steps[0].input",
            vars,
            true,
        );
        let errs = errors.0.into_iter().map(|e| (e.code, e.path)).collect();
        (t, errs, refs.into_iter().map(|r| format!("{}@{}", r.id, r.path)).collect())
    }

    #[test]
    fn names_outside_the_scope_are_errors_at_their_path() {
        let (_, errs, _) =
            compile(json!({"a": "${{ item.sku }}", "b": ["${{ input.x }}"]}), &Vars::default());
        assert_eq!(errs, [(ErrorCode::InvalidExpression, "steps[0].input.a".to_string())]);
        let (_, errs, _) = compile(
            json!({"a": "${{ item.sku + string(index) }}"}),
            &Vars::default().with(&["item", "index"]),
        );
        assert!(errs.is_empty());
        let (_, errs, _) =
            compile(json!("${{ type(input) == map && execution.run > 0.0 }}"), &Vars::default());
        assert!(errs.is_empty(), "{errs:?}");
        let (_, errs, _) = compile(
            json!("x ${{ failure.code }} y ${{ event }}"),
            &Vars::default().with(&["failure"]),
        );
        assert_eq!(errs.len(), 1);
    }

    #[test]
    fn step_references_are_collected_with_paths() {
        let (_, _, refs) = compile(
            json!({"a": "${{ steps.charge.output }}", "b": "${{ steps['x'].status }}"}),
            &Vars::default(),
        );
        assert_eq!(refs, ["charge@steps[0].input.a", "x@steps[0].input.b"]);
    }

    #[test]
    fn single_expressions_reject_text_and_non_strings() {
        let mut errors = Errors::default();
        let mut refs = Vec::new();
        let mut c = Compiler { errors: &mut errors, refs: &mut refs };
        assert!(c
            .single(&json!("${{ input.a }}"), "when", &Vars::default(), true, "`when`")
            .is_some());
        assert!(c
            .single(&json!("a ${{ input.a }}"), "when", &Vars::default(), true, "`when`")
            .is_none());
        assert!(c.single(&json!("plain"), "when", &Vars::default(), true, "`when`").is_none());
        assert!(c.single(&json!(3), "when", &Vars::default(), true, "`when`").is_none());
        assert!(c.single(&json!("${{ 1 + }}"), "when", &Vars::default(), true, "`when`").is_none());
        let codes: Vec<_> = errors.0.iter().map(|e| e.code).collect();
        assert_eq!(
            codes,
            [
                ErrorCode::InvalidExpression,
                ErrorCode::InvalidExpression,
                ErrorCode::InvalidType,
                ErrorCode::InvalidExpression
            ]
        );
    }
}
