//! The lifecycle rules as pure functions.
//!
//! Each transition takes the record as last read and returns the next record,
//! or a [`Refusal`] saying why the rules forbid it. It performs no I/O. The
//! store writes the difference between the two records as one conditional
//! `UpdateItem` guarded by the version that was read, so a transition decided
//! on stale data can never be written.

use chrono::{DateTime, Duration, Utc};

use crate::genace::{JobSnapshot, RenderStatus};
use crate::record::{
    AuditEntry, CaseReason, Claim, DeliveredObject, DeliveryState, OperationRecord, Phase, ReconciliationCase,
    RemoteError, Settlement,
};

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
    #[error("delivery has already ended ({actual:?})")]
    DeliveryFinished { actual: DeliveryState },
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
    /// How long a delivery claim lasts (the deliver function's timeout and some).
    pub delivery_lease: Duration,
    /// Delivery attempts before `delivery_failed` and a case.
    pub delivery_max_attempts: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            dispatch_lease: Duration::seconds(120),
            observe_grace: Duration::seconds(300),
            retention: Duration::days(30),
            delivery_lease: Duration::minutes(16),
            delivery_max_attempts: 8,
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

/// Folds one status snapshot of the saved job into an `accepted` operation.
/// Terminal states are recorded once: a rendered or failed operation refuses
/// further observations. A non-terminal snapshot that changes nothing, while
/// the sweep's deadline still covers `next_check`, is not written at all.
pub fn observe(
    rec: &OperationRecord,
    snap: &JobSnapshot,
    now: DateTime<Utc>,
    next_check: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    if rec.phase != Phase::Accepted {
        return Err(Refusal::WrongPhase {
            action: "observe",
            actual: rec.phase,
            expected: "accepted",
        });
    }
    let due = next_check.timestamp_millis();
    if snap.status == RenderStatus::Running
        && rec.remote_state.as_deref() == Some(snap.state.as_str())
        && rec.due_at.is_some_and(|d| d >= due)
    {
        return Ok(rec.clone());
    }
    let mut next = step(rec, now);
    next.remote_state = Some(snap.state.clone());
    next.observed_at = Some(now);
    match snap.status {
        RenderStatus::Running => next.due_at = Some(due),
        RenderStatus::Succeeded => {
            next.phase = Phase::Rendered;
            next.outputs = Some(snap.outputs.clone().unwrap_or_default());
            next.case = None;
            next.due_at = Some((now + policy.observe_grace).timestamp_millis());
        }
        RenderStatus::Failed => {
            next.phase = Phase::RenderFailed;
            next.case = None;
            next.last_error = Some(RemoteError {
                kind: "render_failed".into(),
                status: None,
                detail: snap
                    .error
                    .as_ref()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| format!("Genace reported the job {}", snap.state)),
            });
            finish(&mut next, now, policy);
        }
    }
    Ok(next)
}

/// Opens a reconciliation case on an operation whose remote job needs a
/// person (missing at Genace, or silent past the deadline). The phase stays.
/// `keep_due` keeps the operation on the sweep's schedule (polling goes on).
pub fn open_case(
    rec: &OperationRecord,
    reason: CaseReason,
    evidence: &str,
    keep_due: bool,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    if rec.case.as_ref().is_some_and(|c| c.reason == reason) {
        return Ok(rec.clone());
    }
    let mut next = step(rec, now);
    next.case = Some(ReconciliationCase {
        reason,
        opened_at: now,
        evidence: evidence.to_owned(),
    });
    if !keep_due {
        next.due_at = None;
    }
    Ok(next)
}

/// Moves the sweep's next look at an operation, without changing anything else.
pub fn reschedule(rec: &OperationRecord, due: DateTime<Utc>, now: DateTime<Utc>) -> OperationRecord {
    let mut next = step(rec, now);
    next.due_at = Some(due.timestamp_millis());
    next
}

/// `rendered` with delivery pending -> `collecting` under a delivery claim.
pub fn claim_delivery(
    rec: &OperationRecord,
    token: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    if rec.phase != Phase::Rendered {
        return Err(Refusal::WrongPhase {
            action: "deliver",
            actual: rec.phase,
            expected: "rendered",
        });
    }
    if matches!(
        rec.delivery_state,
        DeliveryState::Delivered | DeliveryState::DeliveryFailed
    ) {
        return Err(Refusal::DeliveryFinished {
            actual: rec.delivery_state,
        });
    }
    if let Some(c) = rec.delivery_claim.as_ref().filter(|c| c.lease_expires_at > now) {
        return Err(Refusal::LeaseLive {
            until: c.lease_expires_at,
        });
    }
    let mut next = step(rec, now);
    let lease_expires_at = now + policy.delivery_lease;
    next.delivery_state = DeliveryState::Collecting;
    next.delivery_claim = Some(Claim {
        token: token.to_owned(),
        lease_expires_at,
    });
    next.due_at = Some(lease_expires_at.timestamp_millis());
    Ok(next)
}

