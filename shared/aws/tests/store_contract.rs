//! One contract for every `OperationStore`: each assertion below runs
//! against the in-memory store and against the DynamoDB store on the local
//! endpoint (moto over HTTP, through the real SDK), so the two cannot drift.
//! The DynamoDB-only properties (request counts, provisioning, timeouts)
//! stay in `store.rs`.

use std::collections::BTreeSet;

use chrono::Utc;
use genace_core::domain::TenantId;
use genace_core::ledger;
use genace_core::machine;
use genace_core::machine::Policy;
use genace_core::record::DUE_SHARDS;
use genace_core::record::Phase;
use genace_core::record::{CaseReason, OperationRecord};
use genace_stages::ports::list::ListFilter;
use genace_stages::ports::table::Applied;
use genace_stages::ports::table::CaseFilter;
use genace_stages::ports::table::Created;
use genace_stages::ports::table::OperationStore;
use genace_stages::ports::table::StoreError;

use genace_localaws::{
    accepted_with, claimed, claims_admitted, intent_record as record_for, release_all, rendered, running_on, uncertain,
};

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
    rec.expires_at_seconds = Some(Utc::now().timestamp() - 10);
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
    let rival = genace_localaws::claimed(&rec, "rival");
    match store.apply(&rec, &rival).await {
        Err(StoreError::Conflict(Some(current))) => assert_eq!(*current, claimed),
        other => panic!("expected a conflict with the current record, got {other:?}"),
    }

    // Removed attributes are removed: `due_at` disappears when uncertain.
    let uncertain = uncertain(&claimed, "tok", "timeout");
    assert_eq!(uncertain.due_at_ms, None);
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
                machine::Input::ClaimDispatch {
                    token: &format!("tok-{i}"),
                    shard: 0,
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
        rec.due_at_ms = Some(now - 1000 * (i % 5) as i64);
        store.create(&rec, Utc::now()).await.unwrap();
        due.push(rec);
    }
    let mut settled = record("not-due", "p");
    settled.due_at_ms = None;
    store.create(&settled, Utc::now()).await.unwrap();
    let mut later = record("later", "p");
    later.due_at_ms = Some(now + 60_000);
    store.create(&later, Utc::now()).await.unwrap();

    let mut found = Vec::new();
    for shard in 0..DUE_SHARDS {
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = store.due_page(shard, now, 2, cursor).await.unwrap();
            assert!(page.items.len() <= 2);
            let times: Vec<i64> = page.items.iter().map(|i| i.due_at_ms).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "oldest first: {times:?}");
            for item in &page.items {
                let rec = due.iter().find(|r| r.operation_id == item.operation_id).unwrap();
                assert_eq!(rec.due_pk, format!("DUE#{shard}"));
                assert_eq!((item.phase, item.due_at_ms), (Phase::Prepared, rec.due_at_ms.unwrap()));
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
    for tenant in ["acme", "acme.x", "acme%23x"] {
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
            .open_cases(Some(&TenantId::parse(tenant).unwrap()), CaseFilter::default(), 10, None)
            .await
            .unwrap();
        let listed: Vec<_> = page.records.iter().map(|r| r.operation_id.clone()).collect();
        assert_eq!(listed, vec![id.clone()], "{tenant}");
    }
    let acme = TenantId::parse("acme").unwrap();
    let mut cursor: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        let page = store
            .open_cases(Some(&acme), CaseFilter::default(), 3, cursor.as_deref())
            .await
            .unwrap();
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
    assert_eq!(
        store
            .open_cases(None, CaseFilter::default(), 50, None)
            .await
            .unwrap()
            .records
            .len(),
        6
    );
    assert!(matches!(
        store
            .open_cases(None, CaseFilter::default(), 10, Some("not a cursor"))
            .await,
        Err(StoreError::Cursor)
    ));
}

/// A cursor that is not a position of the case indexes (garbled, or a
/// well-formed key of another shape: another partition, another index's
/// sort key, extra attributes) is refused as a cursor, never sent to the
/// index as a start key that the store would answer with a failure.
async fn forged_case_cursors_are_refused<S: OperationStore>(store: S) {
    use base64::Engine;
    let acme = TenantId::parse("acme").unwrap();
    for i in 0..3 {
        with_case(&store, "acme", &format!("forged-{i}")).await;
    }
    let first = store
        .open_cases(Some(&acme), CaseFilter::default(), 2, None)
        .await
        .unwrap();
    let good = first.next.expect("a second page");
    let page = store
        .open_cases(Some(&acme), CaseFilter::default(), 2, Some(&good))
        .await
        .unwrap();
    assert_eq!(page.records.len(), 1);
    let forge = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let op = format!("OP#op_{}", "0".repeat(32));
    let forged = [
        forge(serde_json::json!({"pk": ["S", "x"]})),
        forge(serde_json::json!({"pk": ["S", op], "case_pk": ["S", "OTHER"], "case_sk": ["S", "acme#x"]})),
        forge(serde_json::json!({"pk": ["S", "WEBHOOK#acme"], "case_pk": ["S", "CASE"], "case_sk": ["S", "acme#x"]})),
        forge(serde_json::json!({"pk": ["S", op], "case_pk": ["S", "CASE"], "case_sk": ["N", "1"]})),
        forge(serde_json::json!({"pk": ["S", op], "case_pk": ["S", "CASE"], "case_sk": ["S", "a"], "x": ["S", "y"]})),
        "%%%".to_owned(),
    ];
    for cursor in &forged {
        assert!(
            matches!(
                store
                    .open_cases(Some(&acme), CaseFilter::default(), 2, Some(cursor))
                    .await,
                Err(StoreError::Cursor)
            ),
            "{cursor}"
        );
        assert!(
            matches!(
                store.open_cases_by_age(CaseFilter::default(), 2, Some(cursor)).await,
                Err(StoreError::Cursor)
            ),
            "{cursor}"
        );
    }
}

/// A case of another reason: Genace refused our account (402), so the
/// operation is held with an `account_problem` case.
async fn with_account_case<S: OperationStore>(store: &S, tenant: &str, key: &str) -> OperationRecord {
    let rec = record_for(tenant, key, "p");
    store.create(&rec, Utc::now()).await.unwrap();
    let claimed = claimed(&rec, "tok");
    store.apply(&rec, &claimed).await.unwrap();
    let error = genace_core::record::RemoteError {
        kind: "http_402".into(),
        status: Some(402),
        detail: "payment required".into(),
    };
    let event = machine::Input::AccountRefused {
        token: "tok",
        error: &error,
    };
    let held = machine::transition(&claimed, event, Utc::now(), &Policy::default()).unwrap();
    store.apply(&claimed, &held).await.unwrap();
    held
}

/// Eight cases of three tenants and two reasons, in the order they opened:
/// `unknown_submit_outcome` for zeta, acme, mid, acme, zeta, with acme's
/// `account_problem` cases second, fifth and eighth.
async fn mixed_cases<S: OperationStore>(store: &S) -> Vec<genace_core::domain::OperationId> {
    let mut opened = Vec::new();
    // Apart by more than the case index's millisecond, so the order is the
    // same on both indexes.
    let tick = || tokio::time::sleep(std::time::Duration::from_millis(3));
    for (i, tenant) in ["zeta", "acme", "mid", "acme", "zeta"].iter().enumerate() {
        opened.push(with_case(store, tenant, &format!("age-{i}")).await.operation_id);
        tick().await;
        if i % 2 == 0 {
            let held = with_account_case(store, "acme", &format!("held-{i}")).await;
            opened.push(held.operation_id);
            tick().await;
        }
    }
    opened
}

/// Every tenant's cases, in the order they opened, a page at a time; one
/// reason's alone with full pages; those open at least so long, on both
/// indexes.
async fn every_tenants_cases_are_listed_oldest_first_and_filtered<S: OperationStore>(store: S) {
    let opened = mixed_cases(&store).await;
    let mut cursor: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        let page = store
            .open_cases_by_age(CaseFilter::default(), 3, cursor.as_deref())
            .await
            .unwrap();
        assert!(page.records.len() <= 3);
        listed.extend(page.records.into_iter().map(|r| r.operation_id));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(listed, opened, "oldest first across tenants");

    let held = CaseFilter {
        reason: Some(CaseReason::AccountProblem),
        opened_before: None,
    };
    let first = store.open_cases_by_age(held, 2, None).await.unwrap();
    let ids: Vec<_> = first.records.iter().map(|r| r.operation_id.clone()).collect();
    assert_eq!(ids, [opened[1].clone(), opened[4].clone()], "a full page of one reason");
    let rest = store.open_cases_by_age(held, 2, first.next.as_deref()).await.unwrap();
    let ids: Vec<_> = rest.records.iter().map(|r| r.operation_id.clone()).collect();
    assert_eq!(ids, [opened[7].clone()]);
    assert!(rest.next.is_none());
    assert!(matches!(
        store
            .open_cases_by_age(CaseFilter::default(), 10, Some("not a cursor"))
            .await,
        Err(StoreError::Cursor)
    ));

    // Open at least since the fourth opened: the first three, on both
    // indexes, and of one reason on the tenant's.
    let fourth = store.get(&opened[3], Utc::now()).await.unwrap().unwrap();
    let older = CaseFilter {
        reason: None,
        opened_before: fourth.case.map(|c| c.opened_at),
    };
    let page = store.open_cases_by_age(older, 10, None).await.unwrap();
    let ids: Vec<_> = page.records.iter().map(|r| r.operation_id.clone()).collect();
    assert_eq!(ids, opened[..3]);
    let acme = TenantId::parse("acme").unwrap();
    let page = store.open_cases(Some(&acme), older, 10, None).await.unwrap();
    let ids: Vec<_> = page.records.iter().map(|r| r.operation_id.clone()).collect();
    assert_eq!(ids, [opened[1].clone(), opened[2].clone()]);
    let held_and_older = CaseFilter {
        reason: held.reason,
        ..older
    };
    let page = store.open_cases(Some(&acme), held_and_older, 10, None).await.unwrap();
    let ids: Vec<_> = page.records.iter().map(|r| r.operation_id.clone()).collect();
    assert_eq!(ids, [opened[1].clone()]);
}

