//! The table test of the lifecycle: every transition by name, every
//! refusal, the invariants, and what each resolution keeps of the money.
//! Kept apart from the rules it checks so each file of the table reads whole.

use super::*;
use crate::domain::Fault;
use crate::record::{CancelReason, Claim, DeliveryState, MAX_ERASED_KEYS, ReconciliationCase, RemoteError, Settlement};
use crate::record::{DeliveredObject, OutputRef};
pub use crate::remote::AcceptedJob;
use crate::remote::{JobSnapshot, RenderStatus};
use chrono::Duration;
use serde_json::json;

// The tests speak of each transition by name; every one goes through
// the one table, [`transition`].
type Next = Result<OperationRecord, Refusal>;

fn claim_dispatch(r: &OperationRecord, token: &str, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(r, Input::ClaimDispatch { token, shard: 0 }, now, p)
}
fn release_claim(r: &OperationRecord, token: &str, retry_at: DateTime<Utc>, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(
        r,
        Input::RateLimited {
            token,
            retry_at,
            busy: false,
        },
        now,
        p,
    )
}
fn hold_for_account(r: &OperationRecord, token: &str, error: RemoteError, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(r, Input::AccountRefused { token, error: &error }, now, p)
}
fn accept(r: &OperationRecord, token: &str, job: &AcceptedJob, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(r, Input::Accepted { token, job }, now, p)
}
fn submit_failed(r: &OperationRecord, token: &str, job_id: &str, error: RemoteError, now: DateTime<Utc>) -> Next {
    transition(
        r,
        Input::SubmitFailed {
            token,
            job_id,
            error: &error,
        },
        now,
        &Policy::default(),
    )
}
fn reject(r: &OperationRecord, token: &str, error: RemoteError, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(r, Input::Rejected { token, error: &error }, now, p)
}
fn mark_uncertain(r: &OperationRecord, token: &str, evidence: &str, now: DateTime<Utc>) -> Next {
    transition(r, Input::OutcomeUnknown { token, evidence }, now, &Policy::default())
}
fn interrupt(r: &OperationRecord, evidence: &str, now: DateTime<Utc>) -> Next {
    transition(r, Input::LeaseExpired { evidence }, now, &Policy::default())
}
fn observe(
    r: &OperationRecord,
    snapshot: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    p: &Policy,
) -> Next {
    transition(
        r,
        Input::Observed(Look {
            snapshot,
            next_check,
            stalled: None,
            seen: &Default::default(),
        }),
        now,
        p,
    )
}
fn open_case(r: &OperationRecord, reason: CaseReason, evidence: &str, keep_due: bool, now: DateTime<Utc>) -> Next {
    transition(
        r,
        Input::CaseNeeded(NeededCase {
            reason,
            evidence,
            keep_due,
        }),
        now,
        &Policy::default(),
    )
}
fn reschedule(r: &OperationRecord, due: DateTime<Utc>, now: DateTime<Utc>) -> OperationRecord {
    transition(r, Input::Reschedule { due }, now, &Policy::default()).unwrap()
}
fn claim_delivery(r: &OperationRecord, token: &str, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(r, Input::ClaimDelivery { token }, now, p)
}
fn give_up_delivery(r: &OperationRecord, now: DateTime<Utc>) -> Next {
    transition(r, Input::DeliveryLapsed, now, &Policy::default())
}
fn delivery_attempt_failed(
    r: &OperationRecord,
    token: &str,
    error: &str,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
    p: &Policy,
) -> Next {
    transition(r, Input::DeliveryFailed { token, error, retry_at }, now, p)
}
fn delivery_refused(r: &OperationRecord, token: &str, reason: CaseReason, evidence: &str, now: DateTime<Utc>) -> Next {
    transition(
        r,
        Input::DeliveryRefused(RefusedDelivery {
            token,
            reason,
            evidence,
        }),
        now,
        &Policy::default(),
    )
}
fn delivered(r: &OperationRecord, token: &str, objects: Vec<DeliveredObject>, now: DateTime<Utc>, p: &Policy) -> Next {
    transition(
        r,
        Input::Delivered {
            token,
            objects: &objects,
        },
        now,
        p,
    )
}
fn resolve(
    r: &OperationRecord,
    resolution: &Resolution,
    actor: &str,
    reason: &str,
    now: DateTime<Utc>,
    p: &Policy,
) -> Next {
    transition(
        r,
        Input::Resolved(Decision {
            resolution,
            actor,
            reason,
        }),
        now,
        p,
    )
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn prepared() -> OperationRecord {
    crate::record::sample_prepared(t0())
}

fn job(id: &str) -> AcceptedJob {
    AcceptedJob {
        job_id: id.into(),
        state: Some("running".into()),
        model: Some("m".into()),
        created_at: Some("2026-01-01T00:00:01Z".into()),
        held_credits: Some(12.5),
    }
}

fn err(kind: &str) -> RemoteError {
    RemoteError {
        kind: kind.into(),
        status: Some(502),
        detail: "boom".into(),
    }
}

fn submitting() -> OperationRecord {
    claim_dispatch(&prepared(), "tok", t0(), &Policy::default()).unwrap()
}

fn with_phase(phase: Phase) -> OperationRecord {
    let mut r = prepared();
    r.phase = phase;
    r
}

#[test]
fn a_new_intent_is_prepared_and_due_for_dispatch() {
    let r = prepared();
    assert_eq!(r.phase, Phase::Prepared);
    assert_eq!(r.delivery_state, DeliveryState::NotCollected);
    assert_eq!(r.version, 1);
    assert_eq!(r.due_at_ms, Some((t0() + Duration::seconds(60)).timestamp_millis()));
    assert!(r.due_pk.starts_with("DUE#"));
    assert_eq!(r.expires_at_seconds, None);
}

#[test]
fn claim_moves_prepared_to_submitting_with_a_lease() {
    let r = submitting();
    assert_eq!(r.phase, Phase::Submitting);
    assert_eq!(r.version, 2);
    assert_eq!(r.dispatch_attempts, 1);
    let c = r.claim.as_ref().unwrap();
    assert_eq!(c.token, "tok");
    assert_eq!(c.lease_expires_at, t0() + Duration::seconds(120));
    assert_eq!(r.due_at_ms, Some(c.lease_expires_at.timestamp_millis()));
}

#[test]
fn claim_is_refused_outside_prepared() {
    let live = claim_dispatch(&submitting(), "other", t0(), &Policy::default());
    assert!(matches!(live, Err(Refusal::LeaseLive { .. })));
    let later = t0() + Duration::seconds(121);
    let expired = claim_dispatch(&submitting(), "other", later, &Policy::default());
    assert!(matches!(
        expired,
        Err(Refusal::WrongPhase {
            actual: Phase::Submitting,
            ..
        })
    ));
    for phase in [
        Phase::Accepted,
        Phase::Rendered,
        Phase::RenderFailed,
        Phase::SubmitFailed,
        Phase::Rejected,
        Phase::Uncertain,
        Phase::Abandoned,
    ] {
        let r = claim_dispatch(&with_phase(phase), "tok", t0(), &Policy::default());
        assert!(matches!(r, Err(Refusal::WrongPhase { actual, .. }) if actual == phase));
    }
}

#[test]
fn accept_needs_the_claim_token() {
    let p = Policy::default();
    let r = accept(&submitting(), "tok", &job("J1"), t0(), &p).unwrap();
    assert_eq!(r.phase, Phase::Accepted);
    assert_eq!(r.remote_job_id.as_deref(), Some("J1"));
    assert_eq!(r.remote_state.as_deref(), Some("running"));
    assert_eq!(r.held_credits, Some(12.5));
    assert_eq!(r.claim, None);
    assert_eq!(r.accepted_at, Some(t0()));
    assert_eq!(
        accept(&submitting(), "stolen", &job("J1"), t0(), &p),
        Err(Refusal::NotClaimant)
    );
    assert!(matches!(
        accept(&prepared(), "tok", &job("J1"), t0(), &p),
        Err(Refusal::WrongPhase {
            actual: Phase::Prepared,
            ..
        })
    ));
}

#[test]
fn accept_is_idempotent_for_the_same_job_and_refuses_another() {
    let p = Policy::default();
    let accepted = accept(&submitting(), "tok", &job("J1"), t0(), &p).unwrap();
    assert_eq!(accept(&accepted, "tok", &job("J1"), t0(), &p).unwrap(), accepted);
    assert_eq!(
        accept(&accepted, "tok", &job("J2"), t0(), &p),
        Err(Refusal::DifferentRemoteJob { existing: "J1".into() })
    );
}

/// Once a 502 named the job, a 202 is refused even for that same job: the
/// refund is pending, and a retried 202 would undo the settlement.
#[test]
fn a_202_for_a_job_a_502_already_named_is_refused() {
    let p = Policy::default();
    let failed = submit_failed(&submitting(), "tok", "J5", err("http_502"), t0()).unwrap();
    for job_id in ["J5", "J6"] {
        assert_eq!(
            accept(&failed, "tok", &job(job_id), t0(), &p),
            Err(Refusal::DifferentRemoteJob { existing: "J5".into() }),
            "{job_id}"
        );
    }
}

#[test]
fn accept_from_uncertain_keeps_the_job_and_closes_the_case() {
    let p = Policy::default();
    let later = t0() + Duration::seconds(200);
    let interrupted = interrupt(&submitting(), "lease expired", later).unwrap();
    let r = accept(&interrupted, "tok", &job("J9"), later, &p).unwrap();
    assert_eq!(r.phase, Phase::Accepted);
    assert_eq!(r.case, None);
    assert_eq!(
        accept(&interrupted, "other", &job("J9"), later, &p),
        Err(Refusal::NotClaimant)
    );
}

#[test]
fn submit_failed_saves_the_job_and_opens_settlement() {
    let r = submit_failed(&submitting(), "tok", "J5", err("http_502"), t0()).unwrap();
    assert_eq!(r.phase, Phase::SubmitFailed);
    assert_eq!(r.remote_job_id.as_deref(), Some("J5"));
    assert_eq!(r.settlement, Some(Settlement::Pending));
    assert_eq!(r.case.as_ref().unwrap().reason, CaseReason::SettlementPending);
    assert_eq!(r.due_at_ms, None);
    assert_eq!(
        submit_failed(&submitting(), "x", "J5", err("e"), t0()),
        Err(Refusal::NotClaimant)
    );
    assert!(submit_failed(&prepared(), "tok", "J5", err("e"), t0()).is_err());
    let later = t0() + Duration::seconds(200);
    let interrupted = interrupt(&submitting(), "lease expired", later).unwrap();
    let late = submit_failed(&interrupted, "tok", "J5", err("http_502"), later).unwrap();
    assert_eq!(late.phase, Phase::SubmitFailed);
    assert_eq!(late.case.unwrap().reason, CaseReason::SettlementPending);
}

#[test]
fn reject_finishes_the_operation() {
    let p = Policy::default();
    let r = reject(&submitting(), "tok", err("http_400"), t0(), &p).unwrap();
    assert_eq!(r.phase, Phase::Rejected);
    assert_eq!(r.claim, None);
    assert_eq!(r.due_at_ms, None);
    assert_eq!(r.expires_at_seconds, Some((t0() + Duration::days(30)).timestamp()));
    assert!(reject(&with_phase(Phase::Accepted), "tok", err("e"), t0(), &p).is_err());
}

#[test]
fn release_after_429_returns_to_prepared() {
    let retry = t0() + Duration::seconds(30);
    let r = release_claim(&submitting(), "tok", retry, t0(), &Policy::default()).unwrap();
    assert_eq!(r.phase, Phase::Prepared);
    assert_eq!(r.claim, None);
    assert_eq!(r.due_at_ms, Some(retry.timestamp_millis()));
    assert_eq!(
        release_claim(&submitting(), "x", retry, t0(), &Policy::default()),
        Err(Refusal::NotClaimant)
    );
    assert!(release_claim(&with_phase(Phase::Uncertain), "tok", retry, t0(), &Policy::default()).is_err());
}

#[test]
fn unknown_outcome_is_uncertain_with_a_case() {
    let r = mark_uncertain(&submitting(), "tok", "timed out after 30s", t0()).unwrap();
    assert_eq!(r.phase, Phase::Uncertain);
    let case = r.case.unwrap();
    assert_eq!(case.reason, CaseReason::UnknownSubmitOutcome);
    assert_eq!(case.evidence, "timed out after 30s");
    assert_eq!(r.due_at_ms, None);
    assert_eq!(mark_uncertain(&submitting(), "x", "e", t0()), Err(Refusal::NotClaimant));
}

#[test]
fn interrupt_needs_an_expired_lease_and_never_returns_to_prepared() {
    assert!(matches!(
        interrupt(&submitting(), "e", t0()),
        Err(Refusal::LeaseLive { .. })
    ));
    let later = t0() + Duration::seconds(120);
    let r = interrupt(&submitting(), "lease expired", later).unwrap();
    assert_eq!(r.phase, Phase::Uncertain);
    assert_eq!(r.case.as_ref().unwrap().reason, CaseReason::InterruptedDispatch);
    assert_eq!(r.claim.as_ref().unwrap().token, "tok");
    // An uncertain operation can never be claimed again by itself.
    assert!(claim_dispatch(&r, "new", later, &Policy::default()).is_err());
    assert!(interrupt(&prepared(), "e", later).is_err());
}

fn accepted_rec() -> OperationRecord {
    accept(&submitting(), "tok", &job("J1"), t0(), &Policy::default()).unwrap()
}

fn snap(state: &str, status: RenderStatus) -> JobSnapshot {
    JobSnapshot {
        id: Some("J1".into()),
        state: state.into(),
        status,
        outputs: (status == RenderStatus::Succeeded).then(|| {
            vec![OutputRef {
                url: "https://cdn.example/o.mp4".into(),
                content_type: Some("video/mp4".into()),
            }]
        }),
        outputs_unreadable: None,
        client_reference: None,
        error: (status == RenderStatus::Failed).then(|| json!({"code": "nsfw"})),
    }
}

#[test]
fn observe_records_progress_and_skips_writes_that_change_nothing() {
    let p = Policy::default();
    let later = t0() + Duration::seconds(10);
    // Past the deadline the acceptance set (observe_grace): written.
    let next_check = t0() + p.observe_grace + Duration::seconds(60);
    let r = observe(
        &accepted_rec(),
        &snap("queued", RenderStatus::Running),
        later,
        next_check,
        &p,
    )
    .unwrap();
    assert_eq!(r.phase, Phase::Accepted);
    assert_eq!(r.remote_state.as_deref(), Some("queued"));
    assert_eq!(r.observed_at, Some(later));
    assert_eq!(r.due_at_ms, Some(next_check.timestamp_millis()));
    // The deadline still covers the next check: nothing to write, even
    // for a new non-terminal state.
    let same = observe(&r, &snap("queued", RenderStatus::Running), later, next_check, &p).unwrap();
    assert_eq!(same, r);
    let moved = observe(&r, &snap("running", RenderStatus::Running), later, next_check, &p).unwrap();
    assert_eq!(moved, r);
    // Past the deadline, the write carries the state seen.
    let beyond = next_check + Duration::seconds(1);
    let extended = observe(&r, &snap("running", RenderStatus::Running), later, beyond, &p).unwrap();
    assert_eq!(extended.version, r.version + 1);
    assert_eq!(extended.remote_state.as_deref(), Some("running"));
    assert_eq!(extended.due_at_ms, Some(beyond.timestamp_millis()));
    // A terminal state is always written.
    let done = observe(&r, &snap("completed", RenderStatus::Succeeded), later, next_check, &p).unwrap();
    assert_eq!(done.phase, Phase::Rendered);
}

#[test]
fn a_write_that_moves_a_looked_at_job_on_names_a_new_chain() {
    let p = Policy::default();
    let accepted = accepted_rec();
    let first = accepted.poll_chain.expect("saving the job names a chain");
    assert_eq!(first, accepted.version);
    // A look that only moves the deadline keeps the chain.
    let beyond = t0() + p.observe_grace + Duration::seconds(60);
    let looked = observe(&accepted, &snap("running", RenderStatus::Running), t0(), beyond, &p).unwrap();
    assert_eq!((looked.version, looked.poll_chain), (accepted.version + 1, Some(first)));
    // An operator's abandon of a stalled job: the chain the resolution
    // starts is not the one that looked before.
    let stalled = open_case(&looked, CaseReason::RenderStalled, "slow", true, t0()).unwrap();
    assert_eq!(stalled.poll_chain, Some(first), "a case alone keeps the chain");
    let abandoned = resolve(&stalled, &Resolution::Abandon, "ops", "user left", t0(), &p).unwrap();
    assert!(looked_at(&abandoned));
    assert_eq!(abandoned.poll_chain, Some(abandoned.version));
    assert_ne!(abandoned.poll_chain, Some(first));
}

#[test]
fn the_end_keeps_the_last_looks_of_its_chain() {
    let later = t0() + Duration::seconds(100);
    let seen = crate::record::Looks {
        count: 50,
        first_running_at: Some(t0() + Duration::seconds(7)),
        last_running_at: Some(later - Duration::seconds(2)),
        at: (0..50).map(|i| t0() + Duration::seconds(i)).collect(),
    };
    let input = Input::Observed(Look {
        snapshot: &snap("completed", RenderStatus::Succeeded),
        next_check: later,
        stalled: None,
        seen: &seen,
    });
    let done = transition(&accepted_rec(), input, later, &Policy::default()).unwrap();
    let d = done.detection.expect("the end is recorded");
    assert_eq!(
        (d.looks, d.last_running_at, d.ended_seen_at),
        (51, seen.last_running_at, later)
    );
    assert_eq!(d.first_running_at, seen.first_running_at);
    assert_eq!(d.looked_at.len(), crate::record::MAX_LOOKS_KEPT);
    let first_kept = 50 - (crate::record::MAX_LOOKS_KEPT as i64 - 1);
    assert_eq!(
        d.looked_at.first(),
        Some(&(t0() + Duration::seconds(first_kept))),
        "the last ones kept"
    );
    assert_eq!(d.looked_at.last(), Some(&later), "the end's own look last");
}

#[test]
fn observe_completes_once_and_never_overwrites_a_terminal_state() {
    let p = Policy::default();
    let done = observe(
        &accepted_rec(),
        &snap("completed", RenderStatus::Succeeded),
        t0(),
        t0(),
        &p,
    )
    .unwrap();
    assert_eq!(done.phase, Phase::Rendered);
    assert_eq!(done.outputs.as_ref().unwrap().len(), 1);
    assert_eq!(done.delivery_state, DeliveryState::NotCollected);
    assert!(done.due_at_ms.is_some(), "delivery is due");
    assert!(observe(&done, &snap("failed", RenderStatus::Failed), t0(), t0(), &p).is_err());

    let failed = observe(&accepted_rec(), &snap("failed", RenderStatus::Failed), t0(), t0(), &p).unwrap();
    assert_eq!(failed.phase, Phase::RenderFailed);
    assert!(failed.last_error.as_ref().unwrap().detail.contains("nsfw"));
    assert!(failed.expires_at_seconds.is_some());
    assert_eq!(failed.due_at_ms, None);
    assert!(observe(&failed, &snap("completed", RenderStatus::Succeeded), t0(), t0(), &p).is_err());
    assert!(observe(&prepared(), &snap("queued", RenderStatus::Running), t0(), t0(), &p).is_err());
}

#[test]
fn cases_on_accepted_operations() {
    let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
    assert_eq!(missing.phase, Phase::Accepted);
    assert_eq!(missing.case.as_ref().unwrap().reason, CaseReason::RemoteJobMissing);
    assert_eq!(missing.due_at_ms, None);
    assert_eq!(
        open_case(&missing, CaseReason::RemoteJobMissing, "again", false, t0()).unwrap(),
        missing
    );
    let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "6h", true, t0()).unwrap();
    assert!(stalled.due_at_ms.is_some(), "polling goes on");
    let done = observe(
        &stalled,
        &snap("completed", RenderStatus::Succeeded),
        t0(),
        t0(),
        &Policy::default(),
    )
    .unwrap();
    assert_eq!(done.case, None, "completion closes a stall case");
}

