//! One contract for every `OperationStore`: each assertion below runs
//! against the in-memory store and against the DynamoDB store on the local
//! endpoint (moto over HTTP, through the real SDK), so the two cannot drift.
//! The DynamoDB-only properties (request counts, provisioning, timeouts)
//! stay in `store.rs`.

use std::collections::BTreeSet;

use chrono::Utc;
use genace_core::domain::TenantId;
use genace_core::machine;
use genace_core::machine::Policy;
use genace_core::record::DUE_SHARDS;
use genace_core::record::OperationRecord;
use genace_core::record::Phase;
use genace_stages::table::Applied;
use genace_stages::table::Created;
use genace_stages::table::OperationStore;
use genace_stages::table::StoreError;

use genace_aws::testkit::{claimed, intent_record as record_for, uncertain};

fn record(key: &str, prompt: &str) -> OperationRecord {
    record_for("tenant-a", key, prompt)
}

/// A record with an open case (dispatch timed out: `uncertain`).
async fn with_case<S: OperationStore>(store: &S, tenant: &str, key: &str) -> OperationRecord {
    let now = Utc::now();
    let rec = record_for(tenant, key, "p");
    store.create(&rec, now).await.unwrap();
    let claimed = claimed(&rec, "tok");
    store.apply(&rec, &claimed).await.unwrap();
    let uncertain = uncertain(&claimed, "tok", "timed out");
    store.apply(&claimed, &uncertain).await.unwrap();
    uncertain
}

async fn a_duplicate_create_returns_the_stored_record<S: OperationStore>(store: S) {
    let rec = record("k1", "p");
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    let dup = record("k1", "changed");
    match store.create(&dup, Utc::now()).await.unwrap() {
        Created::Existing(existing) => assert_eq!(*existing, rec),
        other => panic!("expected the existing record, got {other:?}"),
    }
    assert_eq!(store.get(&rec.operation_id, Utc::now()).await.unwrap(), Some(rec));
}

async fn a_retried_create_that_landed_is_new<S: OperationStore>(store: S) {
    let rec = record("k-retry", "p");
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    assert_eq!(store.create(&rec, Utc::now()).await.unwrap(), Created::New);
    let again = record("k-retry", "p");
    assert!(matches!(
        store.create(&again, Utc::now()).await.unwrap(),
        Created::Existing(_)
    ));
}

async fn expired_records_are_absent_and_replaceable<S: OperationStore>(store: S) {
    let mut rec = record("k2", "p");
    rec.expires_at = Some(Utc::now().timestamp() - 10);
    store.create(&rec, Utc::now()).await.unwrap();
    assert_eq!(store.get(&rec.operation_id, Utc::now()).await.unwrap(), None);
    let fresh = record("k2", "other");
    assert_eq!(store.create(&fresh, Utc::now()).await.unwrap(), Created::New);
    assert_eq!(store.get(&fresh.operation_id, Utc::now()).await.unwrap(), Some(fresh));
}

async fn writes_are_conditional_on_the_version_read<S: OperationStore>(store: S) {
    let rec = record("k3", "p");
    assert_eq!(store.get(&rec.operation_id, Utc::now()).await.unwrap(), None);
    let claimed = claimed(&rec, "tok");
    assert!(
        matches!(store.apply(&rec, &claimed).await, Err(StoreError::Conflict(None))),
        "an update of a missing record loses, with nothing to show"
    );
    store.create(&rec, Utc::now()).await.unwrap();
    assert_eq!(store.apply(&rec, &claimed).await.unwrap(), Applied::Written);
    assert_eq!(
        store.get(&rec.operation_id, Utc::now()).await.unwrap(),
        Some(claimed.clone())
    );

    // A rival decided on the stale version: refused, with the record as it now is.
    let rival = genace_aws::testkit::claimed(&rec, "rival");
    match store.apply(&rec, &rival).await {
        Err(StoreError::Conflict(Some(current))) => assert_eq!(*current, claimed),
        other => panic!("expected a conflict with the current record, got {other:?}"),
    }

    // Removed attributes are removed: `due_at` disappears when uncertain.
    let uncertain = uncertain(&claimed, "tok", "timeout");
    assert_eq!(uncertain.due_at, None);
    store.apply(&claimed, &uncertain).await.unwrap();
    assert_eq!(
        store.get(&rec.operation_id, Utc::now()).await.unwrap(),
        Some(uncertain.clone())
    );
    assert_eq!(store.apply(&uncertain, &uncertain).await.unwrap(), Applied::Unchanged);
}

