//! Parsing of command-line input that the server never sees raw: `NAME[@VERSION]`
//! references, JSON arguments and definition files. Pure except for reading the files the
//! user names, and every error says which argument is wrong and how to fix it.

use std::fmt::Write as _;
use std::path::Path;

use orbit_api::v1::DefinitionFormat;
use serde_json::Value as Json;

use super::error::Failure;

/// A workflow named on the command line: `orders` or `orders@2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkflowRef {
    /// The workflow name.
    pub name: String,
    /// The version; `None` means the most recently registered one.
    pub version: Option<String>,
}

impl WorkflowRef {
    /// The version as the API wants it: empty for "latest".
    #[must_use]
    pub fn version_or_empty(&self) -> String {
        self.version.clone().unwrap_or_default()
    }
}

/// Parses `NAME` or `NAME@VERSION`. Used as a clap `value_parser`.
///
/// # Errors
///
/// An empty name, an empty version after `@`, or more than one `@`.
pub fn parse_workflow_ref(text: &str) -> Result<WorkflowRef, String> {
    let text = text.trim();
    let (name, version) = match text.split_once('@') {
        None => (text, None),
        Some((name, version)) => {
            if version.contains('@') {
                return Err(format!(
                    "`{text}` has more than one `@`; expected NAME or NAME@VERSION"
                ));
            }
            if version.is_empty() {
                return Err(format!(
                    "`{text}` has an empty version after `@`; expected NAME@VERSION, e.g. orders@1"
                ));
            }
            (name, Some(version.to_owned()))
        }
    };
    if name.is_empty() {
        return Err(format!("`{text}` has no workflow name; expected NAME or NAME@VERSION"));
    }
    Ok(WorkflowRef { name: name.to_owned(), version })
}

/// The highest and lowest dispatch priorities an execution may be started with.
const PRIORITIES: std::ops::RangeInclusive<u32> = 1..=5;

/// Parses `--priority`: 1 (dispatched first) to 5 (last). Used as a clap `value_parser`,
/// so a bad value is a usage error before anything is sent.
///
/// # Errors
///
/// Text that is not a whole number from 1 to 5.
pub fn parse_priority(text: &str) -> Result<u32, String> {
    let bad = || {
        format!(
            "`{text}` is not a priority: give 1 (dispatched first) to 5 (last); without \
             --priority the workflow's `priority:` applies, else 3"
        )
    };
    let priority: u32 = text.trim().parse().map_err(|_| bad())?;
    if PRIORITIES.contains(&priority) {
        Ok(priority)
    } else {
        Err(bad())
    }
}

/// Parses a JSON argument: the text itself, or `@PATH` for the contents of a file (`@-` for
/// stdin). `what` names the argument in errors, for example `--input`.
///
/// # Errors
///
/// [`Failure::Usage`] when the file cannot be read or the text is not JSON; the message
/// names the argument, the position of the error and a hint for the common mistake of an
/// unquoted string.
pub fn parse_json_arg(what: &str, text: &str) -> Result<Json, Failure> {
    match text.strip_prefix('@') {
        Some(path) => {
            let contents = read_source(path)
                .map_err(|e| Failure::Usage(format!("{what}: cannot read {path}: {e}")))?;
            parse_json_text(&format!("{what} (from {path})"), &contents)
        }
        None => parse_json_text(what, text),
    }
}

/// Parses JSON text, with an error message aimed at a shell user.
fn parse_json_text(what: &str, text: &str) -> Result<Json, Failure> {
    serde_json::from_str(text).map_err(|e| {
        let mut message = format!("{what} is not valid JSON: {e}");
        let trimmed = text.trim();
        let looks_like_bare_word = !trimmed.is_empty()
            && !trimmed.starts_with(['{', '[', '"'])
            && trimmed.parse::<f64>().is_err();
        if looks_like_bare_word {
            let _ = write!(
                message,
                " (strings need JSON quotes, e.g. {what} '\"{trimmed}\"'; objects look like \
                 {what} '{{\"amount\": 42}}')"
            );
        }
        Failure::Usage(message)
    })
}

/// A definition document read from a file (or stdin for `-`), and its format guessed from
/// the extension: `.json` is JSON, `.yaml`/`.yml` YAML, anything else is left to the server.
///
/// # Errors
///
/// [`Failure::Usage`] when the file cannot be read or is empty.
pub fn read_definition(path: &str) -> Result<(String, DefinitionFormat), Failure> {
    let document =
        read_source(path).map_err(|e| Failure::Usage(format!("cannot read {path}: {e}")))?;
    if document.trim().is_empty() {
        return Err(Failure::Usage(format!("{path} is empty; expected a YAML or JSON definition")));
    }
    Ok((document, definition_format(path)))
}