fn rendered() -> OperationRecord {
    observe(
        &accepted_rec(),
        &snap("completed", RenderStatus::Succeeded),
        t0(),
        t0(),
        &Policy::default(),
    )
    .unwrap()
}

fn object() -> DeliveredObject {
    DeliveredObject {
        key: "outputs/t/op/output-0.mp4".into(),
        bytes: 3,
        sha256: "ab".into(),
        content_type: "video/mp4".into(),
    }
}

#[test]
fn delivery_is_claimed_once_and_finishes_delivered() {
    let p = Policy::default();
    let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    assert_eq!(claimed.delivery_state, DeliveryState::Collecting);
    assert!(matches!(
        claim_delivery(&claimed, "d2", t0(), &p),
        Err(Refusal::LeaseLive { .. })
    ));
    let after_lease = t0() + p.delivery_lease + Duration::seconds(1);
    assert!(
        claim_delivery(&claimed, "d2", after_lease, &p).is_ok(),
        "an expired delivery claim may be taken over"
    );
    assert_eq!(
        delivered(&claimed, "other", vec![object()], t0(), &p),
        Err(Refusal::NotClaimant)
    );
    let done = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
    assert_eq!(done.delivery_state, DeliveryState::Delivered);
    assert_eq!(done.delivered_objects, vec![object()]);
    assert!(done.expires_at_seconds.is_some());
    assert!(matches!(
        claim_delivery(&done, "d3", t0(), &p),
        Err(Refusal::DeliveryFinished { .. })
    ));
    assert!(claim_delivery(&accepted_rec(), "d1", t0(), &p).is_err());
}

