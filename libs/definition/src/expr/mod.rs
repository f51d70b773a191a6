//! `${{ ... }}` expressions in CEL, and templates (JSON trees whose strings may hold them).
//!
//! Number mapping (deliberate, following the CEL spec's JSON mapping): every JSON number
//! enters CEL as a `double`, so `input.amount * 1.2` works whatever the JSON spelling of
//! `amount`; CEL compares ints and doubles across types, so `size(input.items) ==
//! input.count` holds too. Integer literals in expressions stay `int`: mixing them with JSON
//! numbers in arithmetic needs `1.0` or `double(x)`/`int(x)`. On the way out, a double that
//! is a whole number within ±2^53 becomes a JSON integer, so `1500` comes back as `1500`.
//!
//! Expressions are pure: there is no clock, no randomness and no IO in scope.

mod error;
mod json;

pub use error::{ExprError, ExprErrorKind};
pub use json::{from_cel, kind_of, to_cel};

use crate::cost::{self, Shape};
use crate::limits;
use cel::common::ast::{EntryExpr, Expr as Ast, IdedExpr};
use cel::{Context, Program};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

/// A CEL error with what to do about it, where the fix is known: arithmetic mixing a JSON
/// number (always a `double`, see the module doc) with an integer literal says to write
/// the literal as a double.
fn with_hint(message: String) -> String {
    if !message.starts_with("Unsupported binary operator") || !message.contains("Float(") {
        return message;
    }
    let Some(literal) = int_operand(&message) else { return message };
    format!(
        "{message}: JSON numbers are doubles in expressions, and CEL does not mix doubles \
         with integers in arithmetic; write `{literal}.0` instead of `{literal}`, or convert \
         with `double(...)` / `int(...)`"
    )
}

/// The integer operand `N` of a CEL message holding `Int(N)` or `UInt(N)`.
fn int_operand(message: &str) -> Option<&str> {
    let start = message.find("Int(")? + "Int(".len();
    let rest = &message[start..];
    let digits = &rest[..rest.find(')')?];
    let number = digits.strip_prefix('-').unwrap_or(digits);
    (!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

/// The CEL standard environment, built once: building it is far costlier than most
/// evaluations.
fn stdlib() -> Arc<cel::Env> {
    static ENV: std::sync::OnceLock<Arc<cel::Env>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| Arc::new(cel::Env::stdlib())).clone()
}

/// A compiled CEL expression with the names it reads.
#[derive(Clone)]
pub struct Expr {
    source: String,
    program: Compiled,
    variables: BTreeSet<String>,
    step_refs: BTreeSet<String>,
    /// Depth of the parsed tree (at most [`limits::MAX_AST_DEPTH`]).
    depth: usize,
}

/// A parsed program, or why a stored one is kept without its tree.
#[derive(Clone)]
enum Compiled {
    Program(Arc<Program>),
    /// A stored definition's expression over the limits (registered before they
    /// existed): it loads, and every evaluation fails with this `EXPRESSION_LIMIT`.
    Refused(Arc<str>),
}

thread_local! {
    /// Set while a stored document is parsed (see [`stored`]).
    static STORED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (a parse) with the leniency of stored documents: an expression over the
/// limits still compiles, into one whose evaluation fails with `EXPRESSION_LIMIT`, as long
/// as the parser can survive it. A flag rather than a parameter, so the leniency does
/// not thread through every reader of the document.
pub(crate) fn stored<T>(f: impl FnOnce() -> T) -> T {
    let before = STORED.with(|s| s.replace(true));
    let out = f();
    STORED.with(|s| s.set(before));
    out
}

/// Whether a stored document is being parsed (see [`stored`]).
pub(crate) fn is_stored() -> bool {
    STORED.with(std::cell::Cell::get)
}

/// Evaluations of trees at most this deep run on the caller's thread; deeper ones on a
/// thread of [`EVAL_STACK_BYTES`] (the interpreter takes tens of KiB of stack per level in
/// a debug build).
const INLINE_EVAL_DEPTH: usize = 8;

/// The stack of the thread that evaluates deeper trees.
const EVAL_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Runs `f` on a fresh thread with `stack` bytes of stack, waiting for it; a panic in it
/// becomes an error.
fn on_thread<T: Send>(
    name: &str,
    stack: usize,
    f: impl FnOnce() -> Result<T, ExprError> + Send,
) -> Result<T, ExprError> {
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name(name.into())
            .stack_size(stack)
            .spawn_scoped(s, f)
            .map_err(|e| ExprError::limit(format!("cannot start the {name} thread: {e}")))?;
        handle.join().unwrap_or_else(|_| Err(ExprError::new(format!("the {name} panicked"))))
    })
}

