//! One iterative walk over a JSON value: its compact JSON length, its length as a
//! `google.protobuf.Value` message, its nesting depth and where it first nests too deep.
//!
//! The protobuf length follows the encoding prost (and every conforming encoder) writes:
//! `Value` is a oneof whose set field is always written (`null_value`/`bool_value`: tag +
//! 1-byte varint; `number_value`: tag + 8 bytes; `string_value`, `list_value`,
//! `struct_value`: tag + length + body), a `ListValue` is repeated `Value`s, a `Struct` a
//! map whose entries are `{key, value}` messages (an empty key, being the default, is not
//! written). Children are summed into their parent when the parent's frame is popped, so
//! the stack holds one frame per nesting level and nothing per element.

use crate::MAX_DEPTH;
use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// How big and how deep a payload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measure {
    /// Length of its compact JSON text (as `serde_json::to_vec` writes it).
    pub json_bytes: u64,
    /// Length of its `google.protobuf.Value` message body (prost's `encoded_len`).
    pub wire_bytes: u64,
    /// Nesting depth of arrays and objects: 0 for a scalar.
    pub depth: usize,
    /// Where the first array or object nested deeper than [`MAX_DEPTH`] starts, relative to
    /// the value (`.a[2].b`); `None` when the value is within the limit.
    pub deep_path: Option<String>,
}

impl Measure {
    /// The size the limit applies to: the larger of the JSON and the protobuf length.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.json_bytes.max(self.wire_bytes)
    }
}

/// How a child hangs in its parent.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Index(usize),
    Key(&'a str),
}

enum Children<'a> {
    Array(std::iter::Enumerate<std::slice::Iter<'a, Value>>),
    Object(serde_json::map::Iter<'a>),
}

/// One open array or object.
struct Frame<'a> {
    children: Children<'a>,
    seg: Seg<'a>,
    /// Protobuf length of the `ListValue` / `Struct` body so far.
    body: u64,
    first: bool,
}

/// Measures `value` (see [`Measure`]).
#[must_use]
pub fn measure(value: &Value) -> Measure {
    let mut json = 0u64;
    let mut depth = 0usize;
    let mut deep_path = None;
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut root_wire = 0u64;
    match open(value, Seg::Root, &mut json) {
        Opened::Scalar(len) => root_wire = len,
        Opened::Container(frame) => {
            depth = 1;
            stack.push(frame);
        }
    }
    while let Some(top) = stack.last_mut() {
        let next = match &mut top.children {
            Children::Array(items) => items.next().map(|(i, v)| (Seg::Index(i), v)),
            Children::Object(entries) => entries.next().map(|(k, v)| (Seg::Key(k.as_str()), v)),
        };
        let Some((seg, child)) = next else {
            let done = stack.pop().expect("a frame is on the stack");
            let len = field(done.body);
            match stack.last_mut() {
                Some(parent) => parent.body += attach(done.seg, len),
                None => root_wire = len,
            }
            continue;
        };
        if !top.first {
            json += 1; // ','
        }
        top.first = false;
        if let Seg::Key(k) = seg {
            json += json_string_len(k) + 1; // "key":
        }
        match open(child, seg, &mut json) {
            Opened::Scalar(len) => top.body += attach(seg, len),
            Opened::Container(frame) => {
                let level = stack.len() + 1;
                depth = depth.max(level);
                if level > MAX_DEPTH && deep_path.is_none() {
                    deep_path = Some(path(stack.iter().map(|f| f.seg).chain([seg])));
                }
                stack.push(frame);
            }
        }
    }
    Measure { json_bytes: json, wire_bytes: root_wire, depth, deep_path }
}

enum Opened<'a> {
    /// A scalar: its `Value` body length.
    Scalar(u64),
    Container(Frame<'a>),
}

/// Counts a value's own JSON bytes (brackets, or the whole scalar) and opens containers.
fn open<'a>(value: &'a Value, seg: Seg<'a>, json: &mut u64) -> Opened<'a> {
    let frame = |children| Opened::Container(Frame { children, seg, body: 0, first: true });
    match value {
        Value::Null => {
            *json += 4;
            Opened::Scalar(2)
        }
        Value::Bool(b) => {
            *json += if *b { 4 } else { 5 };
            Opened::Scalar(2)
        }
        Value::Number(n) => {
            *json += number_len(n);
            Opened::Scalar(9)
        }
        Value::String(s) => {
            *json += json_string_len(s);
            Opened::Scalar(field(s.len() as u64))
        }
        Value::Array(items) => {
            *json += 2;
            frame(Children::Array(items.iter().enumerate()))
        }
        Value::Object(map) => {
            *json += 2;
            frame(Children::Object(Map::iter(map)))
        }
    }
}

/// What a child `Value` of body length `len` adds to its parent's body: a repeated field
/// of a `ListValue`, or a map entry of a `Struct`.
fn attach(seg: Seg<'_>, len: u64) -> u64 {
    match seg {
        Seg::Root | Seg::Index(_) => field(len),
        Seg::Key(k) => {
            let key = if k.is_empty() { 0 } else { field(k.len() as u64) };
            field(key + field(len))
        }
    }
}

/// A length-delimited field with a one-byte tag: tag + varint length + body.
fn field(len: u64) -> u64 {
    1 + varint_len(len) + len
}

fn varint_len(v: u64) -> u64 {
    // 7 bits per byte; at least one byte.
    u64::from((64 - (v | 1).leading_zeros()).div_ceil(7))
}

/// Bytes of `s` as a JSON string literal, quotes included, escaped as serde_json does:
/// `"` and `\` and the short control escapes take 2 bytes, other control characters 6
/// (`\u00XX`); everything else (non-ASCII too) is written as is.
fn json_string_len(s: &str) -> u64 {
    let escapes: u64 = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\x08' | b'\x0c' | b'\n' | b'\r' | b'\t' => 1,
            0..=0x1f => 5,
            _ => 0,
        })
        .sum();
    2 + s.len() as u64 + escapes
}

fn number_len(n: &Number) -> u64 {
    struct Count(u64);
    impl std::fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 += s.len() as u64;
            Ok(())
        }
    }
    let mut c = Count(0);
    // `Number`'s Display writes exactly what the serializer writes (itoa / ryu).
    let _ = write!(c, "{n}");
    c.0
}

/// A readable path: `.key` for identifier-like keys, `["key"]` otherwise, `[i]` for
/// indexes; long keys and long paths are shortened so an error message stays small.
fn path<'a>(segs: impl Iterator<Item = Seg<'a>>) -> String {
    const MAX_KEY: usize = 32;
    const MAX_PATH: usize = 512;
    let mut out = String::new();
    for seg in segs {
        if out.len() > MAX_PATH {
            out.push('…');
            break;
        }
        match seg {
            Seg::Root => {}
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Seg::Key(k) => {
                let short: String = k.chars().take(MAX_KEY).collect();
                let cut = if short.len() < k.len() { "…" } else { "" };
                let plain = !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !k.starts_with(|c: char| c.is_ascii_digit());
                if plain {
                    let _ = write!(out, ".{short}{cut}");
                } else {
                    let _ = write!(out, "[{:?}]", format!("{short}{cut}"));
                }
            }
        }
    }
    out
}