#[test]
fn failed_deliveries_retry_then_give_up_with_a_case() {
    let p = Policy {
        delivery_max_attempts: 2,
        ..Policy::default()
    };
    let retry_at = t0() + Duration::seconds(30);
    let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    let once = delivery_attempt_failed(&claimed, "d1", "503 from cdn", retry_at, t0(), &p).unwrap();
    assert_eq!(once.delivery_attempts, 1);
    assert_eq!(once.delivery_state, DeliveryState::Collecting);
    assert_eq!(once.delivery_claim, None);
    assert_eq!(once.due_at_ms, Some(retry_at.timestamp_millis()));
    assert_eq!(once.phase, Phase::Rendered, "never re-rendered");
    let again = claim_delivery(&once, "d2", t0(), &p).unwrap();
    let gave_up = delivery_attempt_failed(&again, "d2", "503 again", retry_at, t0(), &p).unwrap();
    assert_eq!(gave_up.delivery_state, DeliveryState::DeliveryFailed);
    assert_eq!(gave_up.case.unwrap().reason, CaseReason::DeliveryFailed);
    assert_eq!(gave_up.due_at_ms, None);
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
fn operators_resolve_only_from_the_right_phase_and_are_audited() {
    let p = Policy::default();
    let uncertain = mark_uncertain(&submitting(), "tok", "timeout", t0()).unwrap();
    let attach = Resolution::AttachRemoteJob { job_id: "J7".into() };
    let attached = resolve(
        &uncertain,
        &attach,
        "ops@example",
        "found it in the Genace console",
        t0(),
        &p,
    )
    .unwrap();
    assert_eq!(attached.phase, Phase::Accepted);
    assert_eq!(attached.remote_job_id.as_deref(), Some("J7"));
    assert_eq!(attached.case, None);
    let entry = attached.audit.last().unwrap();
    assert_eq!(
        (entry.actor.as_str(), entry.action.as_str(), entry.job_id.as_deref()),
        ("ops@example", "attach_remote_job", Some("J7"))
    );

    let retry = resolve(
        &uncertain,
        &Resolution::ConfirmNotCreated,
        "ops",
        "not in Genace",
        t0(),
        &p,
    )
    .unwrap();
    assert_eq!(retry.phase, Phase::Prepared);
    assert!(
        claim_dispatch(&retry, "new", t0(), &p).is_ok(),
        "one new dispatch is authorized"
    );

    for wrong in [Resolution::MarkSettled, Resolution::RedriveDelivery] {
        assert!(matches!(
            resolve(&uncertain, &wrong, "ops", "r", t0(), &p),
            Err(Refusal::WrongPhase { .. })
        ));
    }
    assert!(resolve(&accepted_rec(), &Resolution::ConfirmNotCreated, "ops", "r", t0(), &p).is_err());
    assert!(resolve(&accepted_rec(), &attach, "ops", "r", t0(), &p).is_err());
    assert!(
        resolve(&prepared(), &Resolution::Abandon, "ops", "r", t0(), &p).is_err(),
        "abandon needs a case"
    );

    let failed = submit_failed(&submitting(), "tok", "J5", err("http_502"), t0()).unwrap();
    let settled = resolve(&failed, &Resolution::MarkSettled, "ops", "refunded", t0(), &p).unwrap();
    assert_eq!(settled.settlement, Some(Settlement::Settled));
    assert!(settled.expires_at_seconds.is_some());
    assert!(resolve(&settled, &Resolution::MarkSettled, "ops", "again", t0(), &p).is_err());

    let p2 = Policy {
        delivery_max_attempts: 1,
        ..p
    };
    let claimed = claim_delivery(&rendered(), "d", t0(), &p2).unwrap();
    let failed_delivery = delivery_attempt_failed(&claimed, "d", "cdn down", t0(), t0(), &p2).unwrap();
    let redriven = resolve(
        &failed_delivery,
        &Resolution::RedriveDelivery,
        "ops",
        "cdn back",
        t0(),
        &p,
    )
    .unwrap();
    assert_eq!(
        (redriven.delivery_state, redriven.delivery_attempts),
        (DeliveryState::NotCollected, 0)
    );
    assert!(claim_delivery(&redriven, "d2", t0(), &p).is_ok());

    let abandoned = resolve(&uncertain, &Resolution::Abandon, "ops", "customer cancelled", t0(), &p).unwrap();
    assert_eq!(abandoned.phase, Phase::Abandoned);
    assert_eq!(abandoned.ledger_phase, Some(Phase::Uncertain));
    assert!(
        abandoned.expires_at_seconds.is_none() && abandoned.case.is_some(),
        "a job may exist: the case stays until an operator says"
    );
    let closed = resolve(&abandoned, &Resolution::ConfirmNotCreated, "ops", "none", t0(), &p).unwrap();
    assert!(closed.expires_at_seconds.is_some() && closed.case.is_none());
}

/// Records in every state a resolution can meet, reached through the
/// transitions themselves: each case reason of each phase, a spend-limit
/// wait on top of an account hold, and a finished operation or two.
fn resolvable_states() -> Vec<OperationRecord> {
    let p = Policy {
        rate_limit_max: 1,
        ..Policy::default()
    };
    let later = t0() + Duration::hours(3);
    let held = hold_for_account(&submitting(), "tok", err("http_402"), t0(), &p).unwrap();
    let held_then_waiting = transition(&held, Input::SpendLimitReached, t0(), &p).unwrap();
    let rate_limited = release_claim(&submitting(), "tok", later, t0(), &p).unwrap();
    let capacity_waiting = transition(&prepared(), Input::CapacityReached, t0(), &p).unwrap();
    let busy = Input::RateLimited {
        token: "tok",
        retry_at: later,
        busy: true,
    };
    let full_at_genace = transition(&submitting(), busy, t0(), &p).unwrap();
    let uncertain = mark_uncertain(&submitting(), "tok", "timeout", t0()).unwrap();
    let interrupted = interrupt(&submitting(), "lapsed", later).unwrap();
    let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
    let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "slow", true, t0()).unwrap();
    let failed = submit_failed(&submitting(), "tok", "J7", err("x"), t0()).unwrap();
    let settled = resolve(&failed, &Resolution::MarkSettled, "ops", "r", t0(), &p).unwrap();
    let mut no_outputs = snap("completed", RenderStatus::Succeeded);
    no_outputs.outputs = None;
    let outputs_missing = observe(&accepted_rec(), &no_outputs, t0(), t0(), &p).unwrap();
    let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
    let refused = delivery_refused(&claimed, "d", CaseReason::OutputUrlRefused, "port", t0()).unwrap();
    let render_failed = observe(&accepted_rec(), &snap("failed", RenderStatus::Failed), t0(), t0(), &p).unwrap();
    let rejected = reject(&submitting(), "tok", err("http_400"), t0(), &p).unwrap();
    vec![
        prepared(),
        held,
        held_then_waiting,
        rate_limited,
        capacity_waiting,
        full_at_genace,
        submitting(),
        uncertain,
        interrupted,
        accepted_rec(),
        missing,
        stalled,
        failed,
        settled,
        rendered(),
        outputs_missing,
        refused,
        render_failed,
        rejected,
    ]
}

fn all_resolutions() -> [Resolution; 6] {
    [
        Resolution::AttachRemoteJob { job_id: "J9".into() },
        Resolution::ConfirmNotCreated,
        Resolution::ReleaseHold,
        Resolution::MarkSettled,
        Resolution::RedriveDelivery,
        Resolution::Abandon,
    ]
}

/// Found by review: an abandon erased credits Genace charged, and an
/// abandon over a spend-limit wait left the wait on an abandoned record.
/// Every resolution from every state keeps the invariants; an abandon
/// moves no credit at all, and so does not the write after it.
#[test]
fn every_resolution_from_every_state_keeps_the_invariants_and_an_abandon_keeps_the_credits() {
    use crate::ledger::share;
    let p = Policy::default();
    let mut applied = 0;
    for rec in resolvable_states() {
        check_invariants(&rec).unwrap_or_else(|e| panic!("fixture {:?}: {e}", rec.phase));
        for resolution in all_resolutions() {
            let Ok(next) = resolve(&rec, &resolution, "ops", "r", t0(), &p) else {
                continue;
            };
            applied += 1;
            let what = format!(
                "{} from {:?} ({:?})",
                resolution.name(),
                rec.phase,
                rec.case.as_ref().map(|c| c.reason)
            );
            check_invariants(&next).unwrap_or_else(|e| panic!("{what}: {e}"));
            if resolution == Resolution::Abandon {
                // Credits and slots stay; leaving the waiting order is the abandon's point.
                let credits = |r: &OperationRecord| crate::ledger::Shares { waiting: 0, ..share(r) };
                assert_eq!(credits(&next), credits(&rec), "{what} moved credits");
                assert_eq!(share(&next).waiting, 0, "{what} left it waiting");
                assert_eq!(next.spend_hold, None, "{what} kept a spend-limit wait");
                // Whatever the abandoned operation still takes keeps the invariants too.
                for then in all_resolutions() {
                    if let Ok(after) = resolve(&next, &then, "ops", "r", t0(), &p) {
                        check_invariants(&after).unwrap_or_else(|e| panic!("{what}, then {}: {e}", then.name()));
                    }
                }
            }
        }
    }
    assert!(applied >= 20, "only {applied} resolutions applied");
}