/// Counted by reason, over every tenant or one, from the index's keys and
/// reasons alone; a case that closes leaves the list and the counts.
async fn open_cases_are_counted_by_reason_and_a_closed_one_leaves<S: OperationStore>(store: S) {
    let opened = mixed_cases(&store).await;
    let acme = TenantId::parse("acme").unwrap();
    let counts = store.case_counts(None).await.unwrap();
    let by_reason: Vec<(CaseReason, u64)> = counts.iter().map(|c| (c.reason, c.open)).collect();
    assert_eq!(
        by_reason,
        [(CaseReason::UnknownSubmitOutcome, 5), (CaseReason::AccountProblem, 3)]
    );
    let oldest = store.get(&opened[0], Utc::now()).await.unwrap().unwrap();
    let opened_at = oldest.case.unwrap().opened_at;
    assert!(
        (counts[0].oldest - opened_at).num_milliseconds().abs() < 1,
        "{counts:?}"
    );
    let of_acme: Vec<(CaseReason, u64)> = store
        .case_counts(Some(&acme))
        .await
        .unwrap()
        .iter()
        .map(|c| (c.reason, c.open))
        .collect();
    assert_eq!(
        of_acme,
        [(CaseReason::UnknownSubmitOutcome, 2), (CaseReason::AccountProblem, 3)]
    );

    // An operator confirms nothing was created: the oldest case closes, and
    // is listed and counted no more.
    let rec = store.get(&opened[0], Utc::now()).await.unwrap().unwrap();
    let decision = machine::Decision {
        resolution: &machine::Resolution::ConfirmNotCreated,
        actor: "ops",
        reason: "nothing at Genace",
    };
    let closed = machine::transition(&rec, machine::Input::Resolved(decision), Utc::now(), &Policy::default()).unwrap();
    store.apply(&rec, &closed).await.unwrap();
    let page = store.open_cases_by_age(CaseFilter::default(), 100, None).await.unwrap();
    assert_eq!(page.records.len(), 7);
    assert!(page.records.iter().all(|r| r.operation_id != opened[0]));
    assert_eq!(store.case_counts(None).await.unwrap()[0].open, 4);
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
        machine::Input::Accepted {
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

fn millis_held<S: OperationStore>(store: &S, tenant: &str) -> impl std::future::Future<Output = ledger::Shares> {
    let tenant = TenantId::parse(tenant).unwrap();
    async move { store.ledger(&tenant).await.unwrap().totals }
}

/// The default estimate a video claim reserves, in millicredits.
fn video_reservation() -> genace_core::ledger::Millicredits {
    ledger::millis(Policy::default().credit_estimate.video)
}

#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn the_ledger_follows_every_credit_move<S: OperationStore>(store: S) {
    let now = Utc::now();
    let policy = Policy::default();
    let tenant = "tenant-ledger";
    let a = record_for(tenant, "a", "p");
    store.create(&a, now).await.unwrap();
    assert!(
        millis_held(&store, tenant).await.is_zero(),
        "a new intent commits nothing"
    );
    let a1 = claimed(&a, "tok");
    store.apply(&a, &a1).await.unwrap();
    assert_eq!(millis_held(&store, tenant).await.held, video_reservation());
    // The 202's amount replaces the reservation.
    let a2 = accepted_with(&a1, "job-ledger-a", Some(12.5));
    store.apply(&a1, &a2).await.unwrap();
    assert_eq!(
        millis_held(&store, tenant).await.held,
        genace_core::ledger::Millicredits::new(12_500)
    );
    let a3 = rendered(&a2, "job-ledger-a");
    assert_eq!(a3.phase, Phase::Rendered);
    store.apply(&a2, &a3).await.unwrap();
    let totals = millis_held(&store, tenant).await;
    assert_eq!(
        (totals.held, totals.spent),
        (
            genace_core::ledger::Millicredits::ZERO,
            genace_core::ledger::Millicredits::new(12_500)
        )
    );

    // A 502 naming a job: its refund is pending until an operator settles it.
    let b = record_for(tenant, "b", "p");
    store.create(&b, now).await.unwrap();
    let b1 = claimed(&b, "tok");
    store.apply(&b, &b1).await.unwrap();
    let error = genace_core::record::RemoteError {
        kind: "http_502".into(),
        status: Some(502),
        detail: "provider failed".into(),
    };
    let failed = machine::Input::SubmitFailed {
        token: "tok",
        job_id: "job-ledger-b",
        error: &error,
    };
    let b2 = machine::transition(&b1, failed, now, &policy).unwrap();
    store.apply(&b1, &b2).await.unwrap();
    let totals = millis_held(&store, tenant).await;
    assert_eq!(
        (totals.held, totals.pending_refund, totals.settled),
        (
            genace_core::ledger::Millicredits::ZERO,
            video_reservation(),
            genace_core::ledger::Millicredits::ZERO
        )
    );
    let settle = machine::Input::Resolved(machine::Decision {
        resolution: &machine::Resolution::MarkSettled,
        actor: "ops",
        reason: "refund confirmed",
    });
    let b3 = machine::transition(&b2, settle, now, &policy).unwrap();
    store.apply(&b2, &b3).await.unwrap();
    let totals = millis_held(&store, tenant).await;
    assert_eq!(
        (totals.pending_refund, totals.settled),
        (genace_core::ledger::Millicredits::ZERO, video_reservation())
    );
    // The counters are the sum of the records' shares, and other tenants
    // are untouched.
    let sum = [&a3, &b3]
        .iter()
        .fold(ledger::Shares::default(), |acc, r| acc.plus(&ledger::share(r)).unwrap());
    assert_eq!(totals, sum);
    assert!(millis_held(&store, "tenant-other").await.is_zero());
}

/// Measured before the fix: an operator's abandon of a rendered operation
/// whose outputs were missing took the tenant's `spent` from 12.5 to 0. An
/// abandon moves no credit; a 202's impossible `held_credits` is replaced by
/// the reservation.
async fn an_abandon_keeps_what_genace_charged<S: OperationStore>(store: S) {
    let now = Utc::now();
    let policy = Policy::default();
    let tenant = "tenant-abandon";
    let a = record_for(tenant, "a", "p");
    store.create(&a, now).await.unwrap();
    let a1 = claimed(&a, "tok");
    store.apply(&a, &a1).await.unwrap();
    let a2 = accepted_with(&a1, "job-abandon-a", Some(12.5));
    store.apply(&a1, &a2).await.unwrap();
    let no_outputs = genace_core::remote::JobSnapshot {
        id: Some("job-abandon-a".into()),
        state: "completed".into(),
        status: genace_core::remote::RenderStatus::Succeeded,
        outputs: None,
        outputs_unreadable: None,
        client_reference: None,
        error: None,
    };
    let observed = machine::Input::Observed(genace_core::machine::Look {
        snapshot: &no_outputs,
        next_check: now,
        stalled: None,
        seen: &Default::default(),
    });
    let a3 = machine::transition(&a2, observed, now, &policy).unwrap();
    assert_eq!(
        a3.case.as_ref().map(|c| c.reason),
        Some(genace_core::record::CaseReason::OutputsMissing)
    );
    store.apply(&a2, &a3).await.unwrap();
    assert_eq!(
        millis_held(&store, tenant).await.spent,
        genace_core::ledger::Millicredits::new(12_500)
    );
    let abandon = machine::Input::Resolved(machine::Decision {
        resolution: &machine::Resolution::Abandon,
        actor: "ops",
        reason: "no outputs to deliver",
    });
    let a4 = machine::transition(&a3, abandon, now, &policy).unwrap();
    assert_eq!(a4.phase, Phase::Abandoned);
    store.apply(&a3, &a4).await.unwrap();
    let totals = millis_held(&store, tenant).await;
    assert_eq!(
        (totals.held, totals.spent),
        (
            genace_core::ledger::Millicredits::ZERO,
            genace_core::ledger::Millicredits::new(12_500)
        ),
        "Genace charged it"
    );

    // A negative held_credits is an accepted job, counted at the reservation.
    let b = record_for(tenant, "b", "p");
    store.create(&b, now).await.unwrap();
    let b1 = claimed(&b, "tok");
    store.apply(&b, &b1).await.unwrap();
    let b2 = accepted_with(&b1, "job-abandon-b", Some(-1e9));
    assert_eq!(b2.remote_job_id.as_deref(), Some("job-abandon-b"));
    assert!(b2.held_credits_refused.is_some());
    store.apply(&b1, &b2).await.unwrap();
    let totals = millis_held(&store, tenant).await;
    assert_eq!(totals.held, video_reservation());
    assert!(!totals.any_negative());
    let stored = store.get(&b.operation_id, now).await.unwrap().unwrap();
    assert_eq!(stored, b2, "the evidence is stored");
}

async fn a_claim_past_the_spend_limit_writes_nothing<S: OperationStore>(store: S) {
    let now = Utc::now();
    let tenant = TenantId::parse("tenant-limited").unwrap();
    let room_for_one = video_reservation() + genace_core::ledger::Millicredits::new(video_reservation().get() / 2);
    let set = store.set_spend_limit(&tenant, Some(room_for_one)).await.unwrap();
    assert_eq!(set.spend_limit, Some(room_for_one));
    let a = record_for("tenant-limited", "a", "p");
    let b = record_for("tenant-limited", "b", "p");
    store.create(&a, now).await.unwrap();
    store.create(&b, now).await.unwrap();
    let a1 = claimed(&a, "tok");
    store.apply(&a, &a1).await.unwrap();
    let b1 = claimed(&b, "tok");
    assert!(matches!(store.apply(&b, &b1).await, Err(StoreError::SpendLimit)));
    assert_eq!(store.get(&b.operation_id, now).await.unwrap(), Some(b.clone()));
    assert_eq!(store.ledger(&tenant).await.unwrap().totals.held, video_reservation());
    // Facts are recorded whatever the limit: a 202 holding more than the room.
    let a2 = accepted_with(&a1, "job-limited-a", Some(100.0));
    store.apply(&a1, &a2).await.unwrap();
    assert_eq!(
        store.ledger(&tenant).await.unwrap().totals.held,
        genace_core::ledger::Millicredits::new(100_000)
    );
    // Credits freed (here: the limit raised) let the waiting claim through.
    store
        .set_spend_limit(&tenant, Some(genace_core::ledger::Millicredits::new(200_000)))
        .await
        .unwrap();
    store.apply(&b, &b1).await.unwrap();
    assert_eq!(
        store.ledger(&tenant).await.unwrap().totals.held,
        genace_core::ledger::Millicredits::new(100_000) + video_reservation()
    );
    // No limit, no check.
    store.set_spend_limit(&tenant, None).await.unwrap();
    assert_eq!(store.ledger(&tenant).await.unwrap().spend_limit, None);
    let c = record_for("tenant-limited", "c", "p");
    store.create(&c, now).await.unwrap();
    store.apply(&c, &claimed(&c, "tok")).await.unwrap();
}

/// Creates an intent per (tenant, key) and claims them all at once.
async fn race_claims<S: OperationStore + Clone + 'static>(
    store: &S,
    intents: &[(&str, &str)],
) -> Vec<Result<genace_stages::ports::table::Applied, StoreError>> {
    let mut tasks = Vec::new();
    for (tenant, key) in intents {
        let rec = record_for(tenant, key, "p");
        store.create(&rec, Utc::now()).await.unwrap();
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let next = claimed(&rec, "tok");
            store.apply(&rec, &next).await
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    outcomes
}

async fn two_claims_race_for_room_for_one<S: OperationStore + Clone + 'static>(store: S) {
    let tenant = TenantId::parse("tenant-race").unwrap();
    store
        .set_spend_limit(
            &tenant,
            Some(video_reservation() + genace_core::ledger::Millicredits::new(video_reservation().get() / 2)),
        )
        .await
        .unwrap();
    let outcomes = race_claims(&store, &[("tenant-race", "a"), ("tenant-race", "b")]).await;
    let passed = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o, Err(StoreError::SpendLimit)))
        .count();
    assert_eq!((passed, refused), (1, 1), "{outcomes:?}");
    assert_eq!(store.ledger(&tenant).await.unwrap().totals.held, video_reservation());
}