impl Expr {
    /// Compiles CEL source (without the `${{ }}` delimiters).
    ///
    /// # Errors
    /// A syntax error, as the CEL parser reports it; or a source over the limits of
    /// [`crate::limits`] (kind [`ExprErrorKind::Limit`]), checked before parsing.
    pub fn compile(source: &str) -> Result<Expr, ExprError> {
        let source = source.trim();
        if source.is_empty() {
            return Err(ExprError::new("empty expression"));
        }
        let lenient = STORED.with(std::cell::Cell::get);
        let refused = match limits::check_source(source) {
            Ok(()) => None,
            Err(why) if lenient => {
                limits::check_source_parseable(source).map_err(ExprError::limit)?;
                Some(why)
            }
            Err(why) => return Err(ExprError::limit(why)),
        };
        // The parser recurses per nesting level with large frames: give it a known stack.
        // A tree over the limits is also dropped there (dropping recurses too).
        on_thread("expression parser", limits::PARSE_STACK_BYTES, || {
            let program = Program::compile(source).map_err(|e| ExprError::new(e.to_string()))?;
            let checked = limits::check_ast(program.expression());
            let (depth, refused) = match (checked, refused) {
                (Ok(depth), None) => (depth, None),
                (Err(why), _) | (Ok(_), Some(why)) if lenient => (0, Some(why)),
                (Err(why), _) | (Ok(_), Some(why)) => return Err(ExprError::limit(why)),
            };
            let mut variables = BTreeSet::new();
            let mut step_refs = BTreeSet::new();
            // On this thread's stack: deep enough for any tree the parser survived.
            collect_refs(program.expression(), &mut variables, &mut step_refs);
            let program = match refused {
                None => Compiled::Program(Arc::new(program)),
                Some(why) => Compiled::Refused(why.into()),
            };
            Ok(Expr { source: source.to_string(), program, variables, step_refs, depth })
        })
    }

    /// The CEL source.
    #[must_use]
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Top-level names the expression reads (`input`, `steps`, `item`, ...).
    #[must_use]
    pub fn variables(&self) -> &BTreeSet<String> {
        &self.variables
    }

    /// Step ids read through `steps.<id>` or `steps["<id>"]`.
    #[must_use]
    pub fn step_refs(&self) -> &BTreeSet<String> {
        &self.step_refs
    }

    /// Evaluates over a scope of top-level variables, within the budgets of
    /// [`crate::cost`]: the bound is checked before anything runs.
    ///
    /// # Errors
    /// Any CEL runtime error (unknown name, no such overload, division by zero, ...), or a
    /// result that has no JSON form; an evaluation over budget (kind
    /// [`ExprErrorKind::Limit`]).
    pub fn eval(&self, scope: &Scope) -> Result<Value, ExprError> {
        if self.depth <= INLINE_EVAL_DEPTH {
            self.eval_here(scope)
        } else {
            on_thread("expression evaluator", EVAL_STACK_BYTES, || self.eval_here(scope))
        }
    }

    fn eval_here(&self, scope: &Scope) -> Result<Value, ExprError> {
        let program = match &self.program {
            Compiled::Program(p) => p,
            Compiled::Refused(why) => return Err(ExprError::limit(why.to_string())),
        };
        let mut env = Vec::new();
        for name in &self.variables {
            if let Some(v) = scope.vars.get(name.as_str()) {
                let shape = Shape::of(v).ok_or_else(|| {
                    ExprError::limit(format!(
                        "`{name}` nests deeper than {} levels",
                        limits::MAX_VALUE_DEPTH
                    ))
                })?;
                env.push((name.clone(), shape));
            }
        }
        cost::check(program.expression(), &mut env).map_err(ExprError::limit)?;
        let mut ctx = Context::with_env(stdlib());
        for name in &self.variables {
            if let Some(v) = scope.vars.get(name.as_str()) {
                ctx.add_variable_from_value(name.clone(), to_cel(v));
            }
        }
        let out = program.execute(&ctx).map_err(|e| ExprError::new(with_hint(e.to_string())))?;
        from_cel(&out)
    }

