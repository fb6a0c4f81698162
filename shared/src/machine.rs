//! The lifecycle rules as pure functions.
//!
//! Each transition takes the record as last read and returns the next record,
//! or a [`Refusal`] saying why the rules forbid it. It performs no I/O. The
//! store writes the difference between the two records as one conditional
//! `UpdateItem` guarded by the version that was read, so a transition decided
//! on stale data can never be written.

use chrono::{DateTime, Duration, Utc};

use crate::record::{CaseReason, Claim, OperationRecord, Phase, ReconciliationCase, RemoteError, Settlement};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the operation is {actual}, and {action} needs {expected}", actual = .actual.as_str())]
    WrongPhase {
        action: &'static str,
        actual: Phase,
        expected: &'static str,
    },
    #[error("the claim is held by another dispatcher until {until}")]
    LeaseLive { until: DateTime<Utc> },
    #[error("the claim token does not match the one on the record")]
    NotClaimant,
    #[error("the operation already holds remote job {existing}")]
    DifferentRemoteJob { existing: String },
}

/// Timing rules the transitions need. Values come from configuration.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How long a dispatcher may hold a claim. Longer than the Genace client timeout.
    pub dispatch_lease: Duration,
    /// After acceptance, when the sweep should check that observation happened.
    pub observe_grace: Duration,
    /// How long a finished operation is kept before its TTL removes it.
    pub retention: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            dispatch_lease: Duration::seconds(120),
            observe_grace: Duration::seconds(300),
            retention: Duration::days(30),
        }
    }
}

/// What Genace said when it accepted a job (a 202 with a non-empty `job_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedJob {
    pub job_id: String,
    pub state: Option<String>,
    pub model: Option<String>,
    pub created_at: Option<String>,
    pub held_credits: Option<f64>,
}

fn step(rec: &OperationRecord, now: DateTime<Utc>) -> OperationRecord {
    let mut next = rec.clone();
    next.version = rec.version + 1;
    next.updated_at = now;
    next
}

fn finish(next: &mut OperationRecord, now: DateTime<Utc>, policy: &Policy) {
    next.due_at = None;
    next.claim = None;
    next.expires_at = Some((now + policy.retention).timestamp());
}

fn require_claimant(rec: &OperationRecord, token: &str, action: &'static str) -> Result<(), Refusal> {
    if rec.phase != Phase::Submitting {
        return Err(Refusal::WrongPhase {
            action,
            actual: rec.phase,
            expected: "submitting",
        });
    }
    match &rec.claim {
        Some(c) if c.token == token => Ok(()),
        _ => Err(Refusal::NotClaimant),
    }
}

/// A remote outcome may be recorded by the claim it was received under, while
/// that claim is live (`submitting`) or after its lease ran out (`uncertain`).
fn require_outcome_holder(rec: &OperationRecord, token: &str, action: &'static str) -> Result<(), Refusal> {
    if !matches!(rec.phase, Phase::Submitting | Phase::Uncertain) {
        return Err(Refusal::WrongPhase {
            action,
            actual: rec.phase,
            expected: "submitting or uncertain",
        });
    }
    match &rec.claim {
        Some(c) if c.token == token => Ok(()),
        _ => Err(Refusal::NotClaimant),
    }
}

/// `prepared -> submitting`: the only road to a POST. The claim carries a
/// fresh token and a lease; the sweep treats an expired lease as an
/// interrupted dispatch.
pub fn claim_dispatch(
    rec: &OperationRecord,
    token: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    match rec.phase {
        Phase::Prepared => {}
        Phase::Submitting => {
            let until = rec.claim.as_ref().map(|c| c.lease_expires_at).unwrap_or(now);
            return Err(if until > now {
                Refusal::LeaseLive { until }
            } else {
                Refusal::WrongPhase {
                    action: "claim",
                    actual: rec.phase,
                    expected: "prepared",
                }
            });
        }
        actual => {
            return Err(Refusal::WrongPhase {
                action: "claim",
                actual,
                expected: "prepared",
            });
        }
    }
    let mut next = step(rec, now);
    let lease_expires_at = now + policy.dispatch_lease;
    next.phase = Phase::Submitting;
    next.claim = Some(Claim {
        token: token.to_owned(),
        lease_expires_at,
    });
    next.dispatch_attempts = rec.dispatch_attempts + 1;
    next.due_at = Some(lease_expires_at.timestamp_millis());
    Ok(next)
}

/// `submitting -> prepared` after a 429: Genace said definitively that it did
/// not process the request, so the claim may be released and retried later.
pub fn release_claim(
    rec: &OperationRecord,
    token: &str,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token, "release")?;
    let mut next = step(rec, now);
    next.phase = Phase::Prepared;
    next.claim = None;
    next.last_error = Some(RemoteError {
        kind: "rate_limited".into(),
        status: Some(429),
        detail: format!("Genace asked us to retry after {retry_at}"),
    });
    next.due_at = Some(retry_at.timestamp_millis());
    Ok(next)
}

/// `submitting | uncertain -> accepted`, only for the dispatcher (or the
/// recovery channel) holding the claim token the job was created under.
/// Applying the same job id again is a no-op, so the write can be retried.
pub fn accept(
    rec: &OperationRecord,
    token: &str,
    job: &AcceptedJob,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    if let Some(existing) = &rec.remote_job_id {
        return if *existing == job.job_id && rec.phase != Phase::SubmitFailed {
            Ok(rec.clone())
        } else {
            Err(Refusal::DifferentRemoteJob {
                existing: existing.clone(),
            })
        };
    }
    require_outcome_holder(rec, token, "accept")?;
    let mut next = step(rec, now);
    next.phase = Phase::Accepted;
    next.claim = None;
    next.case = None;
    next.remote_job_id = Some(job.job_id.clone());
    next.remote_state = job.state.clone();
    next.remote_model = job.model.clone();
    next.remote_created_at = job.created_at.clone();
    next.held_credits = job.held_credits;
    next.accepted_at = Some(now);
    next.due_at = Some((now + policy.observe_grace).timestamp_millis());
    Ok(next)
}

