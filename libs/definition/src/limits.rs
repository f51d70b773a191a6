//! Size limits of definitions and expressions, and the cheap checks that enforce them
//! before anything recursive runs.
//!
//! The CEL parser (ANTLR generated) and interpreter recurse once or more per nesting level
//! of an expression, with large frames (a debug build spends tens of KiB of stack per
//! level), so an unbounded expression can overflow any thread's stack: that aborts the
//! process, it cannot be caught. Hence three layers, each cheap and iterative:
//!
//! 1. [`check_source`]: bytes, tokens and bracket nesting of the source, in one pass over
//!    the text, before the parser sees it. They bound how deep the parser can recurse.
//! 2. The parser then runs on a thread with an explicit stack of [`PARSE_STACK_BYTES`].
//! 3. [`check_ast`]: node count and depth of the parsed tree, with an explicit stack.
//!    The depth bounds the interpreter's recursion at evaluation.
//!
//! Whole documents are bounded by [`MAX_DOCUMENT_BYTES`], [`MAX_DOCUMENT_DEPTH`] and
//! [`MAX_STEPS`]. Every limit here is documented in `docs/definitions.md`.

use cel::common::ast::{EntryExpr, Expr as Ast, IdedExpr};
use serde_json::Value;

/// The largest document `RegisterWorkflow` accepts, in bytes of text.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// The deepest nesting of mappings and lists in a document.
pub const MAX_DOCUMENT_DEPTH: usize = 64;

/// The most steps a definition may have, over every body (`steps`, `on.*`, `on_signal.*`,
/// `updates.*.steps`) and every group in them.
pub const MAX_STEPS: usize = 10_000;

/// How deep nested lists may nest (`group`, `switch`, `repeat` in one another): a step
/// list inside this many of them is the deepest allowed; one more is `DOCUMENT_LIMIT` at
/// the group.
pub const MAX_GROUP_DEPTH: usize = 8;

/// The most iterations a `repeat` step may declare (`max_iterations`): a loop is always
/// bounded, and one iteration of one step already records a few events, so a run that
/// needs more continues as new (or a `for_each` over a group holds the work instead).
pub const MAX_REPEAT_ITERATIONS: u32 = 10_000;

/// The largest expression source (between `${{` and `}}`), in bytes.
pub const MAX_EXPR_BYTES: usize = 8 * 1024;

/// The most lexical tokens (names, literals, operators, punctuation) in one expression.
pub const MAX_EXPR_TOKENS: usize = 2_000;

/// The deepest nesting of `(`, `[` and `{` in one expression.
pub const MAX_EXPR_NESTING: usize = 32;

/// The most nodes of one parsed expression (macros such as `all` expand to several).
pub const MAX_AST_NODES: usize = 4_000;

/// The deepest parsed expression tree: a chain `a + b + ... ` of n terms is n deep.
pub const MAX_AST_DEPTH: usize = 64;

/// The deepest JSON value an evaluation reads or produces; also the bound of every
/// recursion over values in this crate. Kept at or above the server's payload depth limit.
pub const MAX_VALUE_DEPTH: usize = 128;

/// The stack of the thread that parses an expression. Measured: the deepest source the
/// lexical limits allow parses in under 8 MiB in a debug build; this is reserved address
/// space, only the pages touched are committed.
pub const PARSE_STACK_BYTES: usize = 64 * 1024 * 1024;

/// What the parser survives on a [`PARSE_STACK_BYTES`] stack (measured with a margin in a
/// debug build): the bounds for expressions of stored definitions registered before the
/// limits above existed, which load but fail every evaluation with `EXPRESSION_LIMIT`.
const PARSEABLE_TOKENS: usize = 20_000;
const PARSEABLE_NESTING: usize = 64;

/// Why a source is refused before parsing, if it is.
pub(crate) fn check_source(source: &str) -> Result<(), String> {
    check_lexical(source, MAX_EXPR_BYTES, MAX_EXPR_TOKENS, MAX_EXPR_NESTING)
}

/// Why a stored source cannot even be parsed safely, if it cannot.
pub(crate) fn check_source_parseable(source: &str) -> Result<(), String> {
    check_lexical(source, MAX_DOCUMENT_BYTES, PARSEABLE_TOKENS, PARSEABLE_NESTING)
}

fn check_lexical(
    source: &str,
    max_bytes: usize,
    max_tokens: usize,
    max_nesting: usize,
) -> Result<(), String> {
    if source.len() > max_bytes {
        return Err(format!("expression is {} bytes; the limit is {max_bytes}", source.len()));
    }
    let bytes = source.as_bytes();
    let (mut tokens, mut depth, mut max_depth) = (0usize, 0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        tokens += 1;
        match c {
            b'"' | b'\'' => i = skip_string(bytes, i),
            b'(' | b'[' | b'{' => {
                depth += 1;
                max_depth = max_depth.max(depth);
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' && next_digit(bytes, i) => {
                // The first byte always advances (a leading `.` of `.5` would otherwise stop
                // the loop below before it moved: found by the fuzzer as a hang).
                i += 1;
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || matches!(bytes[i], b'_' | b'.'))
                {
                    // A `.` continues a number (`1.5`) but separates names (`a.b`).
                    if bytes[i] == b'.' && !bytes[i - 1].is_ascii_digit() {
                        break;
                    }
                    i += 1;
                }
            }
            // Operators and other punctuation: each byte counts as a token, so `&&` is
            // two; an over-count only makes the bound more conservative.
            _ => i += 1,
        }
    }
    if tokens > max_tokens {
        return Err(format!("expression has {tokens} tokens; the limit is {max_tokens}"));
    }
    if max_depth > max_nesting {
        return Err(format!(
            "expression nests brackets {max_depth} deep; the limit is {max_nesting}"
        ));
    }
    Ok(())
}