async fn fifty_concurrent_claims_have_one_winner<S: OperationStore + Clone + 'static>(store: S) {
    let rec = record("k4", "p");
    store.create(&rec, Utc::now()).await.unwrap();
    let attempts = (0..50).map(|i| {
        let (store, rec) = (store.clone(), rec.clone());
        async move {
            let next = machine::transition(
                &rec,
                machine::Event::ClaimDispatch {
                    token: &format!("tok-{i}"),
                },
                Utc::now(),
                &Policy::default(),
            )
            .unwrap();
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

async fn the_due_index_is_sparse_sharded_ordered_and_paged<S: OperationStore>(store: S) {
    let now = Utc::now().timestamp_millis();
    let mut due = Vec::new();
    for i in 0..24 {
        let mut rec = record(&format!("due-{i}"), "p");
        rec.due_at = Some(now - 1000 * (i % 5) as i64);
        store.create(&rec, Utc::now()).await.unwrap();
        due.push(rec);
    }
    let mut settled = record("not-due", "p");
    settled.due_at = None;
    store.create(&settled, Utc::now()).await.unwrap();
    let mut later = record("later", "p");
    later.due_at = Some(now + 60_000);
    store.create(&later, Utc::now()).await.unwrap();

    let mut found = Vec::new();
    for shard in 0..DUE_SHARDS {
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = store.due_page(shard, now, 2, cursor).await.unwrap();
            assert!(page.items.len() <= 2);
            let times: Vec<i64> = page.items.iter().map(|i| i.due_at).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "oldest first: {times:?}");
            for item in &page.items {
                let rec = due.iter().find(|r| r.operation_id == item.operation_id).unwrap();
                assert_eq!(rec.due_pk, format!("DUE#{shard}"));
                assert_eq!((item.phase, item.due_at), (Phase::Prepared, rec.due_at.unwrap()));
            }
            found.extend(page.items.into_iter().map(|i| i.operation_id));
            pages += 1;
            assert!(pages < 30, "paging ends");
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    let unique: BTreeSet<String> = found.iter().map(|id| id.as_str().to_owned()).collect();
    assert_eq!(found.len(), unique.len(), "no item twice across pages");
    let expected: BTreeSet<String> = due.iter().map(|r| r.operation_id.as_str().to_owned()).collect();
    assert_eq!(
        unique, expected,
        "every due record once; neither the settled nor the later one"
    );
}

async fn case_listing_is_per_tenant_and_paged<S: OperationStore>(store: S) {
    let mut ids = Vec::new();
    for tenant in ["acme", "acme#x", "acme%23x"] {
        ids.push((tenant, with_case(&store, tenant, "k").await.operation_id));
    }
    for i in 0..3 {
        with_case(&store, "acme", &format!("more-{i}")).await;
    }
    // A record without a case is never listed.
    store
        .create(&record_for("acme", "quiet", "p"), Utc::now())
        .await
        .unwrap();
    for (tenant, id) in &ids[1..] {
        let page = store
            .open_cases(Some(&TenantId::parse(tenant).unwrap()), 10, None)
            .await
            .unwrap();
        let listed: Vec<_> = page.records.iter().map(|r| r.operation_id.clone()).collect();
        assert_eq!(listed, vec![id.clone()], "{tenant}");
    }
    let acme = TenantId::parse("acme").unwrap();
    let mut cursor: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        let page = store.open_cases(Some(&acme), 3, cursor.as_deref()).await.unwrap();
        assert!(page.records.len() <= 3);
        listed.extend(
            page.records
                .into_iter()
                .map(|r| (r.tenant_id.as_str().to_owned(), r.operation_id)),
        );
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert!(listed.iter().all(|(t, _)| t == "acme"));
    assert!(listed.iter().any(|(_, id)| *id == ids[0].1));
    assert_eq!(store.open_cases(None, 50, None).await.unwrap().records.len(), 6);
    assert!(matches!(
        store.open_cases(None, 10, Some("not a cursor")).await,
        Err(StoreError::Cursor)
    ));
}

async fn the_job_index_finds_the_holder<S: OperationStore>(store: S) {
    let now = Utc::now();
    let rec = record("k-job", "p");
    store.create(&rec, now).await.unwrap();
    let claimed = claimed(&rec, "tok");
    store.apply(&rec, &claimed).await.unwrap();
    let job = machine::AcceptedJob {
        job_id: "job-contract-1".into(),
        state: Some("queued".into()),
        model: None,
        created_at: None,
        held_credits: None,
    };
    let accepted = machine::transition(
        &claimed,
        machine::Event::Accepted {
            token: "tok",
            job: &job,
        },
        now,
        &Policy::default(),
    )
    .unwrap();
    store.apply(&claimed, &accepted).await.unwrap();
    store.create(&record("k-other", "p"), now).await.unwrap();
    assert_eq!(
        store.holders_of_remote_job("job-contract-1").await.unwrap(),
        vec![rec.operation_id]
    );
    assert!(store.holders_of_remote_job("job-unknown").await.unwrap().is_empty());
}

genace_aws::contract_tests!(
    memory => genace_stages::memory::MemoryStore::default(),
    dynamodb => |env| env.store();
    a_duplicate_create_returns_the_stored_record,
    a_retried_create_that_landed_is_new,
    expired_records_are_absent_and_replaceable,
    writes_are_conditional_on_the_version_read,
    fifty_concurrent_claims_have_one_winner,
    the_due_index_is_sparse_sharded_ordered_and_paged,
    case_listing_is_per_tenant_and_paged,
    the_job_index_finds_the_holder,
);