    /// Evaluates and requires a boolean.
    ///
    /// # Errors
    /// As [`Expr::eval`], or a result that is not a boolean.
    pub fn eval_bool(&self, scope: &Scope) -> Result<bool, ExprError> {
        match self.eval(scope)? {
            Value::Bool(b) => Ok(b),
            other => Err(ExprError::new(format!("expected a boolean, got {}", kind_of(&other)))),
        }
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// Top-level names an expression may read, as JSON.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    vars: HashMap<String, Value>,
}

impl Scope {
    /// An empty scope.
    #[must_use]
    pub fn new() -> Scope {
        Scope::default()
    }

    /// Binds a name (replacing an earlier binding).
    pub fn set(&mut self, name: impl Into<String>, value: Value) -> &mut Scope {
        self.vars.insert(name.into(), value);
        self
    }

    /// Binds a name, builder style.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Scope {
        self.set(name, value);
        self
    }

    /// A bound name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.vars.get(name)
    }
}

/// A JSON tree whose strings may hold `${{ }}` expressions.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// A value without expressions.
    Literal(Value),
    /// A string that is exactly one expression: evaluates to any JSON type.
    Expr(Expr),
    /// A string with text around expressions: evaluates to a string.
    Interpolated(Vec<Part>),
    /// An array of templates.
    Array(Vec<Template>),
    /// An object of templates, in document order.
    Object(Vec<(String, Template)>),
}

/// One piece of an interpolated string.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// An expression rendered as text (strings bare, other values as JSON).
    Expr(Expr),
}

/// Where a template failed to compile: the JSON-pointer-like path inside it and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Path inside the template (`""` for the root, `.a.b`, `[2]`).
    pub path: String,
    /// The compile error.
    pub error: ExprError,
}

impl Template {
    /// Compiles a JSON tree, finding every `${{ }}`.
    ///
    /// # Errors
    /// Every expression that fails to compile, or an unclosed `${{`, with its path.
    pub fn compile(value: &Value) -> Result<Template, Vec<TemplateError>> {
        let mut errors = Vec::new();
        let t = compile_at(value, String::new(), &mut errors);
        if errors.is_empty() {
            Ok(t)
        } else {
            Err(errors)
        }
    }

    /// The JSON as written (expressions back in `${{ }}`).
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Template::Literal(v) => v.clone(),
            Template::Expr(e) => Value::String(format!("${{{{ {} }}}}", e.source)),
            Template::Interpolated(parts) => Value::String(
                parts
                    .iter()
                    .map(|p| match p {
                        Part::Text(t) => t.clone(),
                        Part::Expr(e) => format!("${{{{ {} }}}}", e.source),
                    })
                    .collect(),
            ),
            Template::Array(items) => Value::Array(items.iter().map(Template::to_json).collect()),
            Template::Object(fields) => {
                Value::Object(fields.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }

    /// Evaluates every expression and builds the JSON value.
    ///
    /// # Errors
    /// The first expression that fails, with its source.
    pub fn render(&self, scope: &Scope) -> Result<Value, ExprError> {
        match self {
            Template::Literal(v) => Ok(v.clone()),
            Template::Expr(e) => {
                e.eval(scope).map_err(|err| err.context(&format!("${{{{ {} }}}}: ", e.source)))
            }
            Template::Interpolated(parts) => {
                let mut out = String::new();
                for part in parts {
                    match part {
                        Part::Text(t) => out.push_str(t),
                        Part::Expr(e) => match e.eval(scope) {
                            Ok(Value::String(s)) => out.push_str(&s),
                            Ok(v) => out.push_str(&v.to_string()),
                            Err(err) => {
                                return Err(err.context(&format!("${{{{ {} }}}}: ", e.source)))
                            }
                        },
                    }
                }
                Ok(Value::String(out))
            }
            Template::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, t)| t.render(scope).map_err(|e| e.at(&format!("[{i}]"))))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Template::Object(fields) => {
                let mut map = Map::new();
                for (k, t) in fields {
                    map.insert(k.clone(), t.render(scope).map_err(|e| e.at(&format!(".{k}")))?);
                }
                Ok(Value::Object(map))
            }
        }
    }

    /// Every expression in the template, in document order.
    #[must_use]
    pub fn exprs(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        self.collect_exprs(&mut out);
        out
    }

    fn collect_exprs<'a>(&'a self, out: &mut Vec<&'a Expr>) {
        match self {
            Template::Literal(_) => {}
            Template::Expr(e) => out.push(e),
            Template::Interpolated(parts) => out.extend(parts.iter().filter_map(|p| match p {
                Part::Expr(e) => Some(e),
                Part::Text(_) => None,
            })),
            Template::Array(items) => items.iter().for_each(|t| t.collect_exprs(out)),
            Template::Object(fields) => fields.iter().for_each(|(_, t)| t.collect_exprs(out)),
        }
    }

    /// Step ids the template reads.
    #[must_use]
    pub fn step_refs(&self) -> BTreeSet<String> {
        self.exprs().into_iter().flat_map(|e| e.step_refs.iter().cloned()).collect()
    }

    /// Top-level names the template reads.
    #[must_use]
    pub fn variables(&self) -> BTreeSet<String> {
        self.exprs().into_iter().flat_map(|e| e.variables.iter().cloned()).collect()
    }
}