fn require_delivery_holder(rec: &OperationRecord, token: &str) -> Result<(), Refusal> {
    if rec.phase != Phase::Rendered || rec.delivery_state != DeliveryState::Collecting {
        return Err(Refusal::WrongPhase {
            action: "record delivery",
            actual: rec.phase,
            expected: "rendered and collecting",
        });
    }
    match &rec.delivery_claim {
        Some(c) if c.token == token => Ok(()),
        _ => Err(Refusal::NotClaimant),
    }
}

/// A delivery attempt failed: count it and release the claim for a retry at
/// `retry_at`, or, at the bound, give up with `delivery_failed` and a case.
/// Rendering is never repeated.
pub fn delivery_attempt_failed(
    rec: &OperationRecord,
    token: &str,
    error: &str,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    let mut next = step(rec, now);
    next.delivery_attempts = rec.delivery_attempts + 1;
    next.delivery_claim = None;
    next.last_error = Some(RemoteError {
        kind: "delivery".into(),
        status: None,
        detail: error.to_owned(),
    });
    if next.delivery_attempts >= policy.delivery_max_attempts {
        next.delivery_state = DeliveryState::DeliveryFailed;
        next.due_at = None;
        next.case = Some(ReconciliationCase {
            reason: CaseReason::DeliveryFailed,
            opened_at: now,
            evidence: format!("{} delivery attempts failed; last: {error}", next.delivery_attempts),
        });
    } else {
        next.due_at = Some(retry_at.timestamp_millis());
    }
    Ok(next)
}

/// `collecting -> delivered`: every output is stored and verified.
pub fn delivered(
    rec: &OperationRecord,
    token: &str,
    objects: Vec<DeliveredObject>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    let mut next = step(rec, now);
    next.delivery_state = DeliveryState::Delivered;
    next.delivery_claim = None;
    next.delivered_objects = objects;
    next.last_error = None;
    finish(&mut next, now, policy);
    Ok(next)
}

/// An operator's decision on an operation that waits for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// A job was found at Genace: record it and resume observation.
    AttachRemoteJob { job_id: String },
    /// Nothing was created at Genace: authorize one new dispatch. The only
    /// road back to `prepared`.
    ConfirmNotCreated,
    /// The failed job's refund is settled.
    MarkSettled,
    /// Try delivery again from the first output.
    RedriveDelivery,
    /// Close the operation without further work.
    Abandon,
}

impl Resolution {
    pub fn name(&self) -> &'static str {
        match self {
            Resolution::AttachRemoteJob { .. } => "attach_remote_job",
            Resolution::ConfirmNotCreated => "confirm_not_created",
            Resolution::MarkSettled => "mark_settled",
            Resolution::RedriveDelivery => "redrive_delivery",
            Resolution::Abandon => "abandon",
        }
    }
}

