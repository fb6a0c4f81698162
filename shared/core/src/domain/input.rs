//! Why an input was refused, and the small checks every parser shares.

use serde_json::{Map, Value};

/// Why an input could not be parsed. `field` names the offending member the
/// way a client wrote it, so the problem document can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: String,
    pub reason: String,
}

impl InvalidInput {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

pub(super) fn visible_ascii(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// True when every character is Unicode white space: a value the OpenAPI
/// document's `\S` pattern refuses (ECMA-262 `\s`, which, unlike Python's,
/// does not count the separators U+001C to U+001F).
pub fn is_blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

/// The largest integer a JSON number holds exactly (2^53 - 1): the bound
/// of integer members such as `prompt_revision`.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `value`'s members, when it is an object whose members are all among
/// `known`: the one check of unknown members every request body passes, so
/// a misspelt member is refused, never ignored (the OpenAPI document's
/// `additionalProperties: false`). `name` is the value's field (`body` for
/// a whole body); a member of a nested value is named `name.member`.
pub fn members<'a>(value: &'a Value, name: &str, known: &[&str]) -> Result<&'a Map<String, Value>, InvalidInput> {
    let obj = value
        .as_object()
        .ok_or_else(|| InvalidInput::new(name, "must be a JSON object"))?;
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) if name == "body" => Err(InvalidInput::new(unknown.clone(), "is not a known member")),
        Some(unknown) => Err(InvalidInput::new(format!("{name}.{unknown}"), "is not a known member")),
        None => Ok(obj),
    }
}

/// Object members whose value is `null` mean "not given": drop them, at every depth.
/// Array elements keep their positions, so a `null` inside an array stays.
pub(super) fn strip_nulls(obj: &Map<String, Value>) -> Map<String, Value> {
    obj.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

fn strip_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_nulls(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}
