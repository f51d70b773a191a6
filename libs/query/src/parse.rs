//! Query text to [`Query`]: the limits that need no parse (length, parenthesis depth) are
//! checked first, then the pest grammar (`query.pest`) parses, and its pairs are turned
//! into the AST, counting predicates. A pest error becomes a [`QueryError`] at pest's
//! position, naming what was expected in the language's words.

use crate::ast::{
    Attribute, CmpOp, Direction, Expr, Literal, LiteralValue, OrderBy, Predicate, Query, Test,
};
use crate::error::{QueryError, Span};
use crate::{MAX_DEPTH, MAX_PREDICATES, MAX_QUERY_BYTES};
use pest::iterators::Pair;
use pest::Parser as _;

#[derive(pest_derive::Parser)]
#[grammar = "query.pest"]
struct Grammar;

/// Parses a query. An empty (or blank) query is valid and matches everything.
///
/// # Errors
/// `INVALID_QUERY` at the offending position: over [`MAX_QUERY_BYTES`], nested deeper
/// than [`MAX_DEPTH`], more than [`MAX_PREDICATES`] predicates, a syntax error, or an
/// integer out of range.
pub fn parse(input: &str) -> Result<Query, QueryError> {
    if input.len() > MAX_QUERY_BYTES {
        return Err(QueryError::at(
            input,
            MAX_QUERY_BYTES,
            format!(
                "the query is {} bytes; at most {MAX_QUERY_BYTES} (MAX_QUERY_BYTES)",
                input.len()
            ),
        ));
    }
    check_depth(input)?;
    let mut pairs = Grammar::parse(Rule::query, input).map_err(|e| syntax(input, e))?;
    let mut b = Builder { input, predicates: 0 };
    let mut query = Query { filter: None, order: None };
    for pair in pairs.next().into_iter().flat_map(Pair::into_inner) {
        match pair.as_rule() {
            Rule::filter => {
                let start = pair.as_span().start();
                let inner = pair.into_inner().next();
                let inner = inner.ok_or_else(|| QueryError::at(input, start, "empty condition"))?;
                query.filter = Some(b.expr(inner)?);
            }
            Rule::order_by => query.order = Some(b.order_by(pair)),
            _ => {}
        }
    }
    Ok(query)
}

/// Refuses parentheses nested deeper than [`MAX_DEPTH`] before the grammar recurses into
/// them (strings and backquoted names are skipped: their parentheses are text).
fn check_depth(input: &str) -> Result<(), QueryError> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (i, c) in input.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '`') => quote = Some(c),
            (None, '(') => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(QueryError::at(
                        input,
                        i,
                        format!("parentheses nest deeper than {MAX_DEPTH} (MAX_DEPTH)"),
                    ));
                }
            }
            (None, ')') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
    }
    Ok(())
}

/// A pest error in the language's words.
fn syntax(input: &str, e: pest::error::Error<Rule>) -> QueryError {
    let position = match e.location {
        pest::error::InputLocation::Pos(p) => p,
        pest::error::InputLocation::Span((s, _)) => s,
    };
    let message = match &e.variant {
        pest::error::ErrorVariant::ParsingError { positives, .. } => {
            let mut names: Vec<&str> = positives.iter().map(|r| rule_name(*r)).collect();
            names.sort_unstable();
            names.dedup();
            if names.is_empty() {
                "unexpected input".to_string()
            } else {
                format!("expected {}", names.join(", "))
            }
        }
        pest::error::ErrorVariant::CustomError { message } => message.clone(),
    };
    QueryError::at(input, position, message)
}

/// What a grammar rule is called in an error message.
fn rule_name(rule: Rule) -> &'static str {
    match rule {
        Rule::EOI => "end of query",
        Rule::attribute | Rule::ident | Rule::quoted_ident | Rule::predicate => "an attribute",
        Rule::cmp_op | Rule::comparison => "a comparison (= != < <= > >=)",
        Rule::string | Rule::number | Rule::boolean => "a value",
        Rule::kw_and => "AND",
        Rule::kw_or => "OR",
        Rule::kw_not | Rule::not_op | Rule::is_not | Rule::not_in => "NOT",
        Rule::kw_in | Rule::in_list => "IN",
        Rule::kw_between | Rule::between => "BETWEEN",
        Rule::kw_starts_with | Rule::starts_with => "STARTS_WITH",
        Rule::kw_is | Rule::is_null => "IS",
        Rule::kw_null => "NULL",
        Rule::kw_order | Rule::order_by => "ORDER BY",
        Rule::kw_by => "BY",
        Rule::kw_asc | Rule::kw_desc | Rule::direction => "ASC or DESC",
        Rule::filter | Rule::or_expr | Rule::and_expr | Rule::not_expr => "a condition",
        _ => "more input",
    }
}

fn span_of(pair: &Pair<'_, Rule>) -> Span {
    let s = pair.as_span();
    Span::new(s.start(), s.end())
}

/// Turns pairs into the AST, counting predicates against [`MAX_PREDICATES`].
struct Builder<'i> {
    input: &'i str,
    predicates: usize,
}