/// Applies an operator's decision, valid only from the right phase, and
/// appends who decided, when, what and why to the audit trail.
pub fn resolve(
    rec: &OperationRecord,
    resolution: &Resolution,
    actor: &str,
    reason: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    let refuse = |expected: &'static str| Refusal::WrongPhase {
        action: resolution.name(),
        actual: rec.phase,
        expected,
    };
    let case_reason = rec.case.as_ref().map(|c| c.reason);
    let mut next = step(rec, now);
    match resolution {
        Resolution::AttachRemoteJob { job_id } => {
            let missing = rec.phase == Phase::Accepted && case_reason == Some(CaseReason::RemoteJobMissing);
            if rec.phase != Phase::Uncertain && !missing {
                return Err(refuse("uncertain, or accepted with its remote job missing"));
            }
            next.phase = Phase::Accepted;
            next.remote_job_id = Some(job_id.clone());
            next.remote_state = None;
            next.observed_at = None;
            next.accepted_at = Some(rec.accepted_at.unwrap_or(now));
            next.claim = None;
            next.case = None;
            next.due_at = Some((now + policy.observe_grace).timestamp_millis());
        }
        Resolution::ConfirmNotCreated => {
            if rec.phase != Phase::Uncertain {
                return Err(refuse("uncertain"));
            }
            next.phase = Phase::Prepared;
            next.claim = None;
            next.case = None;
            next.last_error = None;
            next.due_at = Some(now.timestamp_millis());
        }
        Resolution::MarkSettled => {
            if rec.phase != Phase::SubmitFailed || rec.settlement != Some(Settlement::Pending) {
                return Err(refuse("submit_failed with settlement pending"));
            }
            next.settlement = Some(Settlement::Settled);
            next.case = None;
            finish(&mut next, now, policy);
        }
        Resolution::RedriveDelivery => {
            if rec.phase != Phase::Rendered || rec.delivery_state != DeliveryState::DeliveryFailed {
                return Err(refuse("rendered with delivery_failed"));
            }
            next.delivery_state = DeliveryState::NotCollected;
            next.delivery_attempts = 0;
            next.delivery_claim = None;
            next.case = None;
            next.due_at = Some(now.timestamp_millis());
        }
        Resolution::Abandon => {
            if rec.case.is_none() || rec.phase == Phase::Abandoned {
                return Err(refuse("an open reconciliation case"));
            }
            next.phase = Phase::Abandoned;
            next.case = None;
            next.delivery_claim = None;
            finish(&mut next, now, policy);
        }
    }
    next.audit.push(AuditEntry {
        actor: actor.to_owned(),
        at: now,
        action: resolution.name().to_owned(),
        reason: reason.to_owned(),
        job_id: match resolution {
            Resolution::AttachRemoteJob { job_id } => Some(job_id.clone()),
            _ => None,
        },
    });
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::genace::{JobSnapshot, RenderStatus};
    use crate::record::{DeliveredObject, OutputRef};
    use serde_json::json;

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
            error: (status == RenderStatus::Failed).then(|| json!({"code": "nsfw"})),
        }
    }

    #[test]
    fn observe_records_progress_and_skips_writes_that_change_nothing() {
        let p = Policy::default();
        let later = t0() + Duration::seconds(10);
        let next_check = later + Duration::seconds(60);
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
        assert_eq!(r.due_at, Some(next_check.timestamp_millis()));
        // Same state, deadline still covers the next check: nothing to write.
        let same = observe(&r, &snap("queued", RenderStatus::Running), later, next_check, &p).unwrap();
        assert_eq!(same, r);
        let moved = observe(&r, &snap("running", RenderStatus::Running), later, next_check, &p).unwrap();
        assert_eq!(moved.version, r.version + 1);
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
        assert!(done.due_at.is_some(), "delivery is due");
        assert!(observe(&done, &snap("failed", RenderStatus::Failed), t0(), t0(), &p).is_err());

        let failed = observe(&accepted_rec(), &snap("failed", RenderStatus::Failed), t0(), t0(), &p).unwrap();
        assert_eq!(failed.phase, Phase::RenderFailed);
        assert!(failed.last_error.as_ref().unwrap().detail.contains("nsfw"));
        assert!(failed.expires_at.is_some());
        assert_eq!(failed.due_at, None);
        assert!(observe(&failed, &snap("completed", RenderStatus::Succeeded), t0(), t0(), &p).is_err());
        assert!(observe(&prepared(), &snap("queued", RenderStatus::Running), t0(), t0(), &p).is_err());
    }

    #[test]
    fn cases_on_accepted_operations() {
        let missing = open_case(&accepted_rec(), CaseReason::RemoteJobMissing, "404", false, t0()).unwrap();
        assert_eq!(missing.phase, Phase::Accepted);
        assert_eq!(missing.case.as_ref().unwrap().reason, CaseReason::RemoteJobMissing);
        assert_eq!(missing.due_at, None);
        assert_eq!(
            open_case(&missing, CaseReason::RemoteJobMissing, "again", false, t0()).unwrap(),
            missing
        );
        let stalled = open_case(&accepted_rec(), CaseReason::RenderStalled, "6h", true, t0()).unwrap();
        assert!(stalled.due_at.is_some(), "polling goes on");
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
        assert!(done.expires_at.is_some());
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
        assert_eq!(once.due_at, Some(retry_at.timestamp_millis()));
        assert_eq!(once.phase, Phase::Rendered, "never re-rendered");
        let again = claim_delivery(&once, "d2", t0(), &p).unwrap();
        let gave_up = delivery_attempt_failed(&again, "d2", "503 again", retry_at, t0(), &p).unwrap();
        assert_eq!(gave_up.delivery_state, DeliveryState::DeliveryFailed);
        assert_eq!(gave_up.case.unwrap().reason, CaseReason::DeliveryFailed);
        assert_eq!(gave_up.due_at, None);
    }

    #[test]
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
        assert!(settled.expires_at.is_some());
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
        assert!(abandoned.expires_at.is_some());
    }
}