#[test]
fn an_abandoned_job_keeps_its_hold_until_genace_says_it_is_over() {
    use crate::ledger::share;
    let p = Policy::default();
    let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "slow", true, t0()).unwrap();
    let abandoned = resolve(&stalled, &Resolution::Abandon, "ops", "user left", t0(), &p).unwrap();
    assert_eq!(share(&abandoned).held, crate::ledger::Millicredits::new(12_500));
    assert!(
        abandoned.due_at_ms.is_some() && abandoned.case.is_none(),
        "polling goes on"
    );
    let later = t0() + Duration::minutes(1);
    let next_check = later + Duration::minutes(5);
    let observed = |r: &OperationRecord, s: &JobSnapshot| {
        transition(
            r,
            Input::Observed(Look {
                snapshot: s,
                next_check,
                stalled: Some("slow"),
                seen: &Default::default(),
            }),
            later,
            &p,
        )
    };
    let running = observed(&abandoned, &snap("running", RenderStatus::Running)).unwrap();
    assert_eq!(
        (running.phase, running.case.clone()),
        (Phase::Abandoned, None),
        "no stall case"
    );
    let done = observed(&running, &snap("completed", RenderStatus::Succeeded)).unwrap();
    assert_eq!(
        (done.phase, done.ledger_phase),
        (Phase::Abandoned, Some(Phase::Rendered))
    );
    assert_eq!(
        share(&done).spent,
        crate::ledger::Millicredits::new(12_500),
        "Genace charged it: spent"
    );
    assert!(done.expires_at_seconds.is_some() && done.delivery_state == DeliveryState::NotCollected);
    let failed = observed(&running, &snap("failed", RenderStatus::Failed)).unwrap();
    assert!(share(&failed).is_zero(), "a failed render is released");
    assert!(observed(&done, &snap("completed", RenderStatus::Succeeded)).is_err());

    // Genace does not know the job: a person confirms it never ran.
    let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
    let abandoned = resolve(&missing, &Resolution::Abandon, "ops", "r", t0(), &p).unwrap();
    assert_eq!(
        (share(&abandoned).held, abandoned.due_at_ms),
        (crate::ledger::Millicredits::new(12_500), None)
    );
    assert!(observed(&abandoned, &snap("running", RenderStatus::Running)).is_err());
    let confirmed = resolve(&abandoned, &Resolution::ConfirmNotCreated, "ops", "r", t0(), &p).unwrap();
    assert!(share(&confirmed).is_zero() && confirmed.expires_at_seconds.is_some());
}

#[test]
fn an_abandoned_uncertain_operation_still_takes_its_job_id_or_a_confirmation() {
    use crate::ledger::share;
    let p = Policy::default();
    let uncertain = mark_uncertain(&submitting(), "tok", "timeout", t0()).unwrap();
    let abandoned = resolve(&uncertain, &Resolution::Abandon, "ops", "r", t0(), &p).unwrap();
    assert_eq!(
        share(&abandoned).held,
        crate::ledger::Millicredits::new(10_000),
        "the reservation stays held"
    );
    // A late recovery message: the job id is saved, never lost.
    let recovered = accept(&abandoned, "tok", &job("J5"), t0(), &p).unwrap();
    assert_eq!(
        (
            recovered.phase,
            recovered.ledger_phase,
            recovered.remote_job_id.as_deref()
        ),
        (Phase::Abandoned, Some(Phase::Accepted), Some("J5"))
    );
    assert_eq!(share(&recovered).held, crate::ledger::Millicredits::new(12_500));
    assert!(recovered.case.is_none() && recovered.due_at_ms.is_some());
    let attached = resolve(
        &abandoned,
        &Resolution::AttachRemoteJob { job_id: "J6".into() },
        "ops",
        "r",
        t0(),
        &p,
    )
    .unwrap();
    assert_eq!(attached.ledger_phase, Some(Phase::Accepted));
    let failed = submit_failed(&abandoned, "tok", "J7", err("x"), t0()).unwrap();
    assert_eq!(share(&failed).pending_refund, crate::ledger::Millicredits::new(10_000));
    let settled = resolve(&failed, &Resolution::MarkSettled, "ops", "r", t0(), &p).unwrap();
    assert_eq!(
        (share(&settled).settled, settled.expires_at_seconds.is_some()),
        (crate::ledger::Millicredits::new(10_000), true)
    );
}

#[test]
fn held_credits_genace_cannot_mean_are_replaced_by_the_reservation_with_evidence() {
    let p = Policy::default();
    for bad in [-5.0, f64::INFINITY, crate::ledger::MAX_HELD_CREDITS * 2.0] {
        let mut j = job("J1");
        j.held_credits = Some(bad);
        let r = accept(&submitting(), "tok", &j, t0(), &p).unwrap();
        assert_eq!(
            r.remote_job_id.as_deref(),
            Some("J1"),
            "the job is saved whatever its credits say"
        );
        assert_eq!(r.held_credits, None);
        assert!(r.held_credits_refused.as_deref().unwrap().contains("outside"));
        assert_eq!(crate::ledger::share(&r).held, crate::ledger::Millicredits::new(10_000));
    }
    let r = accept(&submitting(), "tok", &job("J1"), t0(), &p).unwrap();
    assert_eq!((r.held_credits, r.held_credits_refused), (Some(12.5), None));
}

static NO_LOOKS: crate::record::Looks = crate::record::Looks {
    count: 0,
    first_running_at: None,
    last_running_at: None,
    at: Vec::new(),
};

const ALL_PHASES: [Phase; 10] = [
    Phase::Prepared,
    Phase::Submitting,
    Phase::Accepted,
    Phase::Rendered,
    Phase::RenderFailed,
    Phase::SubmitFailed,
    Phase::Rejected,
    Phase::Uncertain,
    Phase::Abandoned,
    Phase::Cancelled,
];

/// A record in `phase` whose other fields let every transition get past
/// its own preconditions (expired claims held by "tok" and "d").
fn in_phase(phase: Phase) -> OperationRecord {
    let mut r = prepared();
    r.phase = phase;
    let lapsed = Claim {
        token: "tok".into(),
        lease_expires_at: t0() - Duration::seconds(1),
    };
    r.claim = Some(lapsed.clone());
    // A delivery claim exists only while a rendered operation is collecting.
    if phase == Phase::Rendered {
        r.delivery_claim = Some(Claim {
            token: "d".into(),
            ..lapsed
        });
        r.delivery_state = DeliveryState::Collecting;
    }
    r.outputs = Some(vec![OutputRef {
        url: "https://cdn.example/o.mp4".into(),
        content_type: None,
    }]);
    r
}

type Transition = Box<dyn Fn(&OperationRecord) -> Result<OperationRecord, Refusal>>;

/// The phases each input starts from, written out apart from the table
/// in [`transition`], which must agree.
#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
fn every_transition_states_its_phases_and_refuses_all_others() {
    use Phase::*;
    let p = Policy::default();
    let now = t0();
    let table: Vec<(&str, &[Phase], Transition)> = vec![
        (
            "claim_dispatch",
            &[Prepared],
            Box::new(move |r| claim_dispatch(r, "new", now, &p)),
        ),
        (
            "release_claim",
            &[Submitting],
            Box::new(move |r| release_claim(r, "tok", now, now, &p)),
        ),
        (
            "hold_for_account",
            &[Submitting],
            Box::new(move |r| hold_for_account(r, "tok", err("http_401"), now, &p)),
        ),
        (
            "accept",
            &[Submitting, Uncertain],
            Box::new(move |r| accept(r, "tok", &job("J1"), now, &p)),
        ),
        (
            "submit_failed",
            &[Submitting, Uncertain],
            Box::new(move |r| submit_failed(r, "tok", "J1", err("x"), now)),
        ),
        (
            "reject",
            &[Submitting],
            Box::new(move |r| reject(r, "tok", err("http_400"), now, &p)),
        ),
        (
            "mark_uncertain",
            &[Submitting],
            Box::new(move |r| mark_uncertain(r, "tok", "e", now)),
        ),
        ("interrupt", &[Submitting], Box::new(move |r| interrupt(r, "e", now))),
        (
            "observe",
            &[Accepted],
            Box::new(move |r| observe(r, &snap("running", RenderStatus::Running), now, now, &p)),
        ),
        (
            "open_case",
            &[Accepted],
            Box::new(move |r| open_case(r, CaseReason::RemoteJobMissing, "404", false, now)),
        ),
        (
            "claim_delivery",
            &[Rendered],
            Box::new(move |r| claim_delivery(r, "d2", now, &p)),
        ),
        (
            "give_up_delivery",
            &[Rendered],
            Box::new(move |r| give_up_delivery(r, now)),
        ),
        (
            "delivery_attempt_failed",
            &[Rendered],
            Box::new(move |r| delivery_attempt_failed(r, "d", "e", now, now, &p)),
        ),
        (
            "delivery_refused",
            &[Rendered],
            Box::new(move |r| delivery_refused(r, "d", CaseReason::OutputUrlRefused, "e", now)),
        ),
        (
            "delivered",
            &[Rendered],
            Box::new(move |r| delivered(r, "d", vec![object()], now, &p)),
        ),
        // A repeated cancel is allowed, and changes nothing.
        (
            "cancel",
            &[Prepared, Cancelled],
            Box::new(move |r| {
                transition(
                    r,
                    Input::Cancel {
                        by: "tenant-a",
                        reason: CancelReason::Requested,
                    },
                    now,
                    &p,
                )
            }),
        ),
    ];
    for (name, allowed, transition) in &table {
        for phase in ALL_PHASES {
            let result = transition(&in_phase(phase));
            let wrong_phase = matches!(result, Err(Refusal::WrongPhase { .. }));
            assert_eq!(
                wrong_phase,
                !allowed.contains(&phase),
                "{name} from {phase:?}: {result:?}"
            );
        }
    }
    let resolutions: [(Resolution, &[Phase]); 6] = [
        (
            Resolution::AttachRemoteJob { job_id: "J9".into() },
            &[Uncertain, Accepted],
        ),
        (Resolution::ConfirmNotCreated, &[Uncertain]),
        (Resolution::ReleaseHold, &[Prepared]),
        (Resolution::MarkSettled, &[SubmitFailed]),
        (Resolution::RedriveDelivery, &[Rendered]),
        (
            Resolution::Abandon,
            &[
                Prepared,
                Accepted,
                Rendered,
                RenderFailed,
                SubmitFailed,
                Rejected,
                Uncertain,
            ],
        ),
    ];
    for (resolution, allowed) in &resolutions {
        for phase in ALL_PHASES.into_iter().filter(|ph| !allowed.contains(ph)) {
            let result = resolve(&in_phase(phase), resolution, "ops", "r", now, &p);
            assert!(
                matches!(result, Err(Refusal::WrongPhase { .. })),
                "{} from {phase:?}: {result:?}",
                resolution.name()
            );
        }
    }
}