async fn operators_page_through_every_ledger<S: OperationStore>(store: S) {
    let now = Utc::now();
    for tenant in ["t-1", "t-2", "t-3"] {
        let rec = record_for(tenant, "k", "p");
        store.create(&rec, now).await.unwrap();
        store.apply(&rec, &claimed(&rec, "tok")).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.ledgers(2, cursor.as_deref()).await.unwrap();
        assert!(page.ledgers.len() <= 2);
        seen.extend(page.ledgers.into_iter().map(|l| (l.tenant_id, l.totals.held)));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    seen.sort();
    let r = video_reservation();
    assert_eq!(seen, [("t-1".into(), r), ("t-2".into(), r), ("t-3".into(), r)]);
}

async fn a_tenants_webhook_is_set_read_and_removed<S: OperationStore>(store: S) {
    let tenant = TenantId::parse("tenant-hook").unwrap();
    assert_eq!(store.webhook(&tenant).await.unwrap(), None);
    let config = genace_core::webhook::WebhookConfig {
        tenant_id: "tenant-hook".into(),
        url: "https://hooks.example/genace".into(),
        events: vec!["operation.delivered".into()],
        secret_id: "genace/webhooks/tenant-hook".into(),
        updated_at: Utc::now(),
        updated_by: "ops".into(),
    };
    store.set_webhook(&tenant, Some(&config)).await.unwrap();
    assert_eq!(store.webhook(&tenant).await.unwrap(), Some(config.clone()));
    // Another tenant's is apart, and the ledger listing does not see it.
    assert_eq!(
        store.webhook(&TenantId::parse("tenant-other").unwrap()).await.unwrap(),
        None
    );
    assert!(store.ledgers(10, None).await.unwrap().ledgers.is_empty());
    let moved = genace_core::webhook::WebhookConfig {
        url: "https://hooks.example/v2".into(),
        events: vec![],
        ..config
    };
    store.set_webhook(&tenant, Some(&moved)).await.unwrap();
    assert_eq!(store.webhook(&tenant).await.unwrap(), Some(moved));
    store.set_webhook(&tenant, None).await.unwrap();
    assert_eq!(store.webhook(&tenant).await.unwrap(), None);
}

/// With an account limit of 2: slots are counted over every tenant, a claim
/// past the limit writes nothing, a job Genace is done with frees its slot,
/// and an uncertain outcome keeps its slot (a job may be running).
async fn the_account_admits_claims_while_it_has_a_free_slot<S: OperationStore>(store: S) {
    let now = Utc::now();
    let [a, b, c] = [("tenant-x", "a"), ("tenant-y", "b"), ("tenant-z", "c")].map(|(t, k)| record_for(t, k, "p"));
    for r in [&a, &b, &c] {
        store.create(r, now).await.unwrap();
    }
    let account = store.account().await.unwrap();
    assert_eq!((account.in_flight, account.max_in_flight()), (0, Some(2)));
    let a1 = claimed(&a, "tok");
    store.apply(&a, &a1).await.unwrap();
    let b1 = claimed(&b, "tok");
    store.apply(&b, &b1).await.unwrap();
    let c1 = claimed(&c, "tok");
    assert!(matches!(store.apply(&c, &c1).await, Err(StoreError::AccountFull)));
    assert_eq!(
        store.get(&c.operation_id, now).await.unwrap(),
        Some(c.clone()),
        "nothing written"
    );
    assert_eq!(store.account().await.unwrap().in_flight, 2);
    assert!(!store.account().await.unwrap().has_room());
    assert_eq!(millis_held(&store, "tenant-x").await.in_flight, 1);
    assert_eq!(millis_held(&store, "tenant-z").await.in_flight, 0);
    // Accepted keeps the slot; rendered frees it; the waiting claim then fits.
    let a2 = accepted_with(&a1, "job-slot-a", Some(10.0));
    store.apply(&a1, &a2).await.unwrap();
    assert_eq!(store.account().await.unwrap().in_flight, 2);
    let a3 = rendered(&a2, "job-slot-a");
    store.apply(&a2, &a3).await.unwrap();
    assert_eq!(store.account().await.unwrap().in_flight, 1);
    assert_eq!(millis_held(&store, "tenant-x").await.in_flight, 0);
    store.apply(&c, &c1).await.unwrap();
    // An uncertain outcome keeps its slot until someone decides.
    let b2 = uncertain(&b1, "tok", "timed out");
    store.apply(&b1, &b2).await.unwrap();
    let account = store.account().await.unwrap();
    assert_eq!(account.in_flight, 2, "b (uncertain) and c (claimed)");
    // Writes that free or keep slots are never refused by the limit.
    let c2 = accepted_with(&c1, "job-slot-c", Some(10.0));
    store.apply(&c1, &c2).await.unwrap();
    assert_eq!(store.account().await.unwrap().in_flight, 2);
}

/// An operator's limit replaces the deployment's (2 here) while set; a
/// limit learned from 429s lowers it; each is admitted in the claim's own
/// write. Jobs Genace ran count as ended when they free their slot; a claim
/// released after a 429 does not.
async fn operators_and_learned_account_limits_admit_claims<S: OperationStore>(store: S) {
    let now = Utc::now();
    let raised = store.set_account_limit(Some(3)).await.unwrap();
    assert_eq!(
        (
            raised.configured,
            raised.set_limit,
            raised.max_in_flight(),
            raised.learned
        ),
        (Some(2), Some(3), Some(3), None)
    );
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|k| record_for("tenant-limits", k, "p"));
    for r in [&a, &b, &c, &d] {
        store.create(r, now).await.unwrap();
    }
    let [a1, b1, c1, d1] = [&a, &b, &c, &d].map(|r| claimed(r, "tok"));
    store.apply(&a, &a1).await.unwrap();
    store.apply(&b, &b1).await.unwrap();
    store.apply(&c, &c1).await.unwrap();
    assert!(matches!(store.apply(&d, &d1).await, Err(StoreError::AccountFull)));
    // A lesson is saved only over the value it was drawn from.
    assert!(store.learn_account_limit(None, Some(1), None, None).await.unwrap());
    assert!(
        !store.learn_account_limit(None, Some(5), None, None).await.unwrap(),
        "stale"
    );
    let account = store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.limit(), account.learned_mark),
        (Some(1), Some(1), 0)
    );
    // a renders: one job ended; two still in flight, over the learned limit.
    let a2 = accepted_with(&a1, "job-limits-a", Some(1.0));
    store.apply(&a1, &a2).await.unwrap();
    store.apply(&a2, &rendered(&a2, "job-limits-a")).await.unwrap();
    // b is refused by Genace with 429: its slot frees, but no job ran.
    let refused = machine::Input::RateLimited {
        token: "tok",
        retry_at: now,
        busy: false,
    };
    let b2 = machine::transition(&b1, refused, now, &Policy::default()).unwrap();
    store.apply(&b1, &b2).await.unwrap();
    let account = store.account().await.unwrap();
    assert_eq!((account.in_flight, account.jobs_ended), (1, 1));
    assert!(!account.has_room(), "one in flight under a learned limit of one");
    assert!(matches!(store.apply(&d, &d1).await, Err(StoreError::AccountFull)));
    assert!(store.learn_account_limit(Some(1), Some(2), None, None).await.unwrap());
    let account = store.account().await.unwrap();
    assert_eq!((account.learned, account.learned_mark), (Some(2), 1));
    store.apply(&d, &d1).await.unwrap();
    // Removing the operator's limit forgets the lesson: the deployment's 2 holds.
    let back = store.set_account_limit(None).await.unwrap();
    assert_eq!(
        (back.set_limit, back.learned, back.max_in_flight(), back.in_flight),
        (None, None, Some(2), 2)
    );
    assert!(!back.has_room());
}

/// Operations waiting for a slot are listed per tenant, oldest wait first,
/// counted on their tenant's ledger, and leave the order when claimed.
async fn the_waiting_order_is_per_tenant_and_oldest_first<S: OperationStore>(store: S) {
    let t0 = Utc::now();
    let mut waiting = Vec::new();
    for (tenant, key, after) in [
        ("tenant-w", "late", 5),
        ("tenant-w", "early", 1),
        ("tenant-v", "other", 0),
    ] {
        let rec = record_for(tenant, key, "p");
        store.create(&rec, t0).await.unwrap();
        let at = t0 + chrono::Duration::seconds(after);
        let next = machine::transition(&rec, machine::Input::CapacityReached, at, &Policy::default()).unwrap();
        store.apply(&rec, &next).await.unwrap();
        waiting.push(next);
    }
    let w = TenantId::parse("tenant-w").unwrap();
    let ids = store.waiting(&w, 10).await.unwrap();
    assert_eq!(
        ids,
        vec![waiting[1].operation_id.clone(), waiting[0].operation_id.clone()]
    );
    assert_eq!(store.waiting(&w, 1).await.unwrap().len(), 1, "limited");
    assert_eq!(millis_held(&store, "tenant-w").await.waiting, 2);
    assert_eq!(millis_held(&store, "tenant-v").await.waiting, 1);
    assert_eq!(
        store.account().await.unwrap().waiting,
        3,
        "the account counts every tenant's"
    );
    // Claimed: out of the order and off the count.
    let early = &waiting[1];
    let claimed_early = claimed(early, "tok");
    assert_eq!(claimed_early.capacity_hold, None);
    store.apply(early, &claimed_early).await.unwrap();
    assert_eq!(
        store.waiting(&w, 10).await.unwrap(),
        vec![waiting[0].operation_id.clone()]
    );
    assert_eq!(millis_held(&store, "tenant-w").await.waiting, 1);
    let account = store.account().await.unwrap();
    assert_eq!((account.waiting, account.in_flight), (2, 1));
    // The stored record reads back whole, without the index's attributes.
    let stored = store.get(&waiting[0].operation_id, t0).await.unwrap().unwrap();
    assert_eq!(stored, waiting[0]);
}

