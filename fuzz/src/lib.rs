//! Helpers shared by the fuzz targets.

use serde_json::Value;

/// The same JSON value written differently: object members in reverse
/// order, and every integer that a double holds exactly spelled as a
/// fraction (`5` as `5.0`). RFC 8785 says both spellings are one document.
pub fn respell(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), respell(v)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(respell).collect();
            format!("[{}]", items.join(","))
        }
        Value::Number(n) => match n.as_i64() {
            Some(i) if i.unsigned_abs() <= (1 << 53) => format!("{i}.0"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}
