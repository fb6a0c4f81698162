//! The DynamoDB store and provisioning, against the local AWS endpoint.

use chrono::{Duration, Utc};
use serde_json::json;
use shared::aws;
use shared::domain::{Intent, TenantId};
use shared::machine::{self, Policy};
use shared::provision::{self, DUE_INDEX};
use shared::record::{OperationRecord, Phase};
use shared::store::{Applied, Created, OperationStore, StoreError};
use shared::testkit::LocalAws;

fn record(key: &str, prompt: &str) -> OperationRecord {
    let intent = Intent::parse(
        &json!({"operation_key": key, "media_type": "video",
                "specification": {"model": "m", "prompt": prompt}}),
        None,
    )
    .unwrap();
    OperationRecord::new_intent(
        &TenantId::parse("tenant-a").unwrap(),
        &intent,
        None,
        Utc::now(),
        Duration::seconds(60),
    )
}

#[tokio::test]
async fn create_then_duplicate_returns_the_stored_record_in_one_request() {
    let env = LocalAws::fresh().await;
    let (store, counter) = env.counted_store();
    let rec = record("k1", "p");
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    let before = counter.get();
    let dup = record("k1", "changed");
    match store.create(&dup, Utc::now()).await.unwrap() {
        Created::Existing(existing) => assert_eq!(*existing, rec),
        other => panic!("expected the existing record, got {other:?}"),
    }
    assert_eq!(counter.get() - before, 1, "a duplicate costs exactly one request");
    assert_eq!(store.get(&rec.operation_id, Utc::now()).await.unwrap(), Some(rec));
}

#[tokio::test]
async fn a_retried_create_that_already_landed_is_new_not_a_replay() {
    let env = LocalAws::fresh().await;
    let store = env.store();
    let rec = record("k-retry", "p");
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    // The same put again, as the SDK re-sends it after a timed-out attempt.
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    // Another request for the same intent is a different record: a replay.
    let again = record("k-retry", "p");
    assert!(matches!(
        store.create(&again, Utc::now()).await.unwrap(),
        Created::Existing(_)
    ));
}

#[tokio::test]
async fn expired_records_are_absent_and_can_be_replaced() {
    let env = LocalAws::fresh().await;
    let store = env.store();
    let mut rec = record("k2", "p");
    rec.expires_at = Some(Utc::now().timestamp() - 10);
    store.create(&rec, Utc::now()).await.unwrap();
    assert_eq!(store.get(&rec.operation_id, Utc::now()).await.unwrap(), None);
    let fresh = record("k2", "other");
    assert_eq!(store.create(&fresh, Utc::now()).await.unwrap(), Created::New);
    assert_eq!(store.get(&fresh.operation_id, Utc::now()).await.unwrap(), Some(fresh));
}

#[tokio::test]
async fn transitions_are_conditional_on_the_version_read() {
    let env = LocalAws::fresh().await;
    let (store, counter) = env.counted_store();
    let rec = record("k3", "p");
    store.create(&rec, Utc::now()).await.unwrap();
    let claimed = machine::claim_dispatch(&rec, "tok", Utc::now(), &Policy::default()).unwrap();
    assert_eq!(store.apply(&rec, &claimed).await.unwrap(), Applied::Written);
    let stored = store.get(&rec.operation_id, Utc::now()).await.unwrap().unwrap();
    assert_eq!(stored, claimed);

    // A second claimant decided on the stale version: refused, and told why.
    let rival = machine::claim_dispatch(&rec, "rival", Utc::now(), &Policy::default()).unwrap();
    match store.apply(&rec, &rival).await {
        Err(StoreError::Conflict(Some(current))) => {
            assert_eq!(current.phase, Phase::Submitting);
            assert_eq!(current.claim.unwrap().token, "tok");
        }
        other => panic!("expected a conflict with the current record, got {other:?}"),
    }

    // Removed attributes are removed: `due_at` disappears when uncertain.
    let uncertain = machine::mark_uncertain(&claimed, "tok", "timeout", Utc::now()).unwrap();
    assert_eq!(uncertain.due_at, None);
    store.apply(&claimed, &uncertain).await.unwrap();
    assert_eq!(
        store.get(&rec.operation_id, Utc::now()).await.unwrap(),
        Some(uncertain.clone())
    );

    let before = counter.get();
    assert_eq!(store.apply(&uncertain, &uncertain).await.unwrap(), Applied::Unchanged);
    assert_eq!(counter.get(), before, "no write when nothing changed");
}

#[tokio::test]
async fn fifty_concurrent_claims_have_one_winner() {
    let env = LocalAws::fresh().await;
    let store = env.store();
    let rec = record("k4", "p");
    store.create(&rec, Utc::now()).await.unwrap();
    let attempts = (0..50).map(|i| {
        let store = store.clone();
        let rec = rec.clone();
        async move {
            let next = machine::claim_dispatch(&rec, &format!("tok-{i}"), Utc::now(), &Policy::default()).unwrap();
            store.apply(&rec, &next).await
        }
    });
    let results = futures::future::join_all(attempts).await;
    let winners = results.iter().filter(|r| matches!(r, Ok(Applied::Written))).count();
    let losers = results
        .iter()
        .filter(|r| matches!(r, Err(StoreError::Conflict(Some(_)))))
        .count();
    assert_eq!((winners, losers), (1, 49));
}

