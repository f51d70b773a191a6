//! Rendering results: aligned tables and `key: value` blocks for people, one JSON document
//! per command for scripts.
//!
//! Writes to stdout never panic: a closed pipe (`orbit execution list | head`) ends the
//! output quietly instead of aborting the process, which `println!` would do.

use std::fmt::Display;
use std::fmt::Write as _;
use std::io::Write;

use serde_json::Value as Json;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables and `key: value` lines, payloads pretty-printed.
    #[default]
    Human,
    /// One JSON document per command on stdout (`execution watch`: one per line and event).
    Json,
}

/// Writes text to stdout, ignoring a closed pipe.
pub fn print_text(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}

/// Writes a JSON document to stdout, pretty-printed, with a trailing newline.
pub fn print_json(value: &Json) {
    print_text(&format!("{}\n", pretty(value)));
}

/// Writes a JSON document to stdout on one line (for streams of documents).
pub fn print_json_line(value: &Json) {
    print_text(&format!("{value}\n"));
}

/// A JSON value pretty-printed with two-space indentation.
#[must_use]
pub fn pretty(value: &Json) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// An optional timestamp as RFC 3339 text, or `-` when unset.
#[must_use]
pub fn ts<T: Display>(time: Option<&T>) -> String {
    time.map_or_else(|| "-".to_owned(), ToString::to_string)
}

/// An optional timestamp as a JSON string, or `null` when unset.
#[must_use]
pub fn ts_json<T: Display>(time: Option<&T>) -> Json {
    time.map_or(Json::Null, |t| Json::String(t.to_string()))
}

/// `text`, or `-` when it is empty, so table cells never collapse.
#[must_use]
pub fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}

/// Strips the enum-type prefix from a generated enum's name: `EXECUTION_STATUS_RUNNING` with
/// prefix `EXECUTION_STATUS_` reads `RUNNING`.
#[must_use]
pub fn enum_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix).unwrap_or(full).to_owned()
}

/// Lines of `key: value` with the values aligned.
#[derive(Default)]
pub struct Fields {
    rows: Vec<(String, String)>,
}

impl Fields {
    /// An empty block.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a line.
    pub fn add(&mut self, key: &str, value: impl Display) -> &mut Self {
        self.rows.push((key.to_owned(), value.to_string()));
        self
    }

    /// Adds a line unless the value is empty.
    pub fn add_nonempty(&mut self, key: &str, value: &str) -> &mut Self {
        if !value.is_empty() {
            self.add(key, value);
        }
        self
    }

    /// The block as text, one line per field. Multi-line values are indented under the key.
    #[must_use]
    pub fn render(&self) -> String {
        let width = self.rows.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0) + 1;
        let mut out = String::new();
        for (key, value) in &self.rows {
            let key = format!("{key}:");
            if value.contains('\n') {
                out.push_str(&key);
                out.push('\n');
                for line in value.lines() {
                    out.push_str("  ");
                    out.push_str(line);
                    out.push('\n');
                }
            } else {
                let _ = writeln!(out, "{key:<width$} {value}");
            }
        }
        out
    }
}

/// A table with a header row; every column but the last is padded to its widest cell.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    #[must_use]
    pub fn new(header: &[&str]) -> Self {
        Self { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    /// Adds a row; missing cells read as empty.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, header first.
    #[must_use]
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["NAME", "VERSION"]);
        t.row(vec!["orders".into(), "1".into()]);
        t.row(vec!["a".into(), "22".into()]);
        assert_eq!(t.render(), "NAME    VERSION\norders  1\na       22\n");
    }

    #[test]
    fn fields_align_and_indent_multiline() {
        let mut f = Fields::new();
        f.add("id", "x").add("status", "RUNNING").add("output", "{\n  \"a\": 1\n}");
        assert_eq!(f.render(), "id:     x\nstatus: RUNNING\noutput:\n  {\n    \"a\": 1\n  }\n");
    }

    #[test]
    fn enum_prefix_is_stripped() {
        assert_eq!(enum_name("EXECUTION_STATUS_TIMED_OUT", "EXECUTION_STATUS_"), "TIMED_OUT");
        assert_eq!(enum_name("OTHER", "EXECUTION_STATUS_"), "OTHER");
    }
}
