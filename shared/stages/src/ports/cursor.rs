//! The one cursor codec of every list this API pages: a store's position,
//! sealed with what the list was asked for (its scope and filter), so that
//! a cursor used with another tenant, another filter or another list is
//! refused as a bad request instead of skipping or repeating items, and a
//! forged or garbled one never reaches the store.
//!
//! The seal is a digest of public values: it tells mistakes apart, not
//! secrets. Each store still checks that a position it is handed has the
//! shape of one of its own.

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::ports::table::StoreError;

/// What a cursor is bound to: the digest of the list's name and of each
/// part of its scope and filter, in order (length-prefixed, so parts
/// cannot run into each other).
pub fn binding(list: &str, parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in std::iter::once(list).chain(parts.iter().copied()) {
        hash.update(part.len().to_le_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize()[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// The cursor handed to a client for `position` under `binding`.
pub fn seal(position: &str, binding: &str) -> String {
    let json = serde_json::json!({"p": position, "b": binding}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// The position in `cursor`; [`StoreError::Cursor`] for one this API did
/// not make, or made under another binding.
pub fn open(cursor: &str, binding: &str) -> Result<String, StoreError> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| StoreError::Cursor)?;
    let value: serde_json::Value = serde_json::from_slice(&raw).map_err(|_| StoreError::Cursor)?;
    let position = value.get("p").and_then(serde_json::Value::as_str);
    let bound = value.get("b").and_then(serde_json::Value::as_str);
    match (position, bound) {
        (Some(p), Some(b)) if b == binding => Ok(p.to_owned()),
        _ => Err(StoreError::Cursor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_opens_under_its_own_binding_only() {
        let mine = binding("cases", &["acme", "rate_limited"]);
        let cursor = seal("position", &mine);
        assert_eq!(open(&cursor, &mine).unwrap(), "position");
        for other in [
            binding("cases", &["acme", ""]),
            binding("cases", &["other", "rate_limited"]),
            binding("operations", &["acme", "rate_limited"]),
            // Parts do not run into each other.
            binding("cases", &["acmerate_limited", ""]),
        ] {
            assert!(open(&cursor, &other).is_err());
        }
        for forged in ["", "not base64!", "e30", "eyJwIjoxfQ"] {
            assert!(open(forged, &mine).is_err(), "{forged:?}");
        }
    }
}