// Recursive over a document value, whose depth `parse` bounds (`limits`).
fn compile_at(value: &Value, path: String, errors: &mut Vec<TemplateError>) -> Template {
    match value {
        Value::String(s) if s.contains("${{") => match split_string(s) {
            Ok(parts) => {
                let mut compiled = Vec::new();
                for part in parts {
                    match part {
                        Piece::Text(t) => compiled.push(Part::Text(t)),
                        Piece::Expr(src) => match Expr::compile(&src) {
                            Ok(e) => compiled.push(Part::Expr(e)),
                            Err(error) => {
                                errors.push(TemplateError { path: path.clone(), error });
                            }
                        },
                    }
                }
                match compiled.as_slice() {
                    [Part::Expr(e)] => Template::Expr(e.clone()),
                    _ => Template::Interpolated(compiled),
                }
            }
            Err(error) => {
                errors.push(TemplateError { path, error });
                Template::Literal(value.clone())
            }
        },
        Value::Array(items) => Template::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| compile_at(v, format!("{path}[{i}]"), errors))
                .collect(),
        ),
        Value::Object(fields) if fields.values().any(has_expr) => Template::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), compile_at(v, format!("{path}.{k}"), errors)))
                .collect(),
        ),
        other => Template::Literal(other.clone()),
    }
}

fn has_expr(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains("${{"),
        Value::Array(items) => items.iter().any(has_expr),
        Value::Object(fields) => fields.values().any(has_expr),
        _ => false,
    }
}

enum Piece {
    Text(String),
    Expr(String),
}

