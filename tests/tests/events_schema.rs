//! docs/events.schema.json against real records: operations driven through
//! every kind of change on the local endpoint, their changes read back off
//! the table's stream by the local events pipe (the deployed pipe's filter
//! and enrichment), and every event checked against the documented schema.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use genace_core::events::Kind;
use genace_core::machine::{self, AcceptedJob, Decision, Input, Policy, Resolution};
use genace_core::record::{DeliveredObject, OperationRecord, OutputRef, RemoteError};
use genace_core::remote::{JobSnapshot, RenderStatus};
use genace_localaws::{LocalAws, intent_record};
use genace_stages::ports::table::prelude::*;
use serde_json::Value;

async fn step<S: OperationStore>(store: &S, rec: OperationRecord, event: Input<'_>) -> OperationRecord {
    let next = machine::transition(&rec, event, Utc::now(), &Policy::default()).expect("an allowed change");
    store.apply(&rec, &next).await.expect("written");
    next
}

fn snapshot(status: RenderStatus, outputs: Option<Vec<OutputRef>>) -> JobSnapshot {
    JobSnapshot {
        id: Some("job-events".into()),
        state: "x".into(),
        status,
        outputs,
        outputs_unreadable: None,
        client_reference: None,
        error: None,
    }
}

fn error(kind: &str, status: u16) -> RemoteError {
    RemoteError {
        kind: kind.into(),
        status: Some(status),
        detail: "refused".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn every_event_type_from_real_stream_records_matches_the_documented_schema() {
    let env = LocalAws::fresh().await;
    let store = env.store();
    let file = std::env::temp_dir().join(format!("genace-events-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let mut tasks = tokio::task::JoinSet::new();
    let ctx = genace_core::events::Context {
        bucket: Some(env.config.bucket.clone()),
    };
    genace_local::events::spawn_pipe(
        &mut tasks,
        &env.sdk,
        env.config.table.clone(),
        file.clone(),
        None,
        move |batch| {
            std::future::ready(
                genace_aws::stream::lifecycle_events(&batch, &ctx)
                    .map(|events| events.iter().map(|e| serde_json::to_value(e).unwrap()).collect())
                    .map_err(|e| e.to_string()),
            )
        },
    );
    let now = Utc::now();
    let create = |key: &str| {
        let rec = intent_record("tenant-events", key, "p");
        let store = store.clone();
        async move {
            store.create(&rec, now).await.unwrap();
            rec
        }
    };
    let job = AcceptedJob {
        job_id: "job-events".into(),
        state: Some("queued".into()),
        model: Some("m".into()),
        created_at: None,
        held_credits: Some(12.5),
    };

    // Accepted, rendered, delivered.
    let a = create("delivered").await;
    let a = step(
        &store,
        step(&store, a, Input::ClaimDispatch { token: "tok", shard: 0 }).await,
        Input::Accepted {
            token: "tok",
            job: &job,
        },
    )
    .await;
    let outputs = vec![OutputRef {
        url: "https://cdn.example/a.mp4".into(),
        content_type: Some("video/mp4".into()),
    }];
    let done = snapshot(RenderStatus::Succeeded, Some(outputs));
    let observed = Input::Observed(genace_core::machine::Look {
        snapshot: &done,
        next_check: now,
        stalled: None,
        seen: &Default::default(),
    });
    let a = step(&store, a, observed).await;
    let a = step(&store, a, Input::ClaimDelivery { token: "d" }).await;
    let objects = [DeliveredObject {
        key: "outputs/tenant-events/x/output-0.mp4".into(),
        bytes: 5,
        sha256: "a".repeat(64),
        content_type: "video/mp4".into(),
    }];
    step(
        &store,
        a,
        Input::Delivered {
            token: "d",
            objects: &objects,
        },
    )
    .await;

    // Rejected.
    let b = create("rejected").await;
    let rejected = error("http_422", 422);
    step(
        &store,
        step(&store, b, Input::ClaimDispatch { token: "tok", shard: 0 }).await,
        Input::Rejected {
            token: "tok",
            error: &rejected,
        },
    )
    .await;

    // Held for the account, then released by an operator.
    let c = create("held").await;
    let refused = error("http_402", 402);
    let c = step(
        &store,
        step(&store, c, Input::ClaimDispatch { token: "tok", shard: 0 }).await,
        Input::AccountRefused {
            token: "tok",
            error: &refused,
        },
    )
    .await;
    let release = Input::Resolved(Decision {
        resolution: &Resolution::ReleaseHold,
        actor: "ops",
        reason: "card updated",
    });
    step(&store, c, release).await;

    // Render failed.
    let d = create("failed").await;
    let d = step(
        &store,
        step(&store, d, Input::ClaimDispatch { token: "tok", shard: 0 }).await,
        Input::Accepted {
            token: "tok",
            job: &job,
        },
    )
    .await;
    let failed = snapshot(RenderStatus::Failed, None);
    let observed = Input::Observed(genace_core::machine::Look {
        snapshot: &failed,
        next_check: now,
        stalled: None,
        seen: &Default::default(),
    });
    step(&store, d, observed).await;

    // Genace does not know the saved job; an operator attaches the right one.
    let f = create("attached").await;
    let f = step(
        &store,
        step(&store, f, Input::ClaimDispatch { token: "tok", shard: 0 }).await,
        Input::Accepted {
            token: "tok",
            job: &job,
        },
    )
    .await;
    let missing = Input::CaseNeeded(genace_core::machine::NeededCase {
        reason: genace_core::record::CaseReason::RemoteJobMissing,
        evidence: "Genace answered 404",
        keep_due: false,
    });
    let f = step(&store, f, missing).await;
    let attach = Resolution::AttachRemoteJob {
        job_id: "job-found".into(),
    };
    let attach = Input::Resolved(Decision {
        resolution: &attach,
        actor: "ops",
        reason: "found in the Genace console",
    });
    step(&store, f, attach).await;

    // Waiting for the spend limit.
    let e = create("limited").await;
    step(&store, e, Input::SpendLimitReached).await;

    // Waiting for a slot of the Genace account.
    let g = create("capacity").await;
    let g = step(&store, g, Input::CapacityReached).await;
    // ... and taken back while it waits.
    let by = g.tenant_id.as_str().to_owned();
    step(
        &store,
        g,
        Input::Cancel {
            by: &by,
            reason: genace_core::record::CancelReason::Requested,
        },
    )
    .await;

    // Read until every type arrived.
    let schema: Value = serde_json::from_str(include_str!("../../docs/events.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    // Every type arriving is not enough: `queued` comes twice (the spend
    // limit and a full account), so wait for the count the writes above
    // announce, then a little longer so that an extra event would show.
    const EXPECTED: usize = 16;
    let read = || {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    for _ in 0..120 {
        if read().len() >= EXPECTED {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_millis(750)).await;
    let events = read();
    tasks.abort_all();
    let _ = std::fs::remove_file(&file);
    let kinds: BTreeSet<String> = events
        .iter()
        .map(|e| e["detail-type"].as_str().unwrap().to_owned())
        .collect();
    for k in Kind::ALL {
        assert!(kinds.contains(k.as_str()), "no {} among {kinds:?}", k.as_str());
    }
    for e in &events {
        assert_eq!(e["source"], "genace.operations");
        if let Err(err) = validator.validate(&e["detail"]) {
            panic!("{err}\nevent: {e}");
        }
    }
    // Each documented type is named in docs/events.md.
    let doc = include_str!("../../docs/events.md");
    for k in Kind::ALL {
        assert!(
            doc.contains(&format!("`{}`", k.as_str())),
            "docs/events.md lacks {}",
            k.as_str()
        );
    }
    // Exactly the changes that announce something did: one event per type
    // and operation here, none for the claims, deliveries started or the
    // ledger items written alongside.
    let ids: BTreeSet<&str> = events.iter().map(|e| e["detail"]["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), events.len(), "an event was written twice");
    assert_eq!(
        events.len(),
        EXPECTED,
        "{:#?}",
        events.iter().map(|e| &e["detail"]["id"]).collect::<Vec<_>>()
    );
}