#[test]
fn a_racing_poll_cannot_open_a_case_on_a_rendered_or_delivered_record() {
    let p = Policy::default();
    let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    let done = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
    for rec in [rendered(), done] {
        assert!(matches!(
            open_case(&rec, CaseReason::RemoteJobMissing, "404", false, t0()),
            Err(Refusal::WrongPhase { .. })
        ));
    }
}

#[test]
fn a_completed_job_without_usable_outputs_opens_outputs_missing() {
    let p = Policy::default();
    let mut cases = Vec::new();
    for (outputs, unreadable) in [
        (None, None),
        (Some(vec![]), None),
        (None, Some("outputs is not a list".to_owned())),
    ] {
        let mut s = snap("completed", RenderStatus::Succeeded);
        s.outputs = outputs;
        s.outputs_unreadable = unreadable;
        cases.push(observe(&accepted_rec(), &s, t0(), t0(), &p).unwrap());
    }
    for r in cases {
        assert_eq!(r.phase, Phase::Rendered);
        assert_eq!(r.delivery_state, DeliveryState::NotCollected);
        assert_eq!(r.case.as_ref().unwrap().reason, CaseReason::OutputsMissing);
        assert_eq!(r.due_at_ms, None, "nothing is scheduled; a person decides");
        assert_eq!(
            claim_delivery(&r, "d", t0(), &p),
            Err(Refusal::CaseOpen(CaseReason::OutputsMissing))
        );
    }
    let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
    assert!(
        delivered(&claimed, "d", vec![], t0(), &p).is_err(),
        "never delivered with zero objects"
    );
}

#[test]
fn an_account_refusal_holds_the_operation_and_a_later_try_or_an_operator_releases_it() {
    let p = Policy::default();
    let held = hold_for_account(&submitting(), "tok", err("http_401"), t0(), &p).unwrap();
    assert_eq!(held.phase, Phase::Prepared, "not rejected: the key stays usable");
    assert_eq!(held.case.as_ref().unwrap().reason, CaseReason::AccountProblem);
    assert_eq!(held.claim, None);
    let until = t0() + p.account_hold;
    assert_eq!(held.retry_at_ms, Some(until.timestamp_millis()));
    assert!(matches!(
        claim_dispatch(&held, "n", t0() + Duration::seconds(1), &p),
        Err(Refusal::NotYet { .. })
    ));
    let retried = claim_dispatch(&held, "n", until, &p).unwrap();
    let accepted = accept(&retried, "n", &job("J1"), until, &p).unwrap();
    assert_eq!(accepted.case, None, "a later successful POST closes the case");
    assert_eq!(accepted.retry_at_ms, None);

    // Whatever ends the hold closes its case.
    let retried_again = claim_dispatch(&held, "m", until, &p).unwrap();
    let rejected = reject(&retried_again, "m", err("http_400"), until, &p).unwrap();
    assert_eq!(rejected.case, None, "a finished operation keeps no case");
    let limited = release_claim(&retried_again, "m", until + Duration::seconds(5), until, &p).unwrap();
    assert_eq!(limited.case, None, "a 429 shows the account works again");

    let released = resolve(&held, &Resolution::ReleaseHold, "ops", "key rotated", t0(), &p).unwrap();
    assert_eq!(
        (released.phase, released.case.clone(), released.retry_at_ms),
        (Phase::Prepared, None, None)
    );
    assert!(claim_dispatch(&released, "n", t0(), &p).is_ok());
    assert!(resolve(&prepared(), &Resolution::ReleaseHold, "ops", "r", t0(), &p).is_err());
}

#[test]
fn rate_limits_keep_their_own_retry_time_and_are_bounded() {
    let p = Policy {
        rate_limit_max: 2,
        ..Policy::default()
    };
    let retry = t0() + Duration::seconds(30);
    let once = release_claim(&submitting(), "tok", retry, t0(), &p).unwrap();
    assert_eq!(once.retry_at_ms, Some(retry.timestamp_millis()));
    // The sweep pushes due_at; the claim still opens at retry_at.
    let pushed = reschedule(&once, retry + Duration::seconds(300), t0());
    assert!(matches!(
        claim_dispatch(&pushed, "n", t0(), &p),
        Err(Refusal::NotYet { .. })
    ));
    let again = claim_dispatch(&pushed, "n", retry, &p).unwrap();
    let held = release_claim(&again, "n", retry + Duration::seconds(30), retry, &p).unwrap();
    assert_eq!(held.case.as_ref().unwrap().reason, CaseReason::RateLimited);
    assert_eq!(held.due_at_ms, None);
    assert_eq!(
        claim_dispatch(&held, "m", retry + Duration::hours(1), &p),
        Err(Refusal::CaseOpen(CaseReason::RateLimited))
    );
    let released = resolve(&held, &Resolution::ReleaseHold, "ops", "limit raised", retry, &p).unwrap();
    assert_eq!(released.rate_limited_count, 0);
    assert!(claim_dispatch(&released, "m", retry, &p).is_ok());
}

/// A refused claim re-reads before it records a wait; if a 429 opened a
/// `rate_limited` case meanwhile, the held record must not join the
/// waiting order (every fresh claim would yield to it), whatever it lacks.
#[test]
fn a_held_operation_never_joins_the_waiting_order() {
    let p = Policy {
        rate_limit_max: 1,
        ..Policy::default()
    };
    let held = release_claim(&submitting(), "tok", t0() + Duration::seconds(30), t0(), &p).unwrap();
    assert_eq!(held.case.as_ref().map(|c| c.reason), Some(CaseReason::RateLimited));
    for input in [Input::CapacityReached, Input::SpendLimitReached] {
        assert_eq!(
            transition(&held, input, t0(), &p),
            Err(Refusal::CaseOpen(CaseReason::RateLimited))
        );
    }
    // An account hold is the machine's to end: a claim refused once it
    // ends may wait like any other.
    let account = hold_for_account(&submitting(), "tok", err("account"), t0(), &p).unwrap();
    let later = t0() + p.account_hold + Duration::seconds(1);
    let waiting = transition(&account, Input::CapacityReached, later, &p).unwrap();
    assert!(waiting.waits_in_order().is_some());
    // And the invariant catches a held record that waits, however written.
    let mut broken = held.clone();
    broken.capacity_hold = Some(t0());
    assert!(check_invariants(&broken).unwrap_err().contains("case open"));
}

#[test]
fn delivery_attempts_count_at_claim_so_silent_stops_are_bounded_too() {
    let p = Policy {
        delivery_max_attempts: 2,
        delivery_lease: Duration::seconds(10),
        ..Policy::default()
    };
    let first = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    assert_eq!(first.delivery_attempts, 1);
    let later = t0() + Duration::seconds(11);
    let second = claim_delivery(&first, "d2", later, &p).unwrap();
    assert_eq!(second.delivery_attempts, 2);
    let much_later = later + Duration::seconds(11);
    assert_eq!(
        claim_delivery(&second, "d3", much_later, &p),
        Err(Refusal::AttemptsExhausted(2))
    );
    assert!(matches!(
        give_up_delivery(&second, later),
        Err(Refusal::LeaseLive { .. })
    ));
    let gave_up = give_up_delivery(&second, much_later).unwrap();
    assert_eq!(gave_up.delivery_state, DeliveryState::DeliveryFailed);
    assert_eq!(gave_up.case.unwrap().reason, CaseReason::DeliveryFailed);
}

#[test]
fn a_refused_output_fails_delivery_at_once_with_its_own_case() {
    let p = Policy::default();
    let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
    let r = delivery_refused(
        &claimed,
        "d",
        CaseReason::OutputUrlRefused,
        "output 0: port 8080 is not allowed",
        t0(),
    )
    .unwrap();
    assert_eq!(r.delivery_state, DeliveryState::DeliveryFailed);
    assert_eq!(r.delivery_attempts, 1);
    let case = r.case.unwrap();
    assert_eq!(case.reason, CaseReason::OutputUrlRefused);
    assert!(case.evidence.contains("output 0"));
    assert_eq!(r.due_at_ms, None);
}
#[test]
fn the_table_alone_moves_the_version_once_and_not_at_all_for_no_change() {
    let p = Policy::default();
    let claimed = submitting();
    assert_eq!(claimed.version, prepared().version + 1);
    assert_eq!(claimed.updated_at, t0());
    // A repeated outcome is the record itself: nothing to write.
    let accepted = accepted_rec();
    assert_eq!(accept(&accepted, "tok", &job("J1"), t0(), &p), Ok(accepted.clone()));
    let failed = submit_failed(&submitting(), "tok", "J7", err("x"), t0()).unwrap();
    assert_eq!(
        submit_failed(&failed, "tok", "J7", err("x"), t0() + Duration::seconds(5)),
        Ok(failed.clone()),
        "a recovery message applied twice changes nothing"
    );
    assert!(matches!(
        submit_failed(&failed, "tok", "J8", err("x"), t0()),
        Err(Refusal::WrongPhase { .. })
    ));
    let later = t0() + Duration::seconds(5);
    let running = snap("running", RenderStatus::Running);
    assert_eq!(observe(&accepted, &running, later, later, &p), Ok(accepted.clone()));
}