/// A batch operation lets interactive ones of its tenant that came up to
/// `BATCH_YIELDS_SECONDS` after it go first, and no later one.
async fn batch_yields_to_interactive_for_a_bounded_time<S: OperationStore>(store: S) {
    use genace_core::domain::Priority;
    let t0 = Utc::now();
    let mut ids = Vec::new();
    for (key, priority, after) in [
        ("batch", Priority::Batch, 0),
        ("soon", Priority::Interactive, 60),
        ("late", Priority::Interactive, Priority::BATCH_YIELDS_SECONDS + 60),
    ] {
        let mut rec = record_for("tenant-priorities", key, "p");
        rec.priority = priority;
        store.create(&rec, t0).await.unwrap();
        let at = t0 + chrono::Duration::seconds(after);
        let next = machine::transition(&rec, machine::Input::CapacityReached, at, &Policy::default()).unwrap();
        store.apply(&rec, &next).await.unwrap();
        assert_eq!(
            store.get(&rec.operation_id, t0).await.unwrap().unwrap().priority,
            priority
        );
        ids.push(next.operation_id);
    }
    let tenant = TenantId::parse("tenant-priorities").unwrap();
    assert_eq!(
        store.waiting(&tenant, 10).await.unwrap(),
        vec![ids[1].clone(), ids[0].clone(), ids[2].clone()]
    );
}

/// A tenant's own limit of jobs in flight: a claim past it writes nothing
/// and says so; other tenants are not held by it; removing it lets the
/// claim through.
async fn a_tenants_own_limit_refuses_a_claim_past_it<S: OperationStore>(store: S) {
    let now = Utc::now();
    let limited = TenantId::parse("tenant-limited-slots").unwrap();
    let set = store.set_max_in_flight(&limited, Some(1)).await.unwrap();
    assert_eq!((set.max_in_flight, set.totals.in_flight), (Some(1), 0));
    let [a, b] = ["a", "b"].map(|k| record_for("tenant-limited-slots", k, "p"));
    let other = record_for("tenant-free-slots", "o", "p");
    for r in [&a, &b, &other] {
        store.create(r, now).await.unwrap();
    }
    store.apply(&a, &claimed(&a, "tok")).await.unwrap();
    let b1 = claimed(&b, "tok");
    assert!(matches!(store.apply(&b, &b1).await, Err(StoreError::TenantFull)));
    assert_eq!(
        store.get(&b.operation_id, now).await.unwrap(),
        Some(b.clone()),
        "nothing written"
    );
    store.apply(&other, &claimed(&other, "tok")).await.unwrap();
    let ledger = store.ledger(&limited).await.unwrap();
    assert_eq!((ledger.max_in_flight, ledger.totals.in_flight), (Some(1), 1));
    assert!(!ledger.has_a_slot());
    assert_eq!(
        store.set_max_in_flight(&limited, None).await.unwrap().max_in_flight,
        None
    );
    store.apply(&b, &b1).await.unwrap();
    assert_eq!(store.ledger(&limited).await.unwrap().totals.in_flight, 2);
}

/// Without a limit nothing is refused, and the count still follows the records.
async fn without_an_account_limit_slots_are_only_counted<S: OperationStore>(store: S) {
    let now = Utc::now();
    for key in ["a", "b", "c"] {
        let r = record_for("tenant-free", key, "p");
        store.create(&r, now).await.unwrap();
        store.apply(&r, &claimed(&r, "tok")).await.unwrap();
    }
    let account = store.account().await.unwrap();
    assert_eq!((account.in_flight, account.max_in_flight()), (3, None));
    assert!(account.has_room());
    assert_eq!(millis_held(&store, "tenant-free").await.in_flight, 3);
}

/// Claims of three tenants race for the two slots: two win, one is refused,
/// and the count is exactly two (a transaction, never a read then a write).
async fn claims_of_many_tenants_race_for_the_last_slots<S: OperationStore + Clone + 'static>(store: S) {
    let outcomes = race_claims(&store, &[("tenant-r1", "k"), ("tenant-r2", "k"), ("tenant-r3", "k")]).await;
    let passed = outcomes.iter().filter(|o| o.is_ok()).count();
    let refused = outcomes
        .iter()
        .filter(|o| matches!(o, Err(StoreError::AccountFull)))
        .count();
    assert_eq!((passed, refused), (2, 1), "{outcomes:?}");
    assert_eq!(store.account().await.unwrap().in_flight, 2);
}

/// While an operation waits for a slot, a claim that did not wait is
/// refused even with a slot free (the slot is the waiting one's turn), and
/// the waiting one's claim takes it. Waits for credits only do not count.
async fn a_claim_that_did_not_wait_yields_to_one_that_waits_for_a_slot<S: OperationStore>(store: S) {
    let now = Utc::now();
    let [held, waits, fresh, short] = [
        ("tenant-h", "held"),
        ("tenant-w", "waits"),
        ("tenant-f", "fresh"),
        ("tenant-s", "short"),
    ]
    .map(|(t, k)| record_for(t, k, "p"));
    for r in [&held, &waits, &fresh, &short] {
        store.create(r, now).await.unwrap();
    }
    // Waiting for credits only: nobody yields to it.
    let short1 = machine::transition(&short, machine::Input::SpendLimitReached, now, &Policy::default()).unwrap();
    store.apply(&short, &short1).await.unwrap();
    let held1 = claimed(&held, "tok");
    store.apply(&held, &held1).await.unwrap();
    let waits1 = machine::transition(&waits, machine::Input::CapacityReached, now, &Policy::default()).unwrap();
    store.apply(&waits, &waits1).await.unwrap();
    let account = store.account().await.unwrap();
    assert_eq!((account.in_flight, account.waiting, account.queued), (1, 2, 1));
    assert!(account.has_room() && account.yields());
    // One slot is free, and it is the waiting operation's.
    let fresh1 = claimed(&fresh, "tok");
    assert!(matches!(
        store.apply(&fresh, &fresh1).await,
        Err(StoreError::AccountFull)
    ));
    assert_eq!(
        store.get(&fresh.operation_id, now).await.unwrap(),
        Some(fresh.clone()),
        "nothing written"
    );
    store.apply(&waits1, &claimed(&waits1, "tok")).await.unwrap();
    let account = store.account().await.unwrap();
    assert_eq!((account.in_flight, account.queued), (2, 0));
    assert_eq!(millis_held(&store, "tenant-w").await.queued, 0);
    // Nobody waits for a slot now; the account is full, then has room again.
    assert!(matches!(
        store.apply(&fresh, &fresh1).await,
        Err(StoreError::AccountFull)
    ));
    let done = rendered(&accepted_with(&held1, "job-yield", Some(1.0)), "job-yield");
    store
        .apply(&held1, &accepted_with(&held1, "job-yield", Some(1.0)))
        .await
        .unwrap();
    store
        .apply(&accepted_with(&held1, "job-yield", Some(1.0)), &done)
        .await
        .unwrap();
    store.apply(&fresh, &fresh1).await.unwrap();
}

