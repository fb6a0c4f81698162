//! The operations table's change stream, as DynamoDB Streams hands it to
//! EventBridge Pipes (and Lambda): records with an `eventName` and the old
//! and new images in DynamoDB JSON. [`lifecycle_events`] turns a batch into
//! the lifecycle events its committed changes announce, through the one
//! derivation in `genace_core::events`. Ledger items and removals (TTL
//! expiry) announce nothing.

use genace_core::events::{self, Context, LifecycleEvent};
use genace_core::record::OperationRecord;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("stream record {index} is not a DynamoDB stream record: {detail}")]
    Shape { index: usize, detail: String },
    #[error("stream record {index} holds an operation image that does not decode: {detail}")]
    Image { index: usize, detail: String },
}

#[derive(Debug, Deserialize)]
struct StreamRecord {
    #[serde(rename = "eventName")]
    event_name: String,
    dynamodb: Change,
}

#[derive(Debug, Deserialize)]
struct Change {
    #[serde(rename = "OldImage", default)]
    old: Option<serde_dynamo::Item>,
    #[serde(rename = "NewImage", default)]
    new: Option<serde_dynamo::Item>,
}

fn is_operation(item: &serde_dynamo::Item) -> bool {
    matches!(item.get("pk"), Some(serde_dynamo::AttributeValue::S(pk)) if pk.starts_with(crate::schema::OPERATION_PREFIX))
}

fn decode(index: usize, mut item: serde_dynamo::Item) -> Result<OperationRecord, StreamError> {
    for computed in crate::schema::COMPUTED_ATTRIBUTES {
        item.remove(computed);
    }
    serde_dynamo::from_item(item).map_err(|e| StreamError::Image {
        index,
        detail: e.to_string(),
    })
}

/// The lifecycle events of a batch of stream records, in stream order.
pub fn lifecycle_events(records: &[Value], ctx: &Context) -> Result<Vec<LifecycleEvent>, StreamError> {
    let mut out = Vec::new();
    for (index, raw) in records.iter().enumerate() {
        let record: StreamRecord = serde_json::from_value(raw.clone()).map_err(|e| StreamError::Shape {
            index,
            detail: e.to_string(),
        })?;
        if record.event_name == "REMOVE" {
            continue;
        }
        let Some(new) = record.dynamodb.new.filter(is_operation) else {
            continue;
        };
        let old = record.dynamodb.old.map(|o| decode(index, o)).transpose()?;
        let new = decode(index, new)?;
        out.extend(events::derive(old.as_ref(), &new, ctx));
    }
    Ok(out)
}

/// A stream record as the pipe delivers it, for a change from `old` to
/// `new` (DynamoDB JSON images of the stored items). The local stack builds
/// these from what it reads off the stream; tests build them from records.
pub fn stream_record(event_name: &str, old: Option<Value>, new: Option<Value>) -> Value {
    let mut change = serde_json::Map::new();
    if let Some(o) = old {
        change.insert("OldImage".into(), o);
    }
    if let Some(n) = new {
        change.insert("NewImage".into(), n);
    }
    serde_json::json!({
        "eventName": event_name,
        "eventSource": "aws:dynamodb",
        "dynamodb": Value::Object(change),
    })
}

/// The DynamoDB JSON image of a record as the store writes it.
pub fn image(rec: &OperationRecord) -> Value {
    let item: serde_dynamo::Item = serde_dynamo::to_item(rec).unwrap_or_default();
    serde_json::to_value(item).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use genace_core::events::Kind;

    fn record() -> OperationRecord {
        genace_localaws::intent_record("t", "k", "p")
    }

    #[test]
    fn a_modify_of_an_operation_announces_its_events() {
        let old = record();
        let mut new = genace_localaws::claimed(&old, "tok");
        new.phase = genace_core::record::Phase::Accepted;
        new.claim = None;
        new.remote_job_id = Some("J".into());
        let batch = [stream_record("MODIFY", Some(image(&old)), Some(image(&new)))];
        let events = lifecycle_events(&batch, &Context::default()).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, Kind::Accepted);
        assert_eq!(events[0].data["remote_job_id"], "J");
    }

    #[test]
    fn inserts_removals_and_ledger_items_announce_nothing() {
        let rec = record();
        let ledger = serde_json::json!({"pk": {"S": "TENANT#t"}, "held_mc": {"N": "10"}});
        let batch = [
            stream_record("INSERT", None, Some(image(&rec))),
            stream_record("REMOVE", Some(image(&rec)), None),
            stream_record("MODIFY", Some(ledger.clone()), Some(ledger)),
        ];
        assert!(lifecycle_events(&batch, &Context::default()).unwrap().is_empty());
    }

    #[test]
    fn a_record_that_does_not_decode_is_an_error_not_silence() {
        let broken = serde_json::json!({"pk": {"S": "OP#x"}, "phase": {"S": "exploded"}});
        let batch = [stream_record("MODIFY", Some(broken.clone()), Some(broken))];
        assert!(matches!(
            lifecycle_events(&batch, &Context::default()),
            Err(StreamError::Image { index: 0, .. })
        ));
        assert!(matches!(
            lifecycle_events(&[serde_json::json!({"nope": 1})], &Context::default()),
            Err(StreamError::Shape { index: 0, .. })
        ));
    }
}