/// Splits `text ${{ expr }} text` into pieces. The expression ends at the first `}}` that
/// is not inside a CEL string literal, so map literals like `{"a": {"b": 1}}` work.
fn split_string(s: &str) -> Result<Vec<Piece>, ExprError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("${{") {
        if start > 0 {
            pieces.push(Piece::Text(rest[..start].to_string()));
        }
        let body = &rest[start + 3..];
        let end = find_close(body).ok_or_else(|| ExprError::new("unclosed `${{`"))?;
        pieces.push(Piece::Expr(body[..end].to_string()));
        rest = &body[end + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

/// Index of the `}}` closing an expression: at brace depth zero, outside string literals.
fn find_close(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if let Some(q) = quote {
            if c == b'\\' {
                i += 1;
            } else if c == q {
                quote = None;
            }
        } else {
            match c {
                b'"' | b'\'' => quote = Some(c),
                b'{' => depth += 1,
                b'}' if depth > 0 => depth -= 1,
                b'}' if bytes.get(i + 1) == Some(&b'}') => return Some(i),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// Recursive over the tree: it runs on the parser's thread, whose stack holds any tree the
/// parser itself survived.
fn collect_refs(e: &IdedExpr, vars: &mut BTreeSet<String>, steps: &mut BTreeSet<String>) {
    match &e.expr {
        Ast::Ident(name) => {
            vars.insert(name.clone());
        }
        Ast::Select(sel) => {
            if matches!(&sel.operand.expr, Ast::Ident(n) if n == "steps") {
                steps.insert(sel.field.clone());
            }
            collect_refs(&sel.operand, vars, steps);
        }
        Ast::Call(call) => {
            if call.func_name == "_[_]" {
                if let [target, key] = call.args.as_slice() {
                    if let (
                        Ast::Ident(n),
                        Ast::Literal(cel::common::ast::LiteralValue::String(s)),
                    ) = (&target.expr, &key.expr)
                    {
                        if n == "steps" {
                            steps.insert(s.inner().to_string());
                        }
                    }
                }
            }
            if let Some(t) = &call.target {
                collect_refs(t, vars, steps);
            }
            call.args.iter().for_each(|a| collect_refs(a, vars, steps));
        }
        Ast::Comprehension(c) => {
            let mut inner = BTreeSet::new();
            for part in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                collect_refs(part, &mut inner, steps);
            }
            inner.remove(&c.iter_var);
            inner.remove(&c.accu_var);
            if let Some(v2) = &c.iter_var2 {
                inner.remove(v2);
            }
            vars.extend(inner);
        }
        Ast::List(list) => list.elements.iter().for_each(|x| collect_refs(x, vars, steps)),
        Ast::Map(map) => map.entries.iter().for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(m) => {
                collect_refs(&m.key, vars, steps);
                collect_refs(&m.value, vars, steps);
            }
            EntryExpr::StructField(f) => collect_refs(&f.value, vars, steps),
        }),
        Ast::Struct(st) => st.entries.iter().for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(m) => collect_refs(&m.value, vars, steps),
            EntryExpr::StructField(f) => collect_refs(&f.value, vars, steps),
        }),
        Ast::Literal(_) | Ast::Unspecified => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(src: &str, scope: &Scope) -> Result<Value, ExprError> {
        Expr::compile(src)?.eval(scope)
    }

    #[test]
    fn json_numbers_are_doubles_so_mixed_arithmetic_works() {
        let scope =
            Scope::new().with("input", json!({"amount": 1500, "items": [1, 2, 3], "count": 3}));
        assert_eq!(eval("input.amount * 1.2", &scope).unwrap(), json!(1800));
        assert_eq!(eval("size(input.items) == input.count", &scope).unwrap(), json!(true));
        assert_eq!(eval("input.amount > 1000", &scope).unwrap(), json!(true));
        assert_eq!(eval("input.amount", &scope).unwrap(), json!(1500));
        assert_eq!(eval("input.amount / 7.0", &scope).unwrap(), json!(1500.0 / 7.0));
    }

    #[test]
    fn mixing_a_json_number_with_an_integer_literal_says_to_write_a_double() {
        let scope = Scope::new().with("input", json!({"amount": 3}));
        let e = eval("input.amount + 1", &scope).unwrap_err();
        assert!(e.message.contains("write `1.0` instead of `1`"), "{e}");
        let e = eval("2 * input.amount", &scope).unwrap_err();
        assert!(e.message.contains("write `2.0` instead of `2`"), "{e}");
        assert_eq!(eval("input.amount + 1.0", &scope).unwrap(), json!(4));
        // Other errors get no hint.
        let e = eval("input.amount / 0.0 + missing", &scope).unwrap_err();
        assert!(!e.message.contains("instead of"), "{e}");
    }

    #[test]
    fn a_failing_expression_inside_a_template_names_its_path() {
        let t = Template::compile(&json!({"order": {"lines": [1, "${{ input.amount + 1 }}"]}}))
            .unwrap();
        let scope = Scope::new().with("input", json!({"amount": 3}));
        let e = t.render(&scope).unwrap_err();
        assert!(e.message.starts_with(".order.lines[1]: ${{ input.amount + 1 }}: "), "{e}");
    }

    #[test]
    fn references_are_collected() {
        let e = Expr::compile("steps.charge.output.id + steps['ship'].output + input.x").unwrap();
        assert_eq!(e.step_refs().iter().collect::<Vec<_>>(), ["charge", "ship"]);
        assert_eq!(e.variables().iter().collect::<Vec<_>>(), ["input", "steps"]);
        let c = Expr::compile("input.items.map(x, x.sku)").unwrap();
        assert_eq!(c.variables().iter().collect::<Vec<_>>(), ["input"]);
    }

    #[test]
    fn templates_interpolate_and_keep_types() {
        let t = Template::compile(&json!({
            "a": "${{ input.n }}", "b": "n=${{ input.n }}!", "c": ["${{ {'k': {'v': 1}} }}"], "d": 4
        }))
        .unwrap();
        let scope = Scope::new().with("input", json!({"n": 2}));
        assert_eq!(
            t.render(&scope).unwrap(),
            json!({"a": 2, "b": "n=2!", "c": [{"k": {"v": 1}}], "d": 4})
        );
        assert_eq!(Template::compile(&t.to_json()).unwrap(), t);
    }

    #[test]
    fn bad_expressions_name_their_path() {
        let errs =
            Template::compile(&json!({"x": ["ok", "${{ 1 + }}"], "y": "${{ open"})).unwrap_err();
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, [".x[1]", ".y"]);
    }

    #[test]
    fn runtime_errors_are_errors_not_panics() {
        let scope = Scope::new().with("input", json!({}));
        assert!(eval("input.missing.deeper", &scope).is_err());
        assert!(eval("1 / 0", &scope).is_err());
        assert!(eval("nope", &scope).is_err());
    }
}
