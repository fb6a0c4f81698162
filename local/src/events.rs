//! The local stack's events pipe: what the deployed EventBridge Pipe does,
//! on the local endpoint. It reads the operations table's stream (shards
//! from the oldest record, as the pipe's `TRIM_HORIZON`), keeps the records
//! the pipe's filter keeps (changes of operation items), hands each batch to
//! the same enrichment the pipe runs (the library in process, or the events
//! function's binary in artifact mode), and appends each event as the bus
//! would carry it to a JSON-lines file a developer can `tail -f`. Like the
//! bus's webhook rule, it also sends each event the enrichment marked for a
//! tenant's receivers to the webhook queue.
//!
//! A batch the enrichment refuses is retried; after [`MAX_ATTEMPTS`] it is
//! written to the dead-letter file beside the events file, as the pipe
//! sends it to its DLQ.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// Attempts per batch before it goes to the dead-letter file (the
/// template's `MaximumRetryAttempts`).
pub const MAX_ATTEMPTS: u32 = 10;

/// Stream records per enrichment call (the template's `BatchSize`).
pub const BATCH_SIZE: usize = 3;

/// Where the events go (`GENACE_EVENTS_FILE`, default `.local/events.jsonl`).
pub fn events_file() -> PathBuf {
    std::env::var("GENACE_EVENTS_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(".local/events.jsonl"))
}

/// The dead-letter file of an events file.
pub fn dead_letter_file(events: &Path) -> PathBuf {
    events.with_extension("dlq.jsonl")
}

/// The pipe's filter: modifications of operation items (not tenant ledger
/// items, not TTL removals).
pub fn passes_filter(record: &Value) -> bool {
    record["eventName"] == "MODIFY"
        && record["dynamodb"]["Keys"]["pk"]["S"]
            .as_str()
            .is_some_and(|pk| pk.starts_with(genace_core::keys::OPERATION_PREFIX))
}

/// The bus's webhook rule (the template's `WebhookRule` pattern): lifecycle
/// events that the enrichment marked for a tenant's receivers.
pub fn webhook_rule_takes(bus_event: &Value) -> bool {
    bus_event["source"] == genace_core::events::SOURCE
        && bus_event["detail"][genace_core::events::WEBHOOKS_MEMBER] == Value::Bool(true)
}

/// One event as the bus carries it: the pipe's target parameters put the
/// event's `type` in `detail-type` and its `time` in `time`.
pub fn bus_envelope(event: &Value) -> Value {
    json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "source": genace_core::events::SOURCE,
        "detail-type": event["type"],
        "time": event["time"],
        "detail": event,
    })
}

fn image(item: Option<HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>) -> Option<Value> {
    let item: HashMap<String, serde_dynamo::AttributeValue> = item?
        .into_iter()
        .map(|(k, v)| (k, serde_dynamo::AttributeValue::from(v)))
        .collect();
    serde_json::to_value(item).ok()
}

/// A stream record in the shape DynamoDB Streams gives the pipe.
fn pipe_record(r: aws_sdk_dynamodbstreams::types::Record) -> Value {
    let name = r.event_name().map(|n| n.as_str().to_owned()).unwrap_or_default();
    let Some(change) = r.dynamodb else {
        return genace_aws::stream::stream_record(&name, None, None);
    };
    let mut record = genace_aws::stream::stream_record(&name, image(change.old_image), image(change.new_image));
    record["dynamodb"]["Keys"] = image(change.keys).unwrap_or(Value::Null);
    record["dynamodb"]["SequenceNumber"] = json!(change.sequence_number);
    record
}

fn append(path: &Path, lines: &[Value]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let mut text = String::new();
    for line in lines {
        text.push_str(&line.to_string());
        text.push('\n');
    }
    f.write_all(text.as_bytes())?;
    f.flush()
}

/// Starts the pipe: `enrich` gets each filtered batch and returns the events.
pub fn spawn_pipe<F, Fut>(
    tasks: &mut JoinSet<()>,
    sdk: &aws_config::SdkConfig,
    table: String,
    file: PathBuf,
    webhook_queue: Option<String>,
    enrich: F,
) where
    F: Fn(Vec<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<Value>, String>> + Send,
{
    let dynamodb = genace_aws::clients::dynamodb(sdk);
    let streams = aws_sdk_dynamodbstreams::Client::new(sdk);
    let rule = webhook_queue
        .filter(|q| !q.is_empty())
        .map(|q| (genace_aws::clients::sqs(sdk), q));
    tasks.spawn(async move {
        tracing::info!(file = %file.display(), "lifecycle events are appended here");
        let mut iterators: HashMap<String, Option<String>> = HashMap::new();
        let mut stream_arn = None;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if stream_arn.is_none() {
                stream_arn = dynamodb
                    .describe_table()
                    .table_name(&table)
                    .send()
                    .await
                    .ok()
                    .and_then(|t| t.table?.latest_stream_arn);
                if stream_arn.is_none() {
                    continue;
                }
            }
            let arn = stream_arn.clone().unwrap_or_default();
            let Ok(described) = streams.describe_stream().stream_arn(&arn).send().await else {
                continue;
            };
            for shard in described
                .stream_description
                .map(|d| d.shards.unwrap_or_default())
                .unwrap_or_default()
            {
                let Some(id) = shard.shard_id else { continue };
                if iterators.contains_key(&id) {
                    continue;
                }
                let iterator = streams
                    .get_shard_iterator()
                    .stream_arn(&arn)
                    .shard_id(&id)
                    .shard_iterator_type(ShardIteratorType::TrimHorizon)
                    .send()
                    .await
                    .ok()
                    .and_then(|o| o.shard_iterator);
                if iterator.is_some() {
                    iterators.insert(id, iterator);
                }
            }
            for (shard, iterator) in iterators.iter_mut() {
                let Some(current) = iterator.clone() else { continue };
                let Ok(out) = streams.get_records().shard_iterator(&current).limit(100).send().await else {
                    continue;
                };
                let batch: Vec<Value> = out
                    .records
                    .unwrap_or_default()
                    .into_iter()
                    .map(pipe_record)
                    .filter(passes_filter)
                    .collect();
                let next = out.next_shard_iterator;
                for chunk in batch.chunks(BATCH_SIZE) {
                    deliver(&enrich, chunk, &file, shard, rule.as_ref()).await;
                }
                *iterator = next;
            }
        }
    });
}