/// Every page of a listing, in order; each page within the limit.
async fn list_everything<S: OperationStore>(
    store: &S,
    tenant: Option<&str>,
    filter: &ListFilter,
    limit: i32,
) -> Vec<OperationRecord> {
    let tenant = tenant.map(|t| TenantId::parse(t).unwrap());
    let mut after = None;
    let mut out = Vec::new();
    for _ in 0..100 {
        let page = store
            .list(tenant.as_ref(), filter, limit, after.as_ref(), Utc::now())
            .await
            .unwrap();
        assert!(page.records.len() <= usize::try_from(limit).unwrap());
        out.extend(page.records);
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
    panic!("the listing never ended");
}

fn ids(records: &[OperationRecord]) -> Vec<String> {
    records.iter().map(|r| r.operation_id.as_str().to_owned()).collect()
}

/// Listings are newest first, per tenant or across tenants, filtered by
/// phase, key prefix and creation time, and paged without loss or repeat.
async fn listings_are_newest_first_filtered_and_paged<S: OperationStore>(store: S) {
    let base = Utc::now() - chrono::Duration::minutes(10);
    let mut acme = Vec::new();
    for i in 0..12_i64 {
        let family = if i % 2 == 0 { "list-a" } else { "list-b" };
        let mut r = record_for("acme", &format!("{family}-{i}"), "p");
        r.created_at = base + chrono::Duration::seconds(i);
        store.create(&r, Utc::now()).await.unwrap();
        acme.push(r);
    }
    for i in 0..3_i64 {
        let mut r = record_for("other", &format!("list-a-{i}"), "p");
        r.created_at = base + chrono::Duration::milliseconds(500 + 1000 * i);
        store.create(&r, Utc::now()).await.unwrap();
    }
    // Two of acme's move on; an expired one is never listed.
    for r in &mut acme[3..5] {
        let next = claimed(r, "tok");
        store.apply(r, &next).await.unwrap();
        *r = next;
    }
    let mut gone = record_for("acme", "list-a-expired", "p");
    gone.expires_at_seconds = Some(Utc::now().timestamp() - 5);
    store.create(&gone, Utc::now()).await.unwrap();

    let newest_first = |mut rs: Vec<OperationRecord>| {
        rs.sort_by_key(|r| std::cmp::Reverse(r.created_at));
        ids(&rs)
    };
    let all = ListFilter::default();
    let listed = list_everything(&store, Some("acme"), &all, 5).await;
    assert_eq!(
        ids(&listed),
        newest_first(acme.clone()),
        "every one of acme's, newest first"
    );
    assert_eq!(listed[5], acme[6], "records are read whole");
    let submitting = ListFilter {
        phase: Some(Phase::Submitting),
        ..ListFilter::default()
    };
    let listed = list_everything(&store, Some("acme"), &submitting, 2).await;
    assert_eq!(ids(&listed), newest_first(acme[3..5].to_vec()));
    let prefixed = ListFilter {
        key_prefix: Some("list-a".into()),
        ..ListFilter::default()
    };
    let listed = list_everything(&store, Some("acme"), &prefixed, 4).await;
    let evens: Vec<_> = acme.iter().step_by(2).cloned().collect();
    assert_eq!(ids(&listed), newest_first(evens));
    let window = ListFilter {
        created_after: Some(acme[2].created_at),
        created_before: Some(acme[7].created_at),
        ..ListFilter::default()
    };
    let listed = list_everything(&store, Some("acme"), &window, 3).await;
    assert_eq!(ids(&listed), newest_first(acme[3..7].to_vec()), "both bounds exclusive");
    // Across tenants: acme's and other's, interleaved by time.
    let listed = list_everything(&store, None, &all, 4).await;
    assert_eq!(listed.len(), 15);
    assert!(listed.windows(2).all(|w| w[0].created_at >= w[1].created_at));
    let listed = list_everything(&store, Some("nobody"), &all, 4).await;
    assert!(listed.is_empty());
}

/// An enabled endpoint of `tenant` taking `events` (every type when empty).
fn test_endpoint(tenant: &str, id: &str, events: &[&str]) -> genace_core::webhook::WebhookEndpoint {
    genace_core::webhook::WebhookEndpoint {
        id: id.into(),
        url: format!("https://hooks.example/{id}"),
        description: "d".into(),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        secret_id: format!("genace/webhooks/{tenant}/{id}"),
        secret_version: 0,
        created_at: Utc::now(),
        updated_at: Utc::now(),
        updated_by: "me".into(),
        disabled_at: None,
        disabled_reason: None,
        failing_since: None,
        recovering_until: None,
        replays: None,
    }
}

/// The events pipe's read: every tenant's receivers in one call, however
/// many tenants (more than one request's worth of keys), and nothing for a
/// tenant without any.
async fn receivers_are_read_for_many_tenants_at_once<S: OperationStore>(store: S) {
    use genace_core::webhook::{EndpointSet, Receivers, WebhookConfig};
    let t = |name: &str| TenantId::parse(name).unwrap();
    let now = Utc::now();
    let hook = |tenant: &str| WebhookConfig {
        tenant_id: tenant.into(),
        url: "https://hooks.example/genace".into(),
        events: vec!["operation.delivered".into()],
        secret_id: format!("genace/webhooks/{tenant}/main"),
        updated_at: now,
        updated_by: "ops".into(),
    };
    let endpoint = test_endpoint("rx-both", "ep_r", &[]);
    let set = EndpointSet {
        version: 1,
        endpoints: vec![endpoint.clone()],
    };
    store.set_webhook(&t("rx-hook"), Some(&hook("rx-hook"))).await.unwrap();
    store.set_webhook(&t("rx-both"), Some(&hook("rx-both"))).await.unwrap();
    store.save_endpoints(&t("rx-both"), &set).await.unwrap();
    store.save_endpoints(&t("rx-ends"), &set).await.unwrap();
    // 60 tenants: 120 keys, more than one batch read takes.
    let mut asked: Vec<TenantId> = (0..57).map(|i| t(&format!("rx-none-{i}"))).collect();
    asked.extend([t("rx-hook"), t("rx-both"), t("rx-ends")]);
    let got = store.receivers(&asked).await.unwrap();
    let mut found: Vec<&str> = got.keys().map(TenantId::as_str).collect();
    found.sort_unstable();
    assert_eq!(found, ["rx-both", "rx-ends", "rx-hook"]);
    assert_eq!(
        got[&t("rx-both")],
        Receivers {
            webhook: Some(hook("rx-both")),
            endpoints: vec![endpoint.clone()],
        }
    );
    assert_eq!(got[&t("rx-hook")].endpoints, vec![]);
    assert_eq!(got[&t("rx-ends")].webhook, None);
    assert!(got[&t("rx-hook")].take("operation.delivered"));
    assert!(!got[&t("rx-hook")].take("operation.accepted"));
    assert!(store.receivers(&[]).await.unwrap().is_empty());
}

async fn endpoint_sets_change_only_on_the_version_read<S: OperationStore>(store: S) {
    use genace_core::webhook::EndpointSet;
    let tenant = TenantId::parse("tenant-endpoints").unwrap();
    let empty = store.endpoints(&tenant).await.unwrap();
    assert_eq!(empty, EndpointSet::default());
    let endpoint = |id: &str| test_endpoint("tenant-endpoints", id, &["operation.delivered"]);
    let first = EndpointSet {
        version: 1,
        endpoints: vec![endpoint("ep_a")],
    };
    store.save_endpoints(&tenant, &first).await.unwrap();
    assert_eq!(store.endpoints(&tenant).await.unwrap(), first);
    // Written on version 0 again: refused, and nothing changed.
    let stale = EndpointSet {
        version: 1,
        endpoints: vec![endpoint("ep_b")],
    };
    assert!(matches!(
        store.save_endpoints(&tenant, &stale).await,
        Err(StoreError::Conflict(_))
    ));
    // Two writers on the same version: one wins.
    let second = |id: &str| EndpointSet {
        version: 2,
        endpoints: vec![endpoint("ep_a"), endpoint(id)],
    };
    let (c, d) = (second("ep_c"), second("ep_d"));
    let (one, two) = tokio::join!(store.save_endpoints(&tenant, &c), store.save_endpoints(&tenant, &d));
    assert_eq!(u8::from(one.is_ok()) + u8::from(two.is_ok()), 1, "{one:?} {two:?}");
    let stored = store.endpoints(&tenant).await.unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.endpoints.len(), 2);
    assert_eq!(
        store
            .endpoints(&TenantId::parse("tenant-other").unwrap())
            .await
            .unwrap(),
        EndpointSet::default()
    );
}

#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn delivery_logs_page_newest_first_per_endpoint<S: OperationStore>(store: S) {
    use genace_core::webhook::{AttemptStatus, WebhookAttempt};
    let tenant = TenantId::parse("tenant-log").unwrap();
    let now = Utc::now();
    let attempt = |endpoint: &str, n: i64, status: AttemptStatus| WebhookAttempt {
        tenant_id: "tenant-log".into(),
        endpoint_id: endpoint.into(),
        event_id: format!("op:1:{n}:operation.accepted"),
        event_type: "operation.accepted".into(),
        at: now + chrono::Duration::seconds(n),
        attempt: 1,
        status,
        http_status: (status == AttemptStatus::Succeeded).then_some(200),
        error: (status == AttemptStatus::Failed).then(|| "timeout".to_owned()),
        latency_ms: 30,
    };
    let keep = now + chrono::Duration::days(30);
    for n in 0..5 {
        let status = if n % 2 == 0 {
            AttemptStatus::Succeeded
        } else {
            AttemptStatus::Failed
        };
        store.record_attempt(&attempt("ep_a", n, status), keep).await.unwrap();
    }
    store
        .record_attempt(&attempt("ep_b", 9, AttemptStatus::Failed), keep)
        .await
        .unwrap();
    // Past its time: the TTL may not have removed it yet, but it is gone.
    store
        .record_attempt(
            &attempt("ep_a", 10, AttemptStatus::Failed),
            now - chrono::Duration::seconds(1),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let (page, next) = store
            .attempts(&tenant, "ep_a", None, 2, after.as_deref(), now)
            .await
            .unwrap();
        seen.extend(page);
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let ids: Vec<&str> = seen.iter().map(|a| a.event_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "op:1:4:operation.accepted",
            "op:1:3:operation.accepted",
            "op:1:2:operation.accepted",
            "op:1:1:operation.accepted",
            "op:1:0:operation.accepted"
        ]
    );
    assert_eq!(seen[1], attempt("ep_a", 3, AttemptStatus::Failed));
    let (failed, _) = store
        .attempts(&tenant, "ep_a", Some(AttemptStatus::Failed), 10, None, now)
        .await
        .unwrap();
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|a| a.status == AttemptStatus::Failed));
    let (b, next) = store.attempts(&tenant, "ep_b", None, 10, None, now).await.unwrap();
    assert_eq!((b.len(), next), (1, None));
    let other = TenantId::parse("tenant-other").unwrap();
    assert!(
        store
            .attempts(&other, "ep_a", None, 10, None, now)
            .await
            .unwrap()
            .0
            .is_empty()
    );
}

async fn kept_events_are_per_tenant_and_expire<S: OperationStore>(store: S) {
    let (a, b) = (
        TenantId::parse("tenant-kept").unwrap(),
        TenantId::parse("tenant-other").unwrap(),
    );
    let now = Utc::now();
    let detail = r#"{"id":"op:1:2:operation.accepted","type":"operation.accepted"}"#;
    store
        .keep_event(
            &a,
            "op:1:2:operation.accepted",
            detail,
            now + chrono::Duration::days(30),
        )
        .await
        .unwrap();
    store
        .keep_event(
            &a,
            "op:1:3:operation.accepted",
            detail,
            now - chrono::Duration::seconds(1),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .kept_event(&a, "op:1:2:operation.accepted", now)
            .await
            .unwrap()
            .as_deref(),
        Some(detail)
    );
    assert_eq!(
        store.kept_event(&b, "op:1:2:operation.accepted", now).await.unwrap(),
        None
    );
    assert_eq!(
        store.kept_event(&a, "op:1:3:operation.accepted", now).await.unwrap(),
        None
    );
    assert_eq!(
        store.kept_event(&a, "op:1:9:operation.accepted", now).await.unwrap(),
        None
    );
}