/// The definition format implied by a file name.
#[must_use]
pub fn definition_format(path: &str) -> DefinitionFormat {
    let extension = Path::new(path).extension().and_then(|e| e.to_str()).map(str::to_lowercase);
    match extension.as_deref() {
        Some("json") => DefinitionFormat::Json,
        Some("yaml" | "yml") => DefinitionFormat::Yaml,
        _ => DefinitionFormat::Unspecified,
    }
}

/// Reads a file, or stdin for `-`.
fn read_source(path: &str) -> std::io::Result<String> {
    if path == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage_message(result: Result<Json, Failure>) -> String {
        match result {
            Err(Failure::Usage(m)) => m,
            other => panic!("expected a usage failure, got {other:?}"),
        }
    }

    #[test]
    fn workflow_refs_parse() {
        let r = parse_workflow_ref("orders").unwrap();
        assert_eq!(r, WorkflowRef { name: "orders".into(), version: None });
        assert_eq!(r.version_or_empty(), "");
        let r = parse_workflow_ref("payments.refund@2.1").unwrap();
        assert_eq!(r.name, "payments.refund");
        assert_eq!(r.version.as_deref(), Some("2.1"));
    }

    #[test]
    fn bad_workflow_refs_are_rejected() {
        assert!(parse_workflow_ref("").unwrap_err().contains("no workflow name"));
        assert!(parse_workflow_ref("@1").unwrap_err().contains("no workflow name"));
        assert!(parse_workflow_ref("orders@").unwrap_err().contains("empty version"));
        assert!(parse_workflow_ref("a@1@2").unwrap_err().contains("more than one"));
    }

    #[test]
    fn priorities_are_one_to_five() {
        assert_eq!(parse_priority("1"), Ok(1));
        assert_eq!(parse_priority(" 5 "), Ok(5));
        for bad in ["0", "6", "-1", "high", "", "2.5"] {
            let err = parse_priority(bad).unwrap_err();
            assert!(err.contains("1 (dispatched first) to 5 (last)"), "{bad}: {err}");
        }
    }

    #[test]
    fn json_arguments_parse() {
        assert_eq!(parse_json_arg("--input", r#"{"amount": 42}"#).unwrap(), json!({"amount": 42}));
        assert_eq!(parse_json_arg("--input", "null").unwrap(), Json::Null);
        assert_eq!(parse_json_arg("--input", " 1.5 ").unwrap(), json!(1.5));
    }

    #[test]
    fn malformed_json_names_the_argument_and_position() {
        let m = usage_message(parse_json_arg("--input", r#"{"amount": }"#));
        assert!(m.starts_with("--input is not valid JSON: "), "{m}");
        assert!(m.contains("line 1 column"), "{m}");
        assert!(!m.contains("strings need JSON quotes"), "{m}");
    }

    #[test]
    fn bare_words_get_a_quoting_hint() {
        let m = usage_message(parse_json_arg("--payload", "approved"));
        assert!(m.contains("--payload is not valid JSON"), "{m}");
        assert!(m.contains(r#"'"approved"'"#), "{m}");
    }

    #[test]
    fn json_from_a_missing_file_is_a_usage_error() {
        let m = usage_message(parse_json_arg("--input", "@/nonexistent/input.json"));
        assert!(m.starts_with("--input: cannot read /nonexistent/input.json"), "{m}");
    }

    #[test]
    fn json_from_a_file() {
        let path =
            std::env::temp_dir().join(format!("orbit-cli-input-{}.json", std::process::id()));
        std::fs::write(&path, "[1, 2]").unwrap();
        let arg = format!("@{}", path.display());
        assert_eq!(parse_json_arg("--input", &arg).unwrap(), json!([1, 2]));
        std::fs::write(&path, "[1, ").unwrap();
        let m = usage_message(parse_json_arg("--input", &arg));
        assert!(m.contains("(from "), "{m}");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn definition_format_follows_extension() {
        assert_eq!(definition_format("a/orders.json"), DefinitionFormat::Json);
        assert_eq!(definition_format("orders.YAML"), DefinitionFormat::Yaml);
        assert_eq!(definition_format("orders.yml"), DefinitionFormat::Yaml);
        assert_eq!(definition_format("-"), DefinitionFormat::Unspecified);
    }
}