#[test]
fn claims_consume_their_own_fault_directives_only() {
    let p = Policy::default();
    let mut r = prepared();
    r.fault = Some(Fault::DispatchAfterCommit);
    assert_eq!(claim_dispatch(&r, "tok", t0(), &p).unwrap().fault, None);
    r.fault = Some(Fault::DeliverUploadFails);
    let claimed = claim_dispatch(&r, "tok", t0(), &p).unwrap();
    assert_eq!(
        claimed.fault,
        Some(Fault::DeliverUploadFails),
        "not dispatch's to consume"
    );
    let accepted = accept(&claimed, "tok", &job("J1"), t0(), &p).unwrap();
    let rendered = observe(&accepted, &snap("completed", RenderStatus::Succeeded), t0(), t0(), &p).unwrap();
    let collecting = claim_delivery(&rendered, "d", t0(), &p).unwrap();
    assert_eq!(collecting.fault, None);
    // A poll fault is consumed by the observation, which is then written
    // even when the snapshot alone would not be.
    let mut a = accepted_rec();
    a.fault = Some(Fault::PollAfterObserve);
    let later = t0() + Duration::seconds(5);
    let seen = observe(&a, &snap("running", RenderStatus::Running), later, later, &p).unwrap();
    assert_eq!((seen.fault, seen.version), (None, a.version + 1));
}

#[test]
fn a_stall_rides_on_the_observation_in_one_version() {
    let p = Policy::default();
    let a = accepted_rec();
    let later = t0() + Duration::hours(3);
    let running = snap("running", RenderStatus::Running);
    let input = Input::Observed(Look {
        snapshot: &running,
        next_check: later + Duration::minutes(5),
        stalled: Some("no terminal state in 2 h"),
        seen: &Default::default(),
    });
    let stalled = transition(&a, input, later, &p).unwrap();
    assert_eq!(stalled.version, a.version + 1);
    assert_eq!(stalled.case.as_ref().map(|c| c.reason), Some(CaseReason::RenderStalled));
    assert!(stalled.due_at_ms.is_some(), "polling goes on");
    assert_eq!(
        transition(&stalled, input, later, &p),
        Ok(stalled.clone()),
        "already open: no write"
    );
    let done = snap("completed", RenderStatus::Succeeded);
    let finished = Input::Observed(Look {
        snapshot: &done,
        next_check: later + Duration::minutes(5),
        stalled: Some("no terminal state in 2 h"),
        seen: &Default::default(),
    });
    let rendered = transition(&stalled, finished, later, &p).unwrap();
    assert_eq!(
        (rendered.phase, rendered.case.clone()),
        (Phase::Rendered, None),
        "a rendered job is not stalled"
    );
}

#[test]
fn the_invariants_catch_each_broken_rule() {
    let ok = prepared();
    assert_eq!(check_invariants(&ok), Ok(()));
    let mut r = ok.clone();
    r.expires_at_seconds = Some(1);
    assert!(check_invariants(&r).unwrap_err().contains("expires_at"));
    let mut r = ok.clone();
    r.phase = Phase::Uncertain;
    assert!(check_invariants(&r).unwrap_err().contains("without a case"));
    let mut r = accepted_rec();
    r.case = Some(ReconciliationCase {
        reason: CaseReason::SettlementPending,
        opened_at: t0(),
        evidence: String::new(),
    });
    assert!(check_invariants(&r).unwrap_err().contains("case on a accepted"));
    let mut r = ok.clone();
    r.phase = Phase::Submitting;
    assert!(check_invariants(&r).unwrap_err().contains("without a claim"));
    let mut r = ok.clone();
    r.delivery_claim = r.claim.clone().or(Some(Claim {
        token: "d".into(),
        lease_expires_at: t0(),
    }));
    assert!(check_invariants(&r).unwrap_err().contains("delivery claim"));
    let mut r = ok.clone();
    r.due_at_ms = None;
    assert!(
        check_invariants(&r)
            .unwrap_err()
            .contains("neither a due time, a case nor a place in a waiting order")
    );
    let rendered = rendered();
    let collecting = claim_delivery(&rendered, "d", t0(), &Policy::default()).unwrap();
    let done = delivered(&collecting, "d", vec![object()], t0(), &Policy::default()).unwrap();
    assert_eq!(check_invariants(&done), Ok(()));
    let mut r = done.clone();
    r.expires_at_seconds = None;
    assert!(check_invariants(&r).is_err());
}
/// Found by the simulator (seed 862): an operator abandoned an operation
/// held for its account while a dispatcher had just claimed it; the job
/// that dispatcher created was on no record and in no case.
#[test]
fn a_claimed_operation_cannot_be_abandoned() {
    let p = Policy::default();
    let held = hold_for_account(&submitting(), "tok", err("http_401"), t0(), &p).unwrap();
    let later = t0() + p.account_hold + Duration::seconds(1);
    let claimed = claim_dispatch(&held, "tok2", later, &p).unwrap();
    assert_eq!(
        claimed.case.as_ref().map(|c| c.reason),
        Some(CaseReason::AccountProblem)
    );
    assert!(matches!(
        resolve(&claimed, &Resolution::Abandon, "ops", "r", later, &p),
        Err(Refusal::WrongPhase { .. })
    ));
    assert!(resolve(&held, &Resolution::Abandon, "ops", "r", later, &p).is_ok());
}

/// A full account is a wait, never a failure: the operation stays
/// `prepared` with no case, remembers since when it waits, and the claim
/// that finally comes clears the wait. A 429 while our other jobs ran
/// waits the same way and does not count toward `rate_limited`.
#[test]
fn a_full_account_is_a_wait_that_the_claim_ends() {
    let p = Policy {
        rate_limit_max: 1,
        ..Policy::default()
    };
    let later = t0() + Duration::seconds(5);
    let waiting = transition(&prepared(), Input::CapacityReached, t0(), &p).unwrap();
    assert_eq!(waiting.phase, Phase::Prepared);
    assert_eq!(waiting.capacity_hold, Some(t0()));
    assert_eq!(
        (waiting.due_at_ms, waiting.retry_at_ms),
        (None, None),
        "nothing is scheduled: a wait has no timer, however long it lasts"
    );
    assert!(waiting.case.is_none());
    let again = transition(&waiting, Input::CapacityReached, later, &p).unwrap();
    assert_eq!(again.capacity_hold, Some(t0()), "waiting since the first refusal");
    // Woken at any time, the claim goes ahead.
    let claimed = transition(&again, Input::ClaimDispatch { token: "t2", shard: 0 }, later, &p).unwrap();
    assert_eq!((claimed.phase, claimed.capacity_hold), (Phase::Submitting, None));
    // With `rate_limit_max` 1, a plain 429 opens the case at once; a busy one never does.
    let busy = Input::RateLimited {
        token: "tok",
        retry_at: later,
        busy: true,
    };
    let full = transition(&submitting(), busy, later, &p).unwrap();
    assert_eq!((full.phase, full.rate_limited_count), (Phase::Prepared, 0));
    assert!(full.case.is_none());
    assert_eq!(
        full.capacity_hold,
        Some(submitting().created_at),
        "back at the head of its tenant's order: waiting since it was made"
    );
    assert_eq!(
        (full.due_at_ms, full.retry_at_ms),
        (None, None),
        "woken by a freed slot, not by Retry-After nor a timer"
    );
    let alone = release_claim(&submitting(), "tok", later, t0(), &p).unwrap();
    assert_eq!(alone.case.map(|c| c.reason), Some(CaseReason::RateLimited));
    assert!(transition(&accepted_rec(), Input::CapacityReached, t0(), &p).is_err());
}

/// A spend-limit wait joins its tenant's waiting order like a capacity
/// wait (no recheck timer: it is woken), and a wait that changes reason
/// keeps its place. A wait recorded before waits were ordered (it carries
/// its own recheck time) is not in the order, so the counts made before
/// stay true.
#[test]
fn spend_limit_waits_join_the_order_and_keep_their_place() {
    let p = Policy::default();
    let waiting = transition(&prepared(), Input::SpendLimitReached, t0(), &p).unwrap();
    assert_eq!(waiting.waits_in_order(), Some(t0()));
    assert_eq!(waiting.retry_at_ms, None, "claimable the moment it is woken");
    assert_eq!(
        waiting.due_at_ms, None,
        "no timer of its own: woken, or repaired by the sweep's look at the account"
    );
    assert_eq!(crate::ledger::share(&waiting).waiting, 1);
    let later = t0() + Duration::seconds(40);
    let for_a_slot = transition(&waiting, Input::CapacityReached, later, &p).unwrap();
    assert_eq!((for_a_slot.capacity_hold, for_a_slot.spend_hold), (Some(t0()), None));
    let back = transition(&for_a_slot, Input::SpendLimitReached, later, &p).unwrap();
    assert_eq!((back.spend_hold, back.capacity_hold), (Some(t0()), None));
    let mut recorded_before = waiting.clone();
    recorded_before.retry_at_ms = Some((later + Duration::seconds(300)).timestamp_millis());
    assert_eq!(recorded_before.waits_in_order(), None);
    assert_eq!(crate::ledger::share(&recorded_before).waiting, 0);
}