/// One batch through the enrichment, retried, then dead-lettered.
async fn deliver<F, Fut>(
    enrich: &F,
    batch: &[Value],
    file: &Path,
    shard: &str,
    rule: Option<&(aws_sdk_sqs::Client, String)>,
) where
    F: Fn(Vec<Value>) -> Fut,
    Fut: Future<Output = Result<Vec<Value>, String>>,
{
    for attempt in 1..=MAX_ATTEMPTS {
        match enrich(batch.to_vec()).await {
            Ok(events) => {
                let lines: Vec<Value> = events.iter().map(bus_envelope).collect();
                if let Err(e) = append(file, &lines) {
                    tracing::error!(file = %file.display(), error = %e, "writing events failed");
                }
                if let Some((sqs, queue)) = rule {
                    for line in lines.iter().filter(|l| webhook_rule_takes(l)) {
                        let sent = sqs
                            .send_message()
                            .queue_url(queue)
                            .message_body(line.to_string())
                            .send()
                            .await;
                        if let Err(e) = sent {
                            tracing::error!(error = %e, "the webhook queue refused an event");
                        }
                    }
                }
                return;
            }
            Err(e) => {
                tracing::warn!(%shard, attempt, error = %e, "the enrichment refused a batch");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let dlq = dead_letter_file(file);
    tracing::error!(%shard, dlq = %dlq.display(), "batch dead-lettered after {MAX_ATTEMPTS} attempts");
    let _ = append(&dlq, &[json!({"shard": shard, "records": batch})]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_keeps_operation_changes_only() {
        let op = json!({"eventName": "MODIFY", "dynamodb": {"Keys": {"pk": {"S": "OP#op_1"}}}});
        let ledger = json!({"eventName": "MODIFY", "dynamodb": {"Keys": {"pk": {"S": "TENANT#t"}}}});
        let insert = json!({"eventName": "INSERT", "dynamodb": {"Keys": {"pk": {"S": "OP#op_1"}}}});
        assert!(passes_filter(&op));
        assert!(!passes_filter(&ledger));
        assert!(!passes_filter(&insert));
    }

    #[test]
    fn the_filter_is_the_templates() {
        let template: serde_yaml::Value =
            serde_yaml::from_str(include_str!("../../infra/template.yaml")).expect("the template is YAML");
        let pattern = template["Resources"]["EventsPipe"]["Properties"]["SourceParameters"]["FilterCriteria"]
            ["Filters"][0]["Pattern"]
            .as_str()
            .expect("a filter pattern");
        let pattern: Value = serde_json::from_str(pattern).unwrap();
        assert_eq!(pattern["eventName"], json!(["MODIFY"]));
        assert_eq!(pattern["dynamodb"]["Keys"]["pk"]["S"], json!([{"prefix": "OP#"}]));
        let source = &template["Resources"]["EventsPipe"]["Properties"]["SourceParameters"]["DynamoDBStreamParameters"];
        assert_eq!(source["BatchSize"].as_u64(), Some(BATCH_SIZE as u64));
        assert_eq!(source["MaximumRetryAttempts"].as_u64(), Some(u64::from(MAX_ATTEMPTS)));
    }

    #[test]
    fn the_webhook_rule_is_the_templates() {
        let template: serde_yaml::Value =
            serde_yaml::from_str(include_str!("../../infra/template.yaml")).expect("the template is YAML");
        let pattern = &template["Resources"]["WebhookRule"]["Properties"]["EventPattern"];
        let pattern: Value = serde_json::to_value(pattern).expect("a pattern");
        assert_eq!(
            pattern,
            json!({"source": ["genace.operations"], "detail": {"webhooks": [true]}})
        );
        let event = |detail: Value| bus_envelope(&detail);
        let marked = json!({"type": "operation.accepted", "time": "t", "webhooks": true});
        assert!(webhook_rule_takes(&event(marked.clone())));
        assert!(!webhook_rule_takes(&event(
            json!({"type": "operation.accepted", "time": "t"})
        )));
        let mut other = event(marked);
        other["source"] = json!("someone.else");
        assert!(!webhook_rule_takes(&other));
    }

    #[test]
    fn the_envelope_is_what_the_target_parameters_make() {
        let event = json!({"type": "operation.accepted", "time": "2026-12-01T10:00:00Z", "operation_id": "op_1"});
        let e = bus_envelope(&event);
        assert_eq!(e["source"], "genace.operations");
        assert_eq!(e["detail-type"], "operation.accepted");
        assert_eq!(e["time"], "2026-12-01T10:00:00Z");
        assert_eq!(e["detail"], event);
    }
}