/// The waiting set: only tenants with operations waiting, those that began
/// waiting first before the others, bounded by the limit asked; a tenant
/// served (one of its waiters claimed) goes to the back, one whose waiters
/// were all claimed leaves it, and one that never waited (however many
/// there are) is never read.
async fn the_waiting_set_holds_only_tenants_that_wait<S: OperationStore>(store: S) {
    let t0 = Utc::now();
    // Tenants that finished a job and wait for nothing.
    for i in 0..5 {
        let rec = record_for(&format!("idle-{i}"), "k", "p");
        store.create(&rec, t0).await.unwrap();
        store.apply(&rec, &claimed(&rec, "tok")).await.unwrap();
    }
    let mut waiting = Vec::new();
    for (tenant, key) in [("set-a", "1"), ("set-b", "1"), ("set-a", "2"), ("set-c", "1")] {
        let rec = record_for(tenant, key, "p");
        store.create(&rec, t0).await.unwrap();
        let next = machine::transition(&rec, machine::Input::CapacityReached, t0, &Policy::default()).unwrap();
        store.apply(&rec, &next).await.unwrap();
        waiting.push(next);
        // The set orders by when each tenant joined, to the millisecond.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let names = |ledgers: Vec<genace_core::ledger::TenantLedger>| -> Vec<(String, i64)> {
        ledgers.into_iter().map(|l| (l.tenant_id, l.totals.waiting)).collect()
    };
    assert_eq!(
        names(store.waiting_ledgers(10).await.unwrap()),
        [
            ("set-a".to_owned(), 2),
            ("set-b".to_owned(), 1),
            ("set-c".to_owned(), 1)
        ]
    );
    assert_eq!(
        names(store.waiting_ledgers(2).await.unwrap()),
        [("set-a".to_owned(), 2), ("set-b".to_owned(), 1)],
        "bounded, oldest first"
    );
    // set-b's only waiter is claimed: it drops out. One of set-a's two is
    // claimed: served, set-a goes to the back behind set-c (turns).
    store.apply(&waiting[1], &claimed(&waiting[1], "tok")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    store.apply(&waiting[0], &claimed(&waiting[0], "tok")).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    assert_eq!(
        names(store.waiting_ledgers(2).await.unwrap()),
        [("set-c".to_owned(), 1), ("set-a".to_owned(), 1)]
    );
    // Waiting again, set-b joins behind the others.
    let again = record_for("set-b", "2", "p");
    store.create(&again, t0).await.unwrap();
    let next = machine::transition(&again, machine::Input::CapacityReached, t0, &Policy::default()).unwrap();
    store.apply(&again, &next).await.unwrap();
    assert_eq!(
        names(store.waiting_ledgers(10).await.unwrap()),
        [
            ("set-c".to_owned(), 1),
            ("set-a".to_owned(), 1),
            ("set-b".to_owned(), 1)
        ]
    );
}

/// A tenant whose last waiter was claimed, and whose entry no read has
/// dropped yet, waits again behind the tenants that joined after it: the
/// place of its last wait is not kept.
async fn a_tenant_that_waits_again_joins_behind_those_that_joined_since<S: OperationStore>(store: S) {
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(3));
    let first = waits(&store, "again-a", "1", machine::Input::CapacityReached).await;
    store.apply(&first, &claimed(&first, "tok")).await.unwrap();
    pause().await;
    waits(&store, "again-b", "1", machine::Input::CapacityReached).await;
    waits(&store, "again-a", "2", machine::Input::CapacityReached).await;
    let names: Vec<String> = store
        .waiting_ledgers(10)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.tenant_id)
        .collect();
    assert_eq!(names, ["again-b", "again-a"]);
}