fn next_digit(bytes: &[u8], i: usize) -> bool {
    bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
}

/// Index just past the string literal starting at `start` (or the end of the text).
fn skip_string(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let triple = bytes.get(start..start + 3) == Some(&[quote, quote, quote][..]);
    let mut i = start + if triple { 3 } else { 1 };
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i] == quote {
            if !triple {
                return i + 1;
            }
            if bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]) {
                return i + 3;
            }
        }
        i += 1;
    }
    bytes.len()
}

/// The node count and depth of a parsed tree, walked with an explicit stack. Stops early
/// (returning what it saw so far) once either limit is passed.
pub(crate) fn measure_ast(root: &IdedExpr) -> (usize, usize) {
    let mut stack: Vec<(&IdedExpr, usize)> = vec![(root, 1)];
    let (mut nodes, mut depth) = (0usize, 0usize);
    while let Some((e, d)) = stack.pop() {
        nodes += 1;
        depth = depth.max(d);
        if nodes > MAX_AST_NODES || depth > MAX_AST_DEPTH {
            break;
        }
        for child in children(e) {
            stack.push((child, d + 1));
        }
    }
    (nodes, depth)
}

/// Why a parsed tree is refused, if it is.
pub(crate) fn check_ast(root: &IdedExpr) -> Result<usize, String> {
    let (nodes, depth) = measure_ast(root);
    if nodes > MAX_AST_NODES {
        return Err(format!("expression has over {MAX_AST_NODES} nodes once parsed"));
    }
    if depth > MAX_AST_DEPTH {
        return Err(format!(
            "expression nests over {MAX_AST_DEPTH} deep once parsed (a chain `a + b + ...` \
             counts one level per term)"
        ));
    }
    Ok(depth)
}

/// The direct children of a node.
pub(crate) fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Ast::Call(call) => call.target.iter().map(|t| &**t).chain(call.args.iter()).collect(),
        Ast::Select(sel) => vec![&*sel.operand],
        Ast::Comprehension(c) => {
            vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
        }
        Ast::List(list) => list.elements.iter().collect(),
        Ast::Map(map) => map.entries.iter().flat_map(|entry| entry_children(&entry.expr)).collect(),
        Ast::Struct(st) => {
            st.entries.iter().flat_map(|entry| entry_children(&entry.expr)).collect()
        }
        Ast::Ident(_) | Ast::Literal(_) | Ast::Unspecified => Vec::new(),
    }
}

fn entry_children(entry: &EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        EntryExpr::StructField(f) => vec![&f.value],
    }
}

/// The nesting depth of a JSON value (a scalar is 1), walked with an explicit stack;
/// stops counting past `limit`.
#[must_use]
pub fn value_depth(value: &Value, limit: usize) -> usize {
    let mut stack = vec![(value, 1usize)];
    let mut max = 0;
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        if max > limit {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|x| (x, d + 1))),
            Value::Object(fields) => stack.extend(fields.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_leading_dot_number_after_a_non_digit_is_scanned() {
        // Once an endless loop: `.` after a non-digit, followed by a digit.
        assert!(check_source("a:.0").is_ok());
        assert!(check_source("input.0bunt + 1.0").is_ok());
        assert!(check_source(".5 + x.y").is_ok());
    }

    #[test]
    fn sources_are_bounded_before_parsing() {
        assert!(check_source("input.amount * 1.2 > 3.0 && 'a\\'b(' == \"x\"").is_ok());
        let sum = vec!["1"; MAX_EXPR_TOKENS].join("+");
        assert!(check_source(&sum).unwrap_err().contains("tokens"));
        let nested =
            format!("{}1{}", "(".repeat(MAX_EXPR_NESTING + 1), ")".repeat(MAX_EXPR_NESTING + 1));
        assert!(check_source(&nested).unwrap_err().contains("nests"));
        // Brackets inside string literals do not count.
        let quoted = format!("'{}'", "(".repeat(100));
        assert!(check_source(&quoted).is_ok());
        assert!(check_source(&"x".repeat(MAX_EXPR_BYTES + 1)).unwrap_err().contains("bytes"));
    }

    #[test]
    fn trees_are_measured_without_recursion() {
        let program = cel::Program::compile("a.b.c + [1, 2][0]").unwrap();
        let (nodes, depth) = measure_ast(program.expression());
        assert_eq!((nodes, depth), (9, 4));
        let chain = vec!["1"; MAX_AST_DEPTH + 2].join("+");
        // Parsed on the parser's own thread: the test thread's stack is too small for it.
        let err = crate::Expr::compile(&chain).unwrap_err();
        assert!(err.is_limit() && err.message.contains("deep"), "{err}");
    }

    #[test]
    fn value_depth_counts_levels() {
        assert_eq!(value_depth(&json!(1), 10), 1);
        assert_eq!(value_depth(&json!({"a": [1, {"b": 2}]}), 10), 4);
        let mut deep = json!(0);
        for _ in 0..10_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(value_depth(&deep, 50), 51);
        // Dropping a 10,000-deep value recurses in serde_json; leak it in this test only.
        std::mem::forget(deep);
    }
}