impl<'i> Builder<'i> {
    fn expr(&mut self, pair: Pair<'i, Rule>) -> Result<Expr, QueryError> {
        match pair.as_rule() {
            Rule::or_expr | Rule::and_expr => {
                let or = pair.as_rule() == Rule::or_expr;
                let mut parts = Vec::new();
                for p in pair.into_inner() {
                    if matches!(p.as_rule(), Rule::kw_or | Rule::kw_and) {
                        continue;
                    }
                    parts.push(self.expr(p)?);
                }
                Ok(match (parts.len(), or) {
                    (1, _) => parts.remove(0),
                    (_, true) => Expr::Or(parts),
                    (_, false) => Expr::And(parts),
                })
            }
            Rule::not_expr => {
                let mut nots = 0usize;
                let mut inner = None;
                for p in pair.into_inner() {
                    if p.as_rule() == Rule::not_op {
                        nots += 1;
                    } else {
                        inner = Some(self.expr(p)?);
                    }
                }
                let mut e =
                    inner.ok_or_else(|| QueryError::at(self.input, 0, "empty condition"))?;
                for _ in 0..nots {
                    e = Expr::Not(Box::new(e));
                }
                Ok(e)
            }
            Rule::predicate => self.predicate(pair).map(Expr::Predicate),
            _ => Err(QueryError::at_span(self.input, span_of(&pair), "unexpected input")),
        }
    }

    fn predicate(&mut self, pair: Pair<'i, Rule>) -> Result<Predicate, QueryError> {
        let span = span_of(&pair);
        self.predicates += 1;
        if self.predicates > MAX_PREDICATES {
            return Err(QueryError::at_span(
                self.input,
                span,
                format!("more than {MAX_PREDICATES} predicates (MAX_PREDICATES)"),
            ));
        }
        let mut inner = pair.into_inner();
        let (Some(attr), Some(test)) = (inner.next(), inner.next()) else {
            return Err(QueryError::at_span(self.input, span, "incomplete predicate"));
        };
        let attribute = attribute(attr);
        let test = self.test(test)?;
        Ok(Predicate { attribute, test, span })
    }

    fn test(&self, pair: Pair<'i, Rule>) -> Result<Test, QueryError> {
        let rule = pair.as_rule();
        let values: Vec<Pair<'i, Rule>> = pair
            .clone()
            .into_inner()
            .filter(|p| matches!(p.as_rule(), Rule::string | Rule::number | Rule::boolean))
            .collect();
        let mut lits = Vec::with_capacity(values.len());
        for v in values {
            lits.push(self.literal(v)?);
        }
        let missing = || QueryError::at_span(self.input, span_of(&pair), "missing value");
        Ok(match rule {
            Rule::comparison => {
                let op = match pair.clone().into_inner().next().map(|p| p.as_str()) {
                    Some("=") => CmpOp::Eq,
                    Some("!=" | "<>") => CmpOp::Ne,
                    Some("<") => CmpOp::Lt,
                    Some("<=") => CmpOp::Le,
                    Some(">") => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                Test::Compare(op, lits.into_iter().next().ok_or_else(missing)?)
            }
            Rule::in_list => Test::In { negated: false, values: lits },
            Rule::not_in => Test::In { negated: true, values: lits },
            Rule::between => {
                let mut it = lits.into_iter();
                let (Some(low), Some(high)) = (it.next(), it.next()) else {
                    return Err(missing());
                };
                Test::Between(low, high)
            }
            Rule::starts_with => Test::StartsWith(lits.into_iter().next().ok_or_else(missing)?),
            Rule::is_null => {
                Test::IsNull { negated: pair.into_inner().any(|p| p.as_rule() == Rule::is_not) }
            }
            _ => return Err(QueryError::at_span(self.input, span_of(&pair), "unexpected test")),
        })
    }

    fn literal(&self, pair: Pair<'i, Rule>) -> Result<Literal, QueryError> {
        let span = span_of(&pair);
        let text = pair.as_str();
        let value = match pair.as_rule() {
            Rule::string => {
                let inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("");
                LiteralValue::String(inner.replace("''", "'"))
            }
            Rule::number if text.contains('.') => {
                LiteralValue::Decimal(text.parse().map_err(|_| {
                    QueryError::at_span(self.input, span, format!("{text} is not a number"))
                })?)
            }
            Rule::number => LiteralValue::Int(text.parse().map_err(|_| {
                QueryError::at_span(
                    self.input,
                    span,
                    format!("{text} is out of the 64-bit integer range"),
                )
            })?),
            _ => LiteralValue::Bool(text.eq_ignore_ascii_case("true")),
        };
        Ok(Literal { value, span })
    }

    fn order_by(&self, pair: Pair<'i, Rule>) -> OrderBy {
        let mut attr = None;
        let mut direction = Direction::Asc;
        for p in pair.into_inner() {
            match p.as_rule() {
                Rule::attribute => attr = Some(attribute(p)),
                Rule::direction if p.as_str().eq_ignore_ascii_case("desc") => {
                    direction = Direction::Desc;
                }
                _ => {}
            }
        }
        let attribute = attr.unwrap_or(Attribute { name: String::new(), span: Span::new(0, 0) });
        OrderBy { attribute, direction }
    }
}

/// An attribute pair: a plain identifier, or a backquoted one (`` `a``b` `` is ``a`b``).
fn attribute(pair: Pair<'_, Rule>) -> Attribute {
    let span = span_of(&pair);
    let text = pair.as_str();
    let name = match text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
        Some(inner) => inner.replace("``", "`"),
        None => text.to_string(),
    };
    Attribute { name, span }
}