/// A wake-up that passed over tenants sends them to the back of the
/// waiting set: the next read finds those behind them first. A tenant not
/// in the set is not added.
async fn tenants_sent_to_the_back_are_read_last<S: OperationStore>(store: S) {
    let t0 = Utc::now();
    for tenant in ["back-a", "back-b", "back-c"] {
        let rec = record_for(tenant, "1", "p");
        store.create(&rec, t0).await.unwrap();
        let next = machine::transition(&rec, machine::Input::CapacityReached, t0, &Policy::default()).unwrap();
        store.apply(&rec, &next).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let names = |ledgers: Vec<genace_core::ledger::TenantLedger>| -> Vec<String> {
        ledgers.into_iter().map(|l| l.tenant_id).collect()
    };
    assert_eq!(names(store.waiting_ledgers(2).await.unwrap()), ["back-a", "back-b"]);
    store
        .send_to_back(&["back-a".to_owned(), "never-waited".to_owned()])
        .await
        .unwrap();
    assert_eq!(
        names(store.waiting_ledgers(10).await.unwrap()),
        ["back-b", "back-c", "back-a"]
    );
    assert_eq!(names(store.waiting_ledgers(1).await.unwrap()), ["back-b"]);
}

/// A new record of `tenant` that waits for `event` (a wait for credits or
/// for a slot).
async fn waits<S: OperationStore>(store: &S, tenant: &str, key: &str, event: machine::Input<'_>) -> OperationRecord {
    let t0 = Utc::now();
    let rec = record_for(tenant, key, "p");
    store.create(&rec, t0).await.unwrap();
    let next = machine::transition(&rec, event, t0, &Policy::default()).unwrap();
    store.apply(&rec, &next).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    next
}

/// Tenants held back by their own limits: a wait for credits parks a
/// tenant in no set, out of every wake-up's read; a wake-up parks one only
/// while its ledger is as it read it; the write that frees a tenant's room
/// (a job Genace is done with) and `unpark` each move it back to the
/// waiting set, keeping its place.
async fn tenants_held_back_by_their_own_limits_are_parked<S: OperationStore>(store: S) {
    split_for_this_deployment(&store).await;
    let names = |ledgers: Vec<genace_core::ledger::TenantLedger>| -> Vec<String> {
        ledgers.into_iter().map(|l| l.tenant_id).collect()
    };
    // park-c's job, claimed before anyone waits for a slot (a claim that
    // did not wait yields to those).
    let rec = record_for("park-c", "job", "p");
    store.create(&rec, Utc::now()).await.unwrap();
    let claim = claimed(&rec, "tok");
    store.apply(&rec, &claim).await.unwrap();
    let accepted = accepted_with(&claim, "job-park-c", None);
    store.apply(&claim, &accepted).await.unwrap();
    waits(&store, "park-a", "1", machine::Input::SpendLimitReached).await;
    assert!(names(store.waiting_ledgers(10).await.unwrap()).is_empty());
    assert_eq!(names(store.parked_ledgers(10).await.unwrap()), ["park-a"]);
    waits(&store, "park-b", "1", machine::Input::CapacityReached).await;
    let read = store.waiting_ledgers(10).await.unwrap();
    assert_eq!(names(read.clone()), ["park-b"]);
    // Its ledger moved after the read (another operation waits): stays.
    waits(&store, "park-b", "2", machine::Input::CapacityReached).await;
    assert_eq!(store.park(&read).await.unwrap(), 0);
    assert_eq!(names(store.waiting_ledgers(10).await.unwrap()), ["park-b"]);
    let read = store.waiting_ledgers(10).await.unwrap();
    assert_eq!(store.park(&read).await.unwrap(), 1);
    assert!(names(store.waiting_ledgers(10).await.unwrap()).is_empty());
    assert_eq!(names(store.parked_ledgers(10).await.unwrap()), ["park-a", "park-b"]);
    assert!(store.unpark("park-b").await.unwrap());
    assert!(!store.unpark("park-b").await.unwrap(), "not parked any more");
    assert_eq!(names(store.waiting_ledgers(10).await.unwrap()), ["park-b"]);
    // park-c has a job in flight and one waiting for credits: parked,
    // until the job ends and frees what it held.
    waits(&store, "park-c", "2", machine::Input::SpendLimitReached).await;
    assert_eq!(names(store.parked_ledgers(10).await.unwrap()), ["park-a", "park-c"]);
    store
        .apply(&accepted, &rendered(&accepted, "job-park-c"))
        .await
        .unwrap();
    assert_eq!(names(store.parked_ledgers(10).await.unwrap()), ["park-a"]);
    assert_eq!(names(store.waiting_ledgers(10).await.unwrap()), ["park-b", "park-c"]);
    // Moved back, park-a keeps the place it had, before the others.
    assert!(store.unpark("park-a").await.unwrap());
    assert_eq!(
        names(store.waiting_ledgers(10).await.unwrap()),
        ["park-a", "park-b", "park-c"]
    );
    // A tenant that waits for nothing is in no set.
    assert!(!store.unpark("park-idle").await.unwrap());
    assert_eq!(names(store.waiting_ledgers(10).await.unwrap()).len(), 3);
}

/// `rec` claimed on the account's shard `shard`.
fn claimed_on(rec: &OperationRecord, shard: u16) -> OperationRecord {
    let event = machine::Input::ClaimDispatch { token: "tok", shard };
    machine::transition(rec, event, Utc::now(), &Policy::default()).unwrap()
}

/// `rec` waiting for a slot on the account's shard `shard`.
fn waiting_on(rec: &OperationRecord, shard: u16) -> OperationRecord {
    let mut next = machine::transition(rec, machine::Input::CapacityReached, Utc::now(), &Policy::default()).unwrap();
    next.account_shard = Some(shard);
    next
}

/// Each shard in use, as (jobs in flight, waiting for a slot, its part of
/// the limit in force).
async fn shard_counts<S: OperationStore>(store: &S) -> Vec<(i64, i64, Option<u32>)> {
    let shards = store.account_shards().await.unwrap();
    shards.iter().map(|s| (s.in_flight, s.queued, s.limit())).collect()
}

/// The deployment's first read of the account, which splits the limits
/// for its shard count: a shard not split for it admits nothing.
async fn split_for_this_deployment<S: OperationStore>(store: &S) {
    store.account().await.unwrap();
}

/// Two shards under a limit of 3 (parts 2 and 1): each admits its part and
/// no more, whatever the other has free; the whole account is their sum,
/// and a job's end frees the shard that admitted it.
async fn each_account_shard_admits_its_part_of_the_limit<S: OperationStore>(store: S) {
    split_for_this_deployment(&store).await;
    let now = Utc::now();
    let recs: Vec<OperationRecord> = (0..5)
        .map(|i| record_for("tenant-shards", &format!("s{i}"), "p"))
        .collect();
    for r in &recs {
        store.create(r, now).await.unwrap();
    }
    let on_one = claimed_on(&recs[0], 1);
    store.apply(&recs[0], &on_one).await.unwrap();
    assert!(
        matches!(
            store.apply(&recs[1], &claimed_on(&recs[1], 1)).await,
            Err(StoreError::AccountFull)
        ),
        "shard 1's part is one slot, though shard 0 has two free"
    );
    store.apply(&recs[2], &claimed_on(&recs[2], 0)).await.unwrap();
    store.apply(&recs[3], &claimed_on(&recs[3], 0)).await.unwrap();
    assert!(matches!(
        store.apply(&recs[4], &claimed_on(&recs[4], 0)).await,
        Err(StoreError::AccountFull)
    ));
    assert_eq!(shard_counts(&store).await, [(2, 0, Some(2)), (1, 0, Some(1))]);
    let whole = store.account().await.unwrap();
    assert_eq!((whole.in_flight, whole.limit(), whole.has_room()), (3, Some(3), false));
    // The job on shard 1 renders: shard 1 frees, and counts the end.
    let accepted = accepted_with(&on_one, "job-shard-1", Some(1.0));
    store.apply(&on_one, &accepted).await.unwrap();
    store
        .apply(&accepted, &rendered(&accepted, "job-shard-1"))
        .await
        .unwrap();
    let shards = store.account_shards().await.unwrap();
    assert_eq!(
        (shards[1].in_flight, shards[1].jobs_ended, shards[0].jobs_ended),
        (0, 1, 0)
    );
    assert_eq!(store.account().await.unwrap().jobs_ended, 1);
    store.apply(&recs[1], &claimed_on(&recs[1], 1)).await.unwrap();
}

/// An operator's and a learned limit are split over the shards, and the
/// whole account reads them back whole; a lesson is saved only over the
/// value it was drawn from.
async fn account_limits_are_split_over_the_shards<S: OperationStore>(store: S) {
    let set = store.set_account_limit(Some(5)).await.unwrap();
    assert_eq!((set.set_limit, set.limit()), (Some(5), Some(5)));
    assert_eq!(shard_counts(&store).await, [(0, 0, Some(3)), (0, 0, Some(2))]);
    let taught = chrono::DateTime::from_timestamp_millis(1_800_000_000_456).unwrap();
    assert!(
        store
            .learn_account_limit(None, Some(3), Some(12), Some(taught))
            .await
            .unwrap()
    );
    assert!(
        !store.learn_account_limit(None, Some(4), None, None).await.unwrap(),
        "stale"
    );
    assert!(
        !store.learn_account_limit(Some(2), Some(4), None, None).await.unwrap(),
        "stale"
    );
    let account = store.account().await.unwrap();
    assert_eq!(
        (
            account.learned,
            account.limit(),
            account.raise_every,
            account.learned_at_ms
        ),
        (Some(3), Some(3), Some(12), Some(taught.timestamp_millis()))
    );
    assert_eq!(shard_counts(&store).await, [(0, 0, Some(2)), (0, 0, Some(1))]);
    // Only one slot on shard 1 now.
    let recs: Vec<OperationRecord> = (0..2)
        .map(|i| record_for("tenant-split", &format!("l{i}"), "p"))
        .collect();
    for r in &recs {
        store.create(r, Utc::now()).await.unwrap();
    }
    store.apply(&recs[0], &claimed_on(&recs[0], 1)).await.unwrap();
    assert!(matches!(
        store.apply(&recs[1], &claimed_on(&recs[1], 1)).await,
        Err(StoreError::AccountFull)
    ));
    assert!(store.learn_account_limit(Some(3), None, None, None).await.unwrap());
    let forgotten = store.account().await.unwrap();
    assert_eq!((forgotten.learned, forgotten.raise_every), (None, None));
    store.apply(&recs[1], &claimed_on(&recs[1], 1)).await.unwrap();
    // The operator's limit removed: the deployment's (3) again, split.
    let back = store.set_account_limit(None).await.unwrap();
    assert_eq!((back.set_limit, back.limit(), back.in_flight), (None, Some(3), 2));
}

/// A wait is counted on its shard; a fresh claim yields only to the
/// operations waiting on its own shard; a woken claim may take a slot on
/// another shard, and its wait leaves the shard that counted it.
async fn a_woken_claim_takes_a_slot_on_another_shard<S: OperationStore>(store: S) {
    split_for_this_deployment(&store).await;
    let now = Utc::now();
    let recs: Vec<OperationRecord> = (0..4)
        .map(|i| record_for("tenant-woken", &format!("w{i}"), "p"))
        .collect();
    for r in &recs {
        store.create(r, now).await.unwrap();
    }
    // Shard 1 (one slot) is full, and the next waits there.
    let held = claimed_on(&recs[0], 1);
    store.apply(&recs[0], &held).await.unwrap();
    let waiting = waiting_on(&recs[1], 1);
    store.apply(&recs[1], &waiting).await.unwrap();
    assert_eq!(shard_counts(&store).await, [(0, 0, Some(2)), (1, 1, Some(1))]);
    assert_eq!(store.account().await.unwrap().queued, 1);
    // A fresh claim on shard 0 does not yield to shard 1's waiter.
    store.apply(&recs[2], &claimed_on(&recs[2], 0)).await.unwrap();
    // The waiter, woken, takes shard 0's last slot: both shards move.
    let moved = claimed_on(&waiting, 0);
    store.apply(&waiting, &moved).await.unwrap();
    assert_eq!(shard_counts(&store).await, [(2, 0, Some(2)), (1, 0, Some(1))]);
    // A wait on shard 0 makes a fresh claim there yield, though a slot is free.
    let freed = machine::transition(
        &moved,
        machine::Input::RateLimited {
            token: "tok",
            retry_at: now,
            busy: true,
        },
        now,
        &Policy::default(),
    )
    .unwrap();
    store.apply(&moved, &freed).await.unwrap();
    let second = waiting_on(&freed, 0);
    store.apply(&freed, &second).await.unwrap();
    assert!(
        matches!(
            store.apply(&recs[3], &claimed_on(&recs[3], 0)).await,
            Err(StoreError::AccountFull)
        ),
        "it yields to the operation waiting on shard 0"
    );
    assert_eq!(shard_counts(&store).await, [(1, 1, Some(2)), (1, 0, Some(1))]);
}

/// A record counted on shard 0 before shards (no `account_shard`) that
/// waits again moves its wait to its home shard, though no tenant counter
/// moves: each shard still counts exactly its records.
async fn a_wait_moved_to_its_home_shard_moves_its_counts<S: OperationStore>(store: S) {
    let two = genace_core::shard::AccountShards::new(2).unwrap();
    let policy = Policy {
        account_shards: two,
        ..Policy::default()
    };
    let rec = (0..)
        .map(|i| record_for("tenant-moved", &format!("m{i}"), "p"))
        .find(|r| two.home(r) == 1)
        .unwrap();
    store.create(&rec, Utc::now()).await.unwrap();
    let mut before_shards = machine::transition(&rec, machine::Input::CapacityReached, Utc::now(), &policy).unwrap();
    before_shards.account_shard = None;
    store.apply(&rec, &before_shards).await.unwrap();
    assert_eq!(shard_counts(&store).await, [(0, 1, Some(2)), (0, 0, Some(1))]);
    let again = machine::transition(&before_shards, machine::Input::CapacityReached, Utc::now(), &policy).unwrap();
    assert_eq!(again.account_shard, Some(1));
    store.apply(&before_shards, &again).await.unwrap();
    assert_eq!(shard_counts(&store).await, [(0, 0, Some(2)), (0, 1, Some(1))]);
    let ledger = store.ledger(&rec.tenant_id).await.unwrap();
    assert_eq!(
        (ledger.totals.waiting, ledger.totals.queued),
        (1, 1),
        "the tenant's counters stay"
    );
}

/// A woken claim that moves to a full shard is refused as the account
/// being full, and writes nothing.
async fn a_moving_claim_to_a_full_shard_is_refused<S: OperationStore>(store: S) {
    split_for_this_deployment(&store).await;
    let recs: Vec<OperationRecord> = (0..3)
        .map(|i| record_for("tenant-full", &format!("f{i}"), "p"))
        .collect();
    for r in &recs {
        store.create(r, Utc::now()).await.unwrap();
    }
    store.apply(&recs[0], &claimed_on(&recs[0], 0)).await.unwrap();
    store.apply(&recs[1], &claimed_on(&recs[1], 0)).await.unwrap();
    let waiting = waiting_on(&recs[2], 1);
    store.apply(&recs[2], &waiting).await.unwrap();
    assert!(matches!(
        store.apply(&waiting, &claimed_on(&waiting, 0)).await,
        Err(StoreError::AccountFull)
    ));
    assert_eq!(shard_counts(&store).await, [(2, 0, Some(2)), (0, 1, Some(1))]);
}

/// An operator's limit below the shards leaves a shard a part of 0: it
/// refuses even its first claim. The learned limit's mark counts the jobs
/// ended on every shard.
async fn a_shard_with_no_part_admits_nothing_and_the_mark_counts_every_shard<S: OperationStore>(store: S) {
    split_for_this_deployment(&store).await;
    let recs: Vec<OperationRecord> = (0..3)
        .map(|i| record_for("tenant-none", &format!("n{i}"), "p"))
        .collect();
    for r in &recs {
        store.create(r, Utc::now()).await.unwrap();
    }
    // A job ends on shard 1 first.
    let on_one = claimed_on(&recs[0], 1);
    store.apply(&recs[0], &on_one).await.unwrap();
    let accepted = accepted_with(&on_one, "job-none-1", Some(1.0));
    store.apply(&on_one, &accepted).await.unwrap();
    store
        .apply(&accepted, &rendered(&accepted, "job-none-1"))
        .await
        .unwrap();
    store.set_account_limit(Some(1)).await.unwrap();
    assert_eq!(shard_counts(&store).await, [(0, 0, Some(1)), (0, 0, Some(0))]);
    assert!(matches!(
        store.apply(&recs[1], &claimed_on(&recs[1], 1)).await,
        Err(StoreError::AccountFull)
    ));
    store.apply(&recs[2], &claimed_on(&recs[2], 0)).await.unwrap();
    assert!(store.learn_account_limit(None, Some(1), None, None).await.unwrap());
    let account = store.account().await.unwrap();
    assert_eq!(
        (account.jobs_ended, account.learned_mark, account.learned),
        (1, 1, Some(1))
    );
}

/// Where the next sweep run starts: none until a run cut short records
/// one, then the last recorded.
async fn the_sweep_start_is_the_last_recorded<S: OperationStore>(store: S) {
    assert_eq!(store.sweep_start().await.unwrap(), None);
    store.set_sweep_start(5).await.unwrap();
    assert_eq!(store.sweep_start().await.unwrap(), Some(5));
    store.set_sweep_start(2).await.unwrap();
    assert_eq!(store.sweep_start().await.unwrap(), Some(2));
}

/// Found at scale: a claim's condition read the limit on its own shard
/// item, and the limits were split for a new shard count only when the
/// account was read, which fresh claims never do. After the count went
/// from 1 to 4, shards 1-3 admitted without bound. Now a claim holds to
/// limits split for its deployment's count: a shard not split for it
/// admits nothing until a read splits the limits, in either direction.
async fn no_claim_admits_past_the_limit_while_the_shard_count_changes<S: OperationStore + Deployed>(store: S) {
    let one = store.deployed_with(1);
    one.set_account_limit(Some(10)).await.unwrap();
    let four = store.deployed_with(4);
    // Raised to four shards: claims before any read of the account.
    for shard in 1..4 {
        assert_eq!(
            claims_admitted(&four, "raised", shard, 5).await,
            0,
            "shard {shard} is not split for four yet"
        );
    }
    // A read splits the limit of 10 into 3, 3, 2, 2.
    assert_eq!(four.account().await.unwrap().set_limit, Some(10));
    let admitted: Vec<usize> = {
        let mut v = Vec::new();
        for shard in 0..4 {
            v.push(claims_admitted(&four, "split", shard, 5).await);
        }
        v
    };
    assert_eq!(admitted, [3, 3, 2, 2], "each shard under its part");
    // Back to one item, a limit of 2: the shards of four lose their parts.
    one.set_account_limit(Some(2)).await.unwrap();
    // A deployment still on four shards, before it reads the account.
    let stale = store.deployed_with(4);
    for shard in 1..4 {
        assert_eq!(claims_admitted(&stale, "lowered", shard, 2).await, 0, "shard {shard}");
    }
    let account = one.account().await.unwrap();
    assert_eq!((account.in_flight, account.set_limit), (10, Some(2)));
}

/// Lowered to one shard, the account charges the jobs the shards it left
/// still count until they end: shard 0 admits only the limit less those
/// jobs, under the limit it had, an operator's new one and a lesson; once
/// they end, it admits the whole limit again. One shard wrote the limits
/// whole and admitted up to the limit beside those jobs.
async fn lowered_to_one_shard_the_account_charges_the_jobs_the_others_count<S: OperationStore + Deployed>(store: S) {
    let four = store.deployed_with(4);
    four.set_account_limit(Some(10)).await.unwrap();
    let running = running_on(&four, 1..4, 2).await;
    let one = store.deployed_with(1);
    assert_eq!(one.account().await.unwrap().in_flight, 6);
    assert_eq!(
        claims_admitted(&one, "lowered", 0, 6).await,
        4,
        "10 less the 6 the others count"
    );
    one.set_account_limit(Some(12)).await.unwrap();
    assert_eq!(
        claims_admitted(&one, "raised", 0, 4).await,
        2,
        "an operator's limit of 12"
    );
    let seen = one.account().await.unwrap().learned;
    assert!(one.learn_account_limit(seen, Some(11), None, None).await.unwrap());
    assert_eq!(
        claims_admitted(&one, "learned", 0, 2).await,
        0,
        "a lesson of 11, 12 running"
    );
    // The others' jobs render: shard 0 alone counts 6 of 12, and the jobs
    // ended on the shards the read drops are still counted (a lesson's
    // mark is set against their sum).
    for (i, claimed) in running.into_iter().enumerate() {
        let job = format!("job-{i}");
        let accepted = genace_localaws::accepted_with(&claimed, &job, None);
        four.apply(&claimed, &accepted).await.unwrap();
        let done = genace_localaws::rendered(&accepted, &job);
        four.apply(&accepted, &done).await.unwrap();
    }
    let account = one.account().await.unwrap();
    assert_eq!((account.in_flight, account.limit()), (6, Some(11)));
    assert_eq!(
        one.account().await.unwrap().jobs_ended,
        6,
        "ended on the dropped shards"
    );
    assert_eq!(
        claims_admitted(&one, "drained", 0, 6).await,
        5,
        "the whole lesson again"
    );
}

/// Parts split over counts are split again when they hold back what the
/// account may admit: once the jobs of the shards a lower count left have
/// ended, and once the account is back under a lowered limit.
async fn parts_that_hold_back_slots_are_split_again<S: OperationStore + Deployed>(store: S) {
    let two = store.deployed_with(2);
    two.set_account_limit(Some(6)).await.unwrap();
    // Three jobs on each shard, then the limit lowered to 4: parts 0, 0.
    let mut running = running_on(&two, 0..2, 3).await;
    two.set_account_limit(Some(4)).await.unwrap();
    assert_eq!(claims_admitted(&two, "over", 0, 1).await, 0);
    // Three jobs end (released): 3 in flight under a limit of 4.
    release_all(&two, running.drain(..3).collect()).await;
    let shards = two.account_shards().await.unwrap();
    let free: u64 = shards.iter().filter_map(|s| s.free_slots()).sum();
    assert_eq!(free, 1, "the read split the parts again: {shards:?}");
    assert_eq!(
        claims_admitted(&two, "under", 0, 1).await + claims_admitted(&two, "under", 1, 1).await,
        1
    );
}

genace_localaws::contract_tests!(
    memory_sharded => genace_memory::MemoryStore::default()
        .with_account_limit(Some(3))
        .with_account_shards(genace_core::shard::AccountShards::new(2).unwrap()),
    dynamodb_sharded => |env| env
        .store()
        .with_account_limit(Some(3))
        .with_account_shards(genace_core::shard::AccountShards::new(2).unwrap());
    each_account_shard_admits_its_part_of_the_limit,
    account_limits_are_split_over_the_shards,
    a_woken_claim_takes_a_slot_on_another_shard,
    a_wait_moved_to_its_home_shard_moves_its_counts,
    a_moving_claim_to_a_full_shard_is_refused,
    a_shard_with_no_part_admits_nothing_and_the_mark_counts_every_shard,
);

/// A lesson saves its raise window and its time; a lesson without a
/// window removes it, a raise (no time) keeps the time of the last lesson,
/// and an operator's limit forgets all of it.
async fn a_lesson_keeps_its_raise_window_and_time<S: OperationStore>(store: S) {
    let taught = chrono::DateTime::from_timestamp_millis(1_800_000_000_123).unwrap();
    let learn = |seen, learned, every, at| store.learn_account_limit(seen, learned, every, at);
    assert!(learn(None, Some(2), Some(8), Some(taught)).await.unwrap());
    let account = store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.raise_every, account.learned_at_ms),
        (Some(2), Some(8), Some(taught.timestamp_millis()))
    );
    let later = taught + chrono::Duration::seconds(60);
    assert!(learn(Some(2), Some(1), None, Some(later)).await.unwrap());
    let account = store.account().await.unwrap();
    assert_eq!(
        (account.learned, account.raise_every, account.learned_at_ms),
        (Some(1), None, Some(later.timestamp_millis()))
    );
    assert!(learn(Some(1), Some(2), Some(4), None).await.unwrap());
    let account = store.account().await.unwrap();
    assert_eq!(
        (account.raise_every, account.learned_at_ms),
        (Some(4), Some(later.timestamp_millis()))
    );
    let back = store.set_account_limit(None).await.unwrap();
    assert_eq!((back.learned, back.raise_every, back.learned_at_ms), (None, None, None));
}