/// `submitting | uncertain -> submit_failed`: a 502 that names the failed
/// remote job, applied by the claimant or later from the recovery channel.
/// The id is kept for accounting and a settlement case is opened.
pub fn submit_failed(
    rec: &OperationRecord,
    token: &str,
    job_id: &str,
    error: RemoteError,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_outcome_holder(rec, token, "record a submission failure")?;
    let mut next = step(rec, now);
    next.phase = Phase::SubmitFailed;
    next.claim = None;
    next.remote_job_id = Some(job_id.to_owned());
    next.settlement = Some(Settlement::Pending);
    next.case = Some(ReconciliationCase {
        reason: CaseReason::SettlementPending,
        opened_at: now,
        evidence: error.detail.clone(),
    });
    next.last_error = Some(error);
    next.due_at = None;
    Ok(next)
}

/// `submitting -> rejected`: a definitive 4xx. Nothing was created; the client
/// needs a new operation key to try again.
pub fn reject(
    rec: &OperationRecord,
    token: &str,
    error: RemoteError,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token, "reject")?;
    let mut next = step(rec, now);
    next.phase = Phase::Rejected;
    next.last_error = Some(error);
    finish(&mut next, now, policy);
    Ok(next)
}

/// `submitting -> uncertain`: the dispatcher does not know whether Genace
/// created a job. A case is opened; nothing automatic POSTs again.
pub fn mark_uncertain(
    rec: &OperationRecord,
    token: &str,
    evidence: &str,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_claimant(rec, token, "mark uncertain")?;
    Ok(open_uncertain(rec, CaseReason::UnknownSubmitOutcome, evidence, now))
}

/// `submitting -> uncertain` for a claim whose lease expired: its dispatcher
/// stopped somewhere between claim and commit and may have POSTed. The claim
/// token is kept so a late recovery message can still be applied.
pub fn interrupt(rec: &OperationRecord, evidence: &str, now: DateTime<Utc>) -> Result<OperationRecord, Refusal> {
    if rec.phase != Phase::Submitting {
        return Err(Refusal::WrongPhase {
            action: "interrupt",
            actual: rec.phase,
            expected: "submitting",
        });
    }
    if let Some(c) = rec.claim.as_ref().filter(|c| c.lease_expires_at > now) {
        return Err(Refusal::LeaseLive {
            until: c.lease_expires_at,
        });
    }
    Ok(open_uncertain(rec, CaseReason::InterruptedDispatch, evidence, now))
}

fn open_uncertain(rec: &OperationRecord, reason: CaseReason, evidence: &str, now: DateTime<Utc>) -> OperationRecord {
    let mut next = step(rec, now);
    next.phase = Phase::Uncertain;
    next.due_at = None;
    next.case = Some(ReconciliationCase {
        reason,
        opened_at: now,
        evidence: evidence.to_owned(),
    });
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Intent, TenantId};
    use crate::record::DeliveryState;
    use serde_json::json;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn prepared() -> OperationRecord {
        let intent = Intent::parse(
            &json!({"operation_key": "k", "media_type": "video",
                    "specification": {"model": "m", "prompt": "p"}}),
            None,
        )
        .unwrap();
        OperationRecord::new_intent(
            &TenantId::parse("t").unwrap(),
            &intent,
            None,
            t0(),
            Duration::seconds(60),
        )
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
        assert_eq!(r.due_at, Some((t0() + Duration::seconds(60)).timestamp_millis()));
        assert!(r.due_pk.starts_with("DUE#"));
        assert_eq!(r.expires_at, None);
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
        assert_eq!(r.due_at, Some(c.lease_expires_at.timestamp_millis()));
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
        assert_eq!(r.due_at, None);
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
        assert_eq!(r.due_at, None);
        assert_eq!(r.expires_at, Some((t0() + Duration::days(30)).timestamp()));
        assert!(reject(&with_phase(Phase::Accepted), "tok", err("e"), t0(), &p).is_err());
    }

    #[test]
    fn release_after_429_returns_to_prepared() {
        let retry = t0() + Duration::seconds(30);
        let r = release_claim(&submitting(), "tok", retry, t0()).unwrap();
        assert_eq!(r.phase, Phase::Prepared);
        assert_eq!(r.claim, None);
        assert_eq!(r.due_at, Some(retry.timestamp_millis()));
        assert_eq!(
            release_claim(&submitting(), "x", retry, t0()),
            Err(Refusal::NotClaimant)
        );
        assert!(release_claim(&with_phase(Phase::Uncertain), "tok", retry, t0()).is_err());
    }

    #[test]
    fn unknown_outcome_is_uncertain_with_a_case() {
        let r = mark_uncertain(&submitting(), "tok", "timed out after 30s", t0()).unwrap();
        assert_eq!(r.phase, Phase::Uncertain);
        let case = r.case.unwrap();
        assert_eq!(case.reason, CaseReason::UnknownSubmitOutcome);
        assert_eq!(case.evidence, "timed out after 30s");
        assert_eq!(r.due_at, None);
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
}
