//! A key of the table or of an index as a store position: what a page
//! stopped at, written as text for the next page to start after.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use genace_stages::ports::table::StoreError;

type Item = HashMap<String, AttributeValue>;

/// A key of the table or an index as an opaque page cursor: its string and
/// number attributes, as JSON, base64url.
pub(super) fn encode_cursor(key: &Item) -> Option<String> {
    use base64::Engine;
    let plain: HashMap<&String, (&str, &String)> = key
        .iter()
        .filter_map(|(k, v)| match v {
            AttributeValue::S(s) => Some((k, ("S", s))),
            AttributeValue::N(n) => Some((k, ("N", n))),
            _ => None,
        })
        .collect();
    let json = serde_json::to_vec(&plain).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json))
}

/// The longest attribute value a position may carry: a sort key's limit
/// (1,024 bytes; a partition key's is 2,048). A longer one is refused as
/// a cursor before DynamoDB refuses the query.
const MAX_KEY_BYTES: usize = 1024;

pub(super) fn decode_cursor(cursor: &str) -> Result<Item, StoreError> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| StoreError::Cursor)?;
    let plain: HashMap<String, (String, String)> = serde_json::from_slice(&raw).map_err(|_| StoreError::Cursor)?;
    plain
        .into_iter()
        .map(|(k, (kind, v))| match kind.as_str() {
            _ if v.len() > MAX_KEY_BYTES || k.len() > 255 => Err(StoreError::Cursor),
            "S" => Ok((k, AttributeValue::S(v))),
            "N" => Ok((k, AttributeValue::N(v))),
            _ => Err(StoreError::Cursor),
        })
        .collect()
}