genace_localaws::contract_tests!(
    memory_limited => genace_memory::MemoryStore::default().with_account_limit(Some(2)),
    dynamodb_limited => |env| env.store().with_account_limit(Some(2));
    the_account_admits_claims_while_it_has_a_free_slot,
    claims_of_many_tenants_race_for_the_last_slots,
    operators_and_learned_account_limits_admit_claims,
    a_lesson_keeps_its_raise_window_and_time,
    a_claim_that_did_not_wait_yields_to_one_that_waits_for_a_slot,
);

/// Render times are counted per class of job, each in its bucket, and read
/// back as a histogram; a class never seen reads empty.
async fn render_times_are_counted_per_class<S: OperationStore>(store: S) {
    use genace_core::render::{RenderClass, RenderTimes};
    let short = RenderClass::from_stored("genace-video-2|video|10|720p");
    let long = RenderClass::from_stored("genace-video-2|video|40|1080p");
    assert_eq!(store.render_times(&short).await.unwrap(), RenderTimes::default());
    for seconds in [9.0, 10.0, 10.5, 11.0, 300.0] {
        store.add_render_time(&short, seconds).await.unwrap();
    }
    store.add_render_time(&long, 120.0).await.unwrap();
    let times = store.render_times(&short).await.unwrap();
    assert_eq!(times.samples(), 5);
    assert_eq!(times.counts()[RenderTimes::bucket(300.0)], 1);
    let around_ten: u32 = times.counts()[RenderTimes::bucket(9.0)..=RenderTimes::bucket(11.0)]
        .iter()
        .sum();
    assert_eq!(around_ten, 4);
    let median = times.quantile(0.5).unwrap();
    assert!((8.0..13.0).contains(&median), "{median}");
    assert_eq!(store.render_times(&long).await.unwrap().samples(), 1);
}

genace_localaws::contract_tests!(
    memory => genace_memory::MemoryStore::default(),
    dynamodb => |env| env.store();
    a_duplicate_create_returns_the_stored_record,
    a_retried_create_that_landed_is_new,
    expired_records_are_absent_and_replaceable,
    writes_are_conditional_on_the_version_read,
    fifty_concurrent_claims_have_one_winner,
    the_due_index_is_sparse_sharded_ordered_and_paged,
    case_listing_is_per_tenant_and_paged,
    every_tenants_cases_are_listed_oldest_first_and_filtered,
    forged_case_cursors_are_refused,
    open_cases_are_counted_by_reason_and_a_closed_one_leaves,
    the_job_index_finds_the_holder,
    the_ledger_follows_every_credit_move,
    an_abandon_keeps_what_genace_charged,
    a_claim_past_the_spend_limit_writes_nothing,
    two_claims_race_for_room_for_one,
    operators_page_through_every_ledger,
    a_tenants_webhook_is_set_read_and_removed,
    without_an_account_limit_slots_are_only_counted,
    the_waiting_order_is_per_tenant_and_oldest_first,
    the_waiting_set_holds_only_tenants_that_wait,
    a_tenant_that_waits_again_joins_behind_those_that_joined_since,
    tenants_sent_to_the_back_are_read_last,
    tenants_held_back_by_their_own_limits_are_parked,
    a_tenants_own_limit_refuses_a_claim_past_it,
    batch_yields_to_interactive_for_a_bounded_time,
    listings_are_newest_first_filtered_and_paged,
    endpoint_sets_change_only_on_the_version_read,
    receivers_are_read_for_many_tenants_at_once,
    delivery_logs_page_newest_first_per_endpoint,
    kept_events_are_per_tenant_and_expire,
    render_times_are_counted_per_class,
    the_sweep_start_is_the_last_recorded,
    no_claim_admits_past_the_limit_while_the_shard_count_changes,
    lowered_to_one_shard_the_account_charges_the_jobs_the_others_count,
    parts_that_hold_back_slots_are_split_again,
);

/// A handle on the same table for a deployment with `shards` account
/// shards (a rolling change of the count has two alive at once).
pub trait Deployed: Sized {
    fn deployed_with(&self, shards: u16) -> Self;
}

impl Deployed for genace_aws::DynamoStore {
    fn deployed_with(&self, shards: u16) -> Self {
        self.clone()
            .with_account_shards(genace_core::shard::AccountShards::new(shards).expect("1 to the most shards"))
    }
}

impl Deployed for genace_memory::MemoryStore {
    fn deployed_with(&self, shards: u16) -> Self {
        self.clone()
            .with_account_shards(genace_core::shard::AccountShards::new(shards).expect("1 to the most shards"))
    }
}
