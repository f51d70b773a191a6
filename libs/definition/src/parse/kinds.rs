//! The payload of each step kind: `task`, `compute`, `sleep`, `until`, `await`,
//! `workflow`, `http`, `continue_as_new` (`group` and `switch` have their own module).

use crate::error::ErrorCode;
use crate::expr::Template;
use crate::model::StepKind;
use crate::parse::exprs::{Compiler, Vars};
use crate::parse::fields::duration;
use crate::parse::known::Known;
use crate::parse::names::workflow_ref;
use crate::parse::reader::{a_kind, wrong_type, Obj};
use serde_json::{Map, Value};

/// The kind keywords, in the order messages list them (`group` and `switch` are read by
/// `crate::parse::group`, `race` by `crate::parse::branches`, `repeat` by
/// `crate::parse::repeat`).
pub(crate) const KINDS: [&str; 12] = [
    "task",
    "compute",
    "sleep",
    "until",
    "await",
    "workflow",
    "http",
    "continue_as_new",
    "group",
    "switch",
    "race",
    "repeat",
];

const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Reads the payload of `kind`. `vars` is the scope of the step's per-element fields,
/// `outer` the scope outside any fan-out.
pub(crate) fn read(
    kind: &str,
    obj: &mut Obj,
    known: &Known,
    vars: &Vars,
    outer: &Vars,
    compiler: &mut Compiler,
) -> Option<StepKind> {
    let path = obj.at(kind);
    match kind {
        "task" => {
            let task = obj.required_string("task", compiler.errors)?;
            known.check_task(task, &path, compiler.errors);
            Some(StepKind::Task { task: task.to_string() })
        }
        "compute" => {
            let value = obj.raw("compute")?;
            compiler.template(value, &path, vars, true).map(|value| StepKind::Compute { value })
        }
        "sleep" => {
            if obj.get("sleep").is_none() {
                compiler.errors.push(&path, ErrorCode::InvalidDuration, "`sleep` needs a duration");
                return None;
            }
            duration(obj, "sleep", true, compiler.errors)
                .map(|duration_ms| StepKind::Sleep { duration_ms })
        }
        "until" => {
            let value = obj.raw("until")?;
            let at = compiler.template(value, &path, outer, true)?;
            if let Template::Literal(v) = &at {
                if !(v.is_string() || v.is_u64()) {
                    wrong_type(compiler.errors, &path, "an RFC 3339 timestamp or an expression", v);
                    return None;
                }
            }
            Some(StepKind::Until { at })
        }
        "await" => {
            let signal = obj.required_string("await", compiler.errors)?;
            known.check_signal(signal, &path, compiler.errors);
            Some(StepKind::Await { signal: signal.to_string() })
        }
        "workflow" => {
            let text = obj.required_string("workflow", compiler.errors)?;
            let (workflow, version) = workflow_ref(text, &path, compiler.errors)?;
            Some(StepKind::Workflow { workflow, version })
        }
        "http" => http(obj, vars, compiler).map(|request| StepKind::Http { request }),
        "continue_as_new" => {
            let mut c = obj.object("continue_as_new", "`{input: ...}`", compiler.errors)?;
            let input = c.required("input", compiler.errors);
            let input = input.and_then(|v| compiler.template(v, &c.at("input"), outer, true));
            c.finish(compiler.errors, &["input"]);
            Some(StepKind::ContinueAsNew { input: input? })
        }
        _ => None,
    }
}

/// `http: {method, url, headers?, body?}`, compiled as one template in that field order
/// (so the normalised form does not depend on how the document ordered them).
fn http(obj: &mut Obj, vars: &Vars, compiler: &mut Compiler) -> Option<Template> {
    let mut h = obj.object("http", "`{method, url, headers, body}`", compiler.errors)?;
    let mut request = Map::new();
    let mut ok = true;
    if let Some(method) = h.required_string("method", compiler.errors) {
        let upper = method.to_ascii_uppercase();
        if METHODS.contains(&upper.as_str()) {
            request.insert("method".into(), Value::String(upper));
        } else {
            let message =
                format!("unknown HTTP method `{method}`; expected one of {}", METHODS.join(", "));
            compiler.errors.push(&h.at("method"), ErrorCode::InvalidValue, message);
            ok = false;
        }
    } else {
        ok = false;
    }
    match h.required_string("url", compiler.errors) {
        Some(url) if !plausible_url(url) => {
            let message = format!("`{url}` is not an http:// or https:// URL");
            compiler.errors.push(&h.at("url"), ErrorCode::InvalidValue, message);
            ok = false;
        }
        Some(url) => {
            request.insert("url".into(), Value::String(url.to_string()));
        }
        None => ok = false,
    }
    if let Some(headers) = h.get("headers") {
        let path = h.at("headers");
        match headers {
            Value::Object(map) => {
                for (name, v) in map.iter().filter(|(_, v)| !v.is_string()) {
                    let message = format!("header `{name}` must be a string, got {}", a_kind(v));
                    compiler.errors.push(&path, ErrorCode::InvalidType, message);
                    ok = false;
                }
                request.insert("headers".into(), headers.clone());
            }
            other => {
                wrong_type(compiler.errors, &path, "a mapping of header names to strings", other);
                ok = false;
            }
        }
    }
    if let Some(body) = h.raw("body") {
        request.insert("body".into(), body.clone());
    }
    let base = h.path().to_string();
    h.finish(compiler.errors, &["method", "url", "headers", "body"]);
    let template = compiler.template(&Value::Object(request), &base, vars, true)?;
    ok.then_some(template)
}

/// A literal URL must be http(s); one with an expression can only be checked when rendered.
fn plausible_url(url: &str) -> bool {
    url.contains("${{") || url.starts_with("http://") || url.starts_with("https://")
}
