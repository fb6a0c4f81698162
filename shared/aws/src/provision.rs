//! Creates the stack's AWS resources on a local endpoint. Every step is
//! idempotent: running it again against existing resources changes nothing.
//! Deployed stacks get the same resources from the SAM template.

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;

use genace_stages::config::{QueueUrls, ResourceNames};

use crate::schema;

/// Receives before a message moves to its dead-letter queue.
pub const MAX_RECEIVE_COUNT: u32 = 5;
/// Receives before a recovery message moves to its DLQ: with the 60 s
/// visibility of the local queues, about 17 hours of a failing table (the
/// deployed queue: 1000 x 180 s). Its messages are job ids; they wait.
pub const RECOVERY_MAX_RECEIVE_COUNT: u32 = 1000;

#[derive(Debug, thiserror::Error)]
#[error("provisioning {resource} failed: {detail}")]
pub struct ProvisionError {
    pub resource: String,
    pub detail: String,
}

fn fail(resource: &str, e: impl std::fmt::Display) -> ProvisionError {
    ProvisionError {
        resource: resource.to_owned(),
        detail: e.to_string(),
    }
}

/// Creates the table, the six queues with their DLQs, and the bucket on the
/// endpoint of `sdk`. Returns the queue URLs.
pub async fn ensure_all(sdk: &aws_config::SdkConfig, names: &ResourceNames) -> Result<QueueUrls, ProvisionError> {
    ensure_table(&crate::clients::dynamodb(sdk), &names.table).await?;
    ensure_bucket(&crate::clients::s3(sdk), &names.bucket).await?;
    ensure_events_seal(&crate::clients::secrets(sdk), &events_seal_name(&names.table)).await?;
    let sqs = crate::clients::sqs(sdk);
    let mut urls = Vec::new();
    for q in names.queues() {
        let receives = if q == names.recovery_queue {
            RECOVERY_MAX_RECEIVE_COUNT
        } else {
            MAX_RECEIVE_COUNT
        };
        urls.push(ensure_queue(&sqs, q, receives).await?);
    }
    let [dispatch, poll, deliver, recovery, webhooks, wake]: [String; 6] =
        urls.try_into().expect("six queues were created");
    // `ensure_queue` made each queue's `<name>-dlq` beside it.
    let webhook_dead_letters = format!("{webhooks}-dlq");
    Ok(QueueUrls {
        dispatch,
        poll,
        deliver,
        recovery,
        webhooks,
        webhook_dead_letters,
        wake,
    })
}

/// The name of a local stack's events seal secret, beside its table (the
/// template generates the deployed one, `EventsSealSecret`).
pub fn events_seal_name(table: &str) -> String {
    format!("genace/events-seal/{table}")
}

/// Creates the events seal secret `name` with a random value unless it
/// exists: the events pipe and the webhook function read it.
async fn ensure_events_seal(client: &aws_sdk_secretsmanager::Client, name: &str) -> Result<(), ProvisionError> {
    if client.describe_secret().secret_id(name).send().await.is_ok() {
        return Ok(());
    }
    let value = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    match client.create_secret().name(name).secret_string(value).send().await {
        Ok(_) => Ok(()),
        // Created by another process meanwhile.
        Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_exists_exception()) => Ok(()),
        Err(e) => Err(fail(name, aws_sdk_secretsmanager::error::DisplayErrorContext(e))),
    }
}

fn key(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .expect("key schema fields are set")
}

fn attr(name: &str, kind: ScalarAttributeType) -> AttributeDefinition {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(kind)
        .build()
        .expect("attribute fields are set")
}

/// The table's secondary indexes, built from [`schema::INDEXES`]
/// (`tests/tests/resources.rs` holds them to the template's).
fn indexes(table: &str) -> Result<Vec<GlobalSecondaryIndex>, ProvisionError> {
    schema::INDEXES
        .iter()
        .map(|index| {
            let (kind, non_key): (ProjectionType, &[&str]) = match index.projection {
                schema::Projection::KeysOnly => (ProjectionType::KeysOnly, &[]),
                schema::Projection::All => (ProjectionType::All, &[]),
                schema::Projection::Include(attributes) => (ProjectionType::Include, attributes),
            };
            let projection = non_key
                .iter()
                .fold(Projection::builder().projection_type(kind), |p, a| {
                    p.non_key_attributes(*a)
                })
                .build();
            let keys = GlobalSecondaryIndex::builder()
                .index_name(index.name)
                .key_schema(key(index.hash, KeyType::Hash));
            index
                .range
                .map_or(keys.clone(), |r| keys.key_schema(key(r, KeyType::Range)))
                .projection(projection)
                .build()
                .map_err(|e| fail(table, e))
        })
        .collect()
}

pub async fn ensure_table(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), ProvisionError> {
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(schema::TABLE_KEY, KeyType::Hash))
        .set_attribute_definitions(Some(
            schema::KEY_ATTRIBUTES
                .iter()
                .map(|(name, kind)| match kind {
                    schema::KeyType::String => attr(name, ScalarAttributeType::S),
                    schema::KeyType::Number => attr(name, ScalarAttributeType::N),
                })
                .collect(),
        ))
        .set_global_secondary_indexes(Some(indexes(table)?))
        // The template's stream: the source of the lifecycle events.
        .stream_specification(
            aws_sdk_dynamodb::types::StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)
                .build()
                .map_err(|e| fail(table, e))?,
        )
        .send()
        .await;
    if let Err(e) = created {
        let exists = e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception());
        if !exists {
            return Err(fail(table, DisplayErrorContext(e)));
        }
    }
    ensure_ttl(client, table).await
}

/// Turns on the TTL on `expires_at`, unless it is on already.
async fn ensure_ttl(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<(), ProvisionError> {
    let ttl_on = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| fail(table, DisplayErrorContext(e)))?
        .time_to_live_description
        .and_then(|d| d.time_to_live_status)
        .is_some_and(|s| s.as_str() == "ENABLED");
    if ttl_on {
        return Ok(());
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name("expires_at")
                .enabled(true)
                .build()
                .map_err(|e| fail(table, e))?,
        )
        .send()
        .await
        .map_err(|e| fail(table, DisplayErrorContext(e)))?;
    Ok(())
}

pub async fn ensure_bucket(client: &aws_sdk_s3::Client, bucket: &str) -> Result<(), ProvisionError> {
    match client.create_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_bucket_already_owned_by_you() || s.is_bucket_already_exists()) =>
        {
            Ok(())
        }
        Err(e) => Err(fail(bucket, DisplayErrorContext(e))),
    }
}

/// Creates `<name>-dlq` and `<name>` with a redrive policy to it.
pub async fn ensure_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    max_receive_count: u32,
) -> Result<String, ProvisionError> {
    let dlq_name = format!("{name}-dlq");
    let dlq_url = client
        .create_queue()
        .queue_name(&dlq_name)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .map_err(|e| fail(&dlq_name, DisplayErrorContext(e)))?
        .queue_url
        .ok_or_else(|| fail(&dlq_name, "no queue URL returned"))?;
    let dlq_arn = client
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| fail(&dlq_name, DisplayErrorContext(e)))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or_else(|| fail(&dlq_name, "no queue ARN returned"))?;
    let url = client
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .map_err(|e| fail(name, DisplayErrorContext(e)))?
        .queue_url
        .ok_or_else(|| fail(name, "no queue URL returned"))?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": max_receive_count,
    });
    client
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await
        .map_err(|e| fail(name, DisplayErrorContext(e)))?;
    Ok(url)
}