/// A cancel before the claim ends the operation with no job, nothing
/// counted and no due time; from a hold it closes the case in the audit;
/// a repeat is the record itself.
#[test]
fn a_cancel_ends_a_prepared_operation_with_nothing_counted_and_repeats_change_nothing() {
    let p = Policy::default();
    let cancel = |r: &OperationRecord| {
        transition(
            r,
            Input::Cancel {
                by: "tenant-a",
                reason: CancelReason::Deadline,
            },
            t0(),
            &p,
        )
        .unwrap()
    };
    let mut waiting = prepared();
    waiting.capacity_hold = Some(t0());
    let mut held = prepared();
    held.case = Some(ReconciliationCase {
        reason: CaseReason::RateLimited,
        opened_at: t0(),
        evidence: "429 x3".into(),
    });
    held.retry_at_ms = Some(t0().timestamp_millis());
    for rec in [prepared(), waiting, held.clone()] {
        let done = cancel(&rec);
        assert_eq!(done.phase, Phase::Cancelled);
        assert_eq!(done.version, rec.version + 1);
        check_invariants(&done).unwrap();
        assert_eq!(crate::ledger::share(&done), crate::ledger::Shares::default());
        assert!(done.wait().is_none() && done.case.is_none() && done.claim.is_none());
        assert_eq!(
            done.cancellation.as_ref().map(|c| c.reason),
            Some(CancelReason::Deadline)
        );
        assert_eq!(cancel(&done), done, "a repeat changes nothing");
    }
    let audit = cancel(&held).audit;
    assert_eq!(
        (
            audit[0].action.as_str(),
            audit[0].actor.as_str(),
            audit[0].reason.as_str()
        ),
        ("cancel", "tenant-a", "deadline")
    );
}

/// Past its deadline a prepared operation cannot be claimed, whatever
/// holds it, and every write keeps it due by the deadline at the latest,
/// so the sweep finds it then.
#[test]
fn past_its_deadline_an_operation_cannot_be_claimed_and_stays_due_by_it() {
    let p = Policy::default();
    let deadline = t0() + Duration::seconds(30);
    let mut r = prepared();
    r.dispatch_deadline = Some(deadline);
    let r = r.due_by_its_deadline();
    assert!(r.due_at_ms.unwrap() <= deadline.timestamp_millis());
    let waiting = transition(&r, Input::CapacityReached, t0(), &p).unwrap();
    assert_eq!(waiting.due_at_ms, Some(deadline.timestamp_millis()));
    let claim = |at| transition(&waiting, Input::ClaimDispatch { token: "t", shard: 0 }, at, &p);
    assert!(matches!(claim(deadline), Err(Refusal::DeadlinePassed { .. })));
    assert_eq!(claim(deadline - Duration::seconds(1)).unwrap().phase, Phase::Submitting);
}

/// `tenant-a` erases `r`'s outputs, deleting `keys`.
fn erase_outputs(r: &OperationRecord, keys: &[String], p: &Policy) -> Next {
    transition(
        r,
        Input::OutputsErased {
            by: "tenant-a",
            objects: keys,
        },
        t0(),
        p,
    )
}

/// Only delivered outputs are erased; the erasure keeps the objects'
/// evidence and the record's invariants, and a repeat changes nothing.
#[test]
fn only_delivered_outputs_are_erased_and_a_repeat_changes_nothing() {
    let p = Policy::default();
    let keys = ["outputs/tenant-a/op/output-0.mp4".to_owned()];
    let erase = |r: &OperationRecord| erase_outputs(r, &keys, &p);
    let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    for early in [prepared(), rendered(), claimed.clone()] {
        assert!(
            matches!(erase(&early), Err(Refusal::WrongPhase { .. })),
            "{:?}",
            early.phase
        );
    }
    let done = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
    assert_eq!(done.delivered_at, Some(t0()));
    let erased = erase(&done).unwrap();
    check_invariants(&erased).unwrap();
    assert_eq!(erased.outputs_erased.as_ref().map(|e| e.by.as_str()), Some("tenant-a"));
    assert_eq!(erased.delivered_objects, done.delivered_objects);
    assert_eq!(erase(&erased).unwrap(), erased);
}

/// An erasure of many objects lists the first keys and counts the rest, so
/// the record stays small whatever was stored.
#[test]
fn an_erasure_of_many_objects_lists_the_first_keys_and_counts_the_rest() {
    let p = Policy::default();
    let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    let done = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
    for (stored, more) in [(MAX_ERASED_KEYS, 0), (MAX_ERASED_KEYS + 1, 1), (5_000, 4_900)] {
        let keys: Vec<String> = (0..stored).map(|n| format!("outputs/t/op/{n:05}")).collect();
        let erased = erase_outputs(&done, &keys, &p).unwrap();
        let record = erased.outputs_erased.unwrap();
        assert_eq!(record.objects, keys[..MAX_ERASED_KEYS]);
        assert_eq!(record.more_objects, more);
    }
}

/// Once delivery is over without a delivery (given up, refused as too
/// large, abandoned), whatever earlier attempts stored can be erased, and
/// from then on no delivery is claimed or redriven: nothing is stored
/// after the erasure.
#[test]
fn outputs_of_a_delivery_that_ended_without_one_are_erased_and_never_delivered_after() {
    let p = Policy {
        delivery_max_attempts: 1,
        ..Policy::default()
    };
    let keys = ["outputs/tenant-a/op/output-0.mp4".to_owned()];
    let erase = |r: &OperationRecord| erase_outputs(r, &keys, &p);
    let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
    let gave_up = delivery_attempt_failed(&claimed, "d", "cdn down", t0(), t0(), &p).unwrap();
    let too_large = delivery_refused(&claimed, "d", CaseReason::OutputTooLarge, "5 GiB", t0()).unwrap();
    let abandoned = resolve(&gave_up, &Resolution::Abandon, "ops", "gone", t0(), &p).unwrap();
    for ended in [gave_up, too_large, abandoned] {
        let erased = erase(&ended).unwrap_or_else(|e| panic!("{:?}: {e}", ended.delivery_state));
        check_invariants(&erased).unwrap();
        assert_eq!(
            erased.outputs_erased.as_ref().map(|e| e.objects.as_slice()),
            Some(&keys[..])
        );
        assert!(resolve(&erased, &Resolution::RedriveDelivery, "ops", "cdn back", t0(), &p).is_err());
        assert!(claim_delivery(&erased, "d2", t0(), &p).is_err());
        // Its delivery case, if open, is now only to be abandoned.
        if let Some(book) = erased.runbook() {
            assert_eq!(book.actions, ["abandon"]);
            assert!(
                resolutions_allowed(&erased, t0())
                    .iter()
                    .all(|r| *r != "redrive_delivery")
            );
        }
    }
}

/// An output expiry is S3's: the days added to the delivery, rounded up to
/// the next midnight UTC; none before delivery or after an erasure.
#[test]
fn outputs_expire_at_midnight_after_the_days_and_not_once_erased() {
    let p = Policy::default();
    let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
    assert_eq!(claimed.outputs_expire_at(7), None);
    let afternoon = t0() + Duration::hours(15);
    let done = delivered(&claimed, "d1", vec![object()], afternoon, &p).unwrap();
    assert_eq!(done.outputs_expire_at(7), Some(t0() + Duration::days(8)));
    let at_midnight = delivered(&claimed, "d1", vec![object()], t0(), &p).unwrap();
    assert_eq!(at_midnight.outputs_expire_at(7), Some(t0() + Duration::days(7)));
    let erased = transition(&done, Input::OutputsErased { by: "t", objects: &[] }, t0(), &p).unwrap();
    assert_eq!(erased.outputs_expire_at(7), None);
}

/// A finished record outlives the outputs it stored: its TTL is the
/// retention, or the bucket rule's deletion of what was stored by the time
/// it finished, and the time S3 may take to remove it, when that is later
/// (output days past the retention, or the rounding to midnight). One that
/// stored nothing keeps the retention.
#[test]
fn a_finished_record_is_kept_until_its_outputs_are_gone() {
    let afternoon = t0() + Duration::hours(15);
    let lag = OUTPUTS_REMOVED_WITHIN;
    for (retention_days, output_days, kept_until) in [
        // The default: outputs as long as the record; S3's midnight is later.
        (30, 30, t0() + Duration::days(31) + lag),
        (30, 7, afternoon + Duration::days(30)),
        (30, 90, t0() + Duration::days(91) + lag),
    ] {
        let p = Policy {
            retention: Duration::days(retention_days),
            output_days,
            ..Policy::default()
        };
        let claimed = claim_delivery(&rendered(), "d1", t0(), &p).unwrap();
        let done = delivered(&claimed, "d1", vec![object()], afternoon, &p).unwrap();
        check_invariants(&done).unwrap();
        assert_eq!(
            done.expires_at_seconds,
            Some(kept_until.timestamp()),
            "retention {retention_days} days, outputs {output_days}"
        );
        assert!(
            done.outputs_expire_at(output_days)
                .is_some_and(|gone| gone.timestamp() <= kept_until.timestamp())
        );
        let cancelled = transition(
            &prepared(),
            Input::Cancel {
                by: "tenant-a",
                reason: CancelReason::Requested,
            },
            afternoon,
            &p,
        )
        .unwrap();
        let retention = afternoon + Duration::days(retention_days);
        assert_eq!(
            cancelled.expires_at_seconds,
            Some(retention.timestamp()),
            "nothing stored"
        );
    }
}

/// The console offers exactly the decisions a resolution request would be
/// allowed to make, from every state; and every case's runbook recommends
/// only decisions its record takes (a render_stalled case may also close by
/// itself, so it lists abandon only).
#[test]
fn the_allowed_decisions_are_the_ones_the_table_takes_and_the_runbook_names_only_those() {
    let p = Policy::default();
    for rec in resolvable_states() {
        let allowed = resolutions_allowed(&rec, t0());
        for resolution in all_resolutions() {
            let taken = resolve(&rec, &resolution, "ops", "why", t0(), &p).is_ok_and(|next| next != rec);
            assert_eq!(
                allowed.contains(&resolution.name()),
                taken,
                "{} from {:?} with case {:?}",
                resolution.name(),
                rec.phase,
                rec.case.as_ref().map(|c| c.reason)
            );
        }
        if let Some(case) = &rec.case {
            for action in case.reason.runbook().actions {
                assert!(
                    allowed.contains(action),
                    "the runbook for {} recommends {action}, which {:?} does not take",
                    case.reason.as_str(),
                    rec.phase
                );
            }
        }
    }
    assert_eq!(
        resolutions_allowed(&prepared(), t0()),
        Vec::<&str>::new(),
        "nothing to decide without a case"
    );
}