#[tokio::test]
async fn provisioning_creates_the_index_ttl_and_dead_letter_queues_idempotently() {
    let env = LocalAws::fresh().await;
    let (ddb, sqs, s3) = (aws::dynamodb(&env.sdk), aws::sqs(&env.sdk), aws::s3(&env.sdk));
    // Running it again changes nothing and fails nothing.
    let again = provision::ensure_all(&env.sdk, &env.names).await.unwrap();
    assert_eq!(again, env.queues);

    let table = ddb
        .describe_table()
        .table_name(&env.names.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let gsi = &table.global_secondary_indexes()[0];
    assert_eq!(gsi.index_name(), Some(DUE_INDEX));
    let keys: Vec<_> = gsi.key_schema().iter().map(|k| k.attribute_name()).collect();
    assert_eq!(keys, ["due_pk", "due_at"]);
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&env.names.table)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_at"));

    for url in [
        &env.queues.dispatch,
        &env.queues.poll,
        &env.queues.deliver,
        &env.queues.recovery,
    ] {
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap();
        let policy: serde_json::Value =
            serde_json::from_str(&attrs[&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy]).unwrap();
        assert!(
            policy["deadLetterTargetArn"].as_str().unwrap().ends_with("-dlq"),
            "{url}: {policy}"
        );
        // The recovery queue holds job ids: it outlasts a long table outage.
        let receives = if url == &env.queues.recovery {
            provision::RECOVERY_MAX_RECEIVE_COUNT
        } else {
            provision::MAX_RECEIVE_COUNT
        };
        assert_eq!(
            policy["maxReceiveCount"]
                .as_u64()
                .or_else(|| policy["maxReceiveCount"].as_str()?.parse().ok()),
            Some(receives as u64),
            "{url}"
        );
        assert_eq!(
            attrs[&aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod],
            "1209600",
            "{url}: kept 14 days"
        );
    }
    s3.head_bucket().bucket(&env.names.bucket).send().await.unwrap();
}

#[tokio::test]
async fn the_due_index_is_sparse() {
    let env = LocalAws::fresh().await;
    let store = env.store();
    let due = record("due", "p");
    store.create(&due, Utc::now()).await.unwrap();
    let mut settled = record("not-due", "p");
    settled.due_at = None;
    store.create(&settled, Utc::now()).await.unwrap();
    let ddb = aws::dynamodb(&env.sdk);
    let mut found = Vec::new();
    for shard in 0..shared::record::DUE_SHARDS {
        let out = ddb
            .query()
            .table_name(&env.names.table)
            .index_name(DUE_INDEX)
            .key_condition_expression("due_pk = :p")
            .expression_attribute_values(":p", aws_sdk_dynamodb::types::AttributeValue::S(format!("DUE#{shard}")))
            .send()
            .await
            .unwrap();
        found.extend(out.items.unwrap_or_default());
    }
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["operation_id"].as_s().unwrap(), due.operation_id.as_str());
}

/// A DynamoDB endpoint that accepts connections and never answers: every
/// request must still end, in an error, within the client's budget.
#[tokio::test]
async fn a_hung_table_endpoint_fails_within_the_sdk_budget_instead_of_hanging() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    // The client is configured exactly as `aws::load` configures it, pointed at the hung endpoint.
    let sdk = aws::load().await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .endpoint_url(format!("http://{addr}"))
        .build();
    let store = shared::store::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(conf), "hung");
    let rec = record("k-hung", "p");
    let outcome = tokio::time::timeout(
        aws::SMALL_REQUESTS.operation + std::time::Duration::from_secs(10),
        store.get(&rec.operation_id, Utc::now()),
    )
    .await
    .expect("the request ended on its own timeout");
    assert!(
        matches!(&outcome, Err(StoreError::Service(e)) if e.contains("timed out")),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_tenants_case_listing_never_includes_a_tenant_whose_name_extends_it() {
    let env = LocalAws::fresh().await;
    let store = env.store();
    let now = Utc::now();
    let mut ids = Vec::new();
    for tenant in ["acme", "acme#x", "acme%23x"] {
        let intent = Intent::parse(
            &json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
            None,
        )
        .unwrap();
        let rec = OperationRecord::new_intent(
            &TenantId::parse(tenant).unwrap(),
            &intent,
            None,
            now,
            Duration::seconds(60),
        );
        store.create(&rec, now).await.unwrap();
        let claimed = machine::claim_dispatch(&rec, "tok", now, &Policy::default()).unwrap();
        store.apply(&rec, &claimed).await.unwrap();
        let uncertain = machine::mark_uncertain(&claimed, "tok", "timed out", now).unwrap();
        store.apply(&claimed, &uncertain).await.unwrap();
        ids.push((tenant, uncertain.operation_id));
    }
    for (tenant, id) in &ids {
        let page = store
            .open_cases(Some(&TenantId::parse(tenant).unwrap()), 10, None)
            .await
            .unwrap();
        let listed: Vec<_> = page.records.iter().map(|r| r.operation_id.clone()).collect();
        assert_eq!(listed, vec![id.clone()], "{tenant}");
    }
    assert_eq!(store.open_cases(None, 10, None).await.unwrap().records.len(), 3);
}