/// Every input, once, with arguments a record of any phase could take.
fn every_input<'a>(
    job: &'a AcceptedJob,
    error: &'a RemoteError,
    snapshot: &'a JobSnapshot,
    resolutions: &'a [Resolution],
) -> Vec<Input<'a>> {
    let now = t0();
    let mut events = vec![
        Input::ClaimDispatch { token: "tok", shard: 0 },
        Input::SpendLimitReached,
        Input::CapacityReached,
        Input::RateLimited {
            token: "tok",
            retry_at: now,
            busy: false,
        },
        Input::AccountRefused { token: "tok", error },
        Input::Accepted { token: "tok", job },
        Input::SubmitFailed {
            token: "tok",
            job_id: "J1",
            error,
        },
        Input::Rejected { token: "tok", error },
        Input::OutcomeUnknown {
            token: "tok",
            evidence: "e",
        },
        Input::LeaseExpired { evidence: "e" },
        Input::Observed(Look {
            snapshot,
            next_check: now,
            stalled: None,
            seen: &NO_LOOKS,
        }),
        Input::CaseNeeded(NeededCase {
            reason: CaseReason::RemoteJobMissing,
            evidence: "e",
            keep_due: false,
        }),
        Input::Reschedule { due: now },
        Input::ClaimDelivery { token: "tok" },
        Input::DeliveryLapsed,
        Input::DeliveryFailed {
            token: "tok",
            error: "e",
            retry_at: now,
        },
        Input::DeliveryRefused(RefusedDelivery {
            token: "tok",
            reason: CaseReason::OutputsMissing,
            evidence: "e",
        }),
        Input::Delivered {
            token: "tok",
            objects: &[],
        },
        Input::Cancel {
            by: "t",
            reason: crate::record::CancelReason::Requested,
        },
        Input::OutputsErased { by: "t", objects: &[] },
    ];
    events.extend(resolutions.iter().map(|resolution| {
        Input::Resolved(Decision {
            resolution,
            actor: "ops",
            reason: "r",
        })
    }));
    events
}

/// The phases a refusal's `expected` text names: each phase by its name,
/// "finished" for the phases nothing moves on from, and every phase for a
/// text that names none ("any phase", "an open reconciliation case").
fn named_phases(expected: &str) -> Vec<Phase> {
    let named: Vec<Phase> = Phase::ALL
        .into_iter()
        .filter(|p| {
            expected
                .split(|c: char| !c.is_ascii_alphabetic() && c != '_')
                .any(|w| w == p.as_str())
        })
        .collect();
    let finished = [
        Phase::Rendered,
        Phase::RenderFailed,
        Phase::SubmitFailed,
        Phase::Rejected,
        Phase::Abandoned,
        Phase::Cancelled,
    ];
    match () {
        _ if expected.contains("finished") => named.into_iter().chain(finished).collect(),
        _ if named.is_empty() => Phase::ALL.to_vec(),
        _ => named,
    }
}

/// `Input::expected` is the table's own word, both ways: for every (phase,
/// input) pair, a phase the table does not refuse as the wrong phase is one
/// the input's `expected` text names, and a phase the text names is one the
/// table does not refuse as the wrong phase. (Guards may still refuse inside a named
/// phase; a record of one phase alone may even break an invariant there,
/// which counts as the table taking the pair.)
#[test]
fn the_expected_phases_agree_with_the_table_for_every_pair() {
    let (job, error, snapshot) = (job("J1"), err("x"), snap("completed", RenderStatus::Succeeded));
    let resolutions = [
        Resolution::AttachRemoteJob { job_id: "J2".into() },
        Resolution::ConfirmNotCreated,
        Resolution::ReleaseHold,
        Resolution::MarkSettled,
        Resolution::RedriveDelivery,
        Resolution::Abandon,
    ];
    let mut disagree = Vec::new();
    let mut taken = 0;
    // A sample record broken by an arm panics; said nothing of, as taken.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // A record of each phase, and records that meet the texts' qualifiers:
    // held, settlement pending, delivery failed or over, an open case.
    let p = Policy::default();
    let claimed = claim_delivery(&rendered(), "d", t0(), &p).unwrap();
    let delivered_rec = delivered(&claimed, "d", vec![object()], t0(), &p).unwrap();
    let samples: Vec<OperationRecord> = Phase::ALL
        .into_iter()
        .map(with_phase)
        .chain(resolvable_states())
        .chain([delivered_rec])
        .collect();
    for input in every_input(&job, &error, &snapshot, &resolutions) {
        let named = named_phases(input.expected());
        let mut takes = Vec::new();
        for rec in &samples {
            let phase = rec.phase;
            let outcome = std::panic::catch_unwind(|| transition(rec, input, t0(), &Policy::default()));
            let wrong_phase = matches!(outcome, Ok(Err(Refusal::WrongPhase { .. })));
            if !wrong_phase {
                taken += 1;
                takes.push(phase);
                // Forward, on the plain record of each phase only: a record
                // that holds a job already meets idempotent arms (a repeated
                // accept, a live lease) that answer for phases not named.
                if rec == &with_phase(phase) && !named.contains(&phase) {
                    disagree.push(format!(
                        "{} in {}: taken, but expected says {:?}",
                        input.name(),
                        phase.as_str(),
                        input.expected()
                    ));
                }
            }
        }
        // And the other way: every phase the text names is one the table
        // takes the input in, for some sample record of that phase. A text
        // that names no phase ("an open reconciliation case") names a
        // condition, which some sample meets.
        let names_none = named.len() == Phase::ALL.len() && !input.expected().contains("any phase");
        if names_none && takes.is_empty() {
            disagree.push(format!("{}: the table takes it in no sample at all", input.name()));
        }
        for phase in named.iter().filter(|p| !names_none && !takes.contains(p)) {
            disagree.push(format!(
                "{} in {}: expected names it, but the table refuses it as the wrong phase",
                input.name(),
                phase.as_str()
            ));
        }
    }
    std::panic::set_hook(hook);
    assert!(disagree.is_empty(), "{}", disagree.join("\n"));
    assert!(
        taken > 20,
        "the table takes {taken} pairs: the sample records reach too few arms"
    );
}

#[test]
fn a_deferred_look_moves_the_deadline_later_and_never_earlier() {
    let r = accepted_rec();
    let due = DateTime::from_timestamp_millis(r.due_at_ms.unwrap()).unwrap();
    let later = due + Duration::minutes(20);
    let input = |next_check| Input::LookDeferred { next_check };
    let moved = transition(&r, input(later), t0(), &Policy::default()).unwrap();
    assert_eq!(moved.due_at_ms, Some(later.timestamp_millis()));
    let kept = transition(&moved, input(due), t0(), &Policy::default()).unwrap();
    assert_eq!(kept.due_at_ms, Some(later.timestamp_millis()), "never earlier");
    // Only an operation whose job is observed has looks to defer.
    assert!(transition(&submitting(), input(later), t0(), &Policy::default()).is_err());
}

/// A refused recovery message's job id is kept beside the record in any
/// phase: once, never the saved job, at most `MAX_UNSAVED_JOBS`, and
/// nothing else moves. Attaching it takes it off the list.
#[test]
fn an_unsaved_job_id_is_kept_once_and_attaching_it_saves_it() {
    let p = Policy::default();
    let uncertain = mark_uncertain(&submitting(), "tok", "timed out", t0()).unwrap();
    let saved = accept(&submitting(), "tok", &job("J0"), t0(), &p).unwrap();
    for r in [prepared(), submitting(), uncertain.clone(), saved.clone()] {
        let phase = r.phase;
        let kept = transition(&r, Input::JobUnsaved { job_id: "J1" }, t0(), &p).unwrap();
        assert_eq!(kept.unsaved_jobs, ["J1"], "{phase:?}");
        assert_eq!((kept.phase, kept.version), (phase, r.version + 1));
        let again = transition(&kept, Input::JobUnsaved { job_id: "J1" }, t0(), &p).unwrap();
        assert_eq!(again, kept, "a repeat changes nothing");
    }
    assert_eq!(
        transition(&saved, Input::JobUnsaved { job_id: "J0" }, t0(), &p).unwrap(),
        saved
    );
    let mut full = uncertain.clone();
    for i in 0..crate::record::MAX_UNSAVED_JOBS + 3 {
        let job_id = format!("J{i}");
        full = transition(&full, Input::JobUnsaved { job_id: &job_id }, t0(), &p).unwrap();
    }
    assert_eq!(full.unsaved_jobs.len(), crate::record::MAX_UNSAVED_JOBS);

    let kept = transition(&uncertain, Input::JobUnsaved { job_id: "J1" }, t0(), &p).unwrap();
    // Not "nothing was created" while a job is known to exist.
    let confirm = Input::Resolved(Decision {
        resolution: &Resolution::ConfirmNotCreated,
        actor: "ops",
        reason: "not found",
    });
    assert!(matches!(
        transition(&kept, confirm, t0(), &p),
        Err(Refusal::WrongPhase { .. })
    ));
    assert!(transition(&uncertain, confirm, t0(), &p).is_ok());
    // Nor by way of abandoning it first.
    let abandon = Input::Resolved(Decision {
        resolution: &Resolution::Abandon,
        actor: "ops",
        reason: "giving up",
    });
    let abandoned = transition(&kept, abandon, t0(), &p).unwrap();
    assert_eq!(abandoned.phase, Phase::Abandoned);
    assert!(matches!(
        transition(&abandoned, confirm, t0(), &p),
        Err(Refusal::WrongPhase { .. })
    ));
    let resolution = Resolution::AttachRemoteJob { job_id: "J1".into() };
    let decision = Input::Resolved(Decision {
        resolution: &resolution,
        actor: "ops",
        reason: "found",
    });
    let attached = transition(&kept, decision, t0(), &p).unwrap();
    assert_eq!(attached.remote_job_id.as_deref(), Some("J1"));
    assert!(attached.unsaved_jobs.is_empty());
}
