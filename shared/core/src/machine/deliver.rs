//! The delivery section of the table: claiming a rendered operation's
//! outputs, each attempt's outcome, and giving up.

use chrono::{DateTime, Utc};

use crate::domain::Fault;
use crate::record::{CaseReason, Claim, DeliveredObject, DeliveryState, OperationRecord, RemoteError};

use super::policy::Policy;
use super::refusal::Refusal;
use super::steps::{consume_fault, finish, hold_with_case};

/// `rendered` with delivery pending -> `collecting` under a delivery claim.
pub(super) fn claim_delivery(
    rec: &OperationRecord,
    token: &str,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    if matches!(
        rec.delivery_state,
        DeliveryState::Delivered | DeliveryState::DeliveryFailed
    ) {
        return Err(Refusal::DeliveryFinished {
            actual: rec.delivery_state,
        });
    }
    if let Some(case) = &rec.case {
        return Err(Refusal::CaseOpen(case.reason));
    }
    if let Some(c) = rec.delivery_claim.as_ref().filter(|c| c.lease_expires_at > now) {
        return Err(Refusal::LeaseLive {
            until: c.lease_expires_at,
        });
    }
    if rec.delivery_attempts >= policy.delivery_max_attempts {
        return Err(Refusal::AttemptsExhausted(rec.delivery_attempts));
    }
    let mut next = rec.clone();
    let lease_expires_at = now + policy.delivery_lease;
    // The attempt counts when it starts, so attempts that stop without
    // reporting (a timeout, a crash) still use up the bound.
    next.delivery_attempts = rec.delivery_attempts + 1;
    next.delivery_state = DeliveryState::Collecting;
    next.delivery_claim = Some(Claim {
        token: token.to_owned(),
        lease_expires_at,
    });
    next.due_at_ms = Some(lease_expires_at.timestamp_millis());
    consume_fault(&mut next, Fault::fires_in_delivery);
    Ok(next)
}

/// `collecting -> delivery_failed` with a case, when every attempt was used
/// and the last one stopped without reporting (its claim lapsed).
pub(super) fn give_up_delivery(rec: &OperationRecord, now: DateTime<Utc>) -> Result<OperationRecord, Refusal> {
    if !matches!(
        rec.delivery_state,
        DeliveryState::NotCollected | DeliveryState::Collecting
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
    let mut next = rec.clone();
    next.delivery_state = DeliveryState::DeliveryFailed;
    next.delivery_claim = None;
    let evidence = format!(
        "{} delivery attempts were used; the last stopped without reporting{}",
        rec.delivery_attempts,
        rec.last_error
            .as_ref()
            .map(|e| format!(" (earlier: {})", e.detail))
            .unwrap_or_default()
    );
    hold_with_case(&mut next, CaseReason::DeliveryFailed, evidence, now);
    Ok(next)
}

fn require_delivery_holder(rec: &OperationRecord, token: &str) -> Result<(), Refusal> {
    if rec.delivery_state != DeliveryState::Collecting {
        return Err(Refusal::DeliveryFinished {
            actual: rec.delivery_state,
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
pub(super) fn delivery_attempt_failed(
    rec: &OperationRecord,
    token: &str,
    error: &str,
    retry_at: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    let mut next = rec.clone();
    next.delivery_claim = None;
    next.last_error = Some(RemoteError {
        kind: "delivery".into(),
        status: None,
        detail: error.to_owned(),
    });
    if next.delivery_attempts >= policy.delivery_max_attempts {
        next.delivery_state = DeliveryState::DeliveryFailed;
        let evidence = format!("{} delivery attempts failed; last: {error}", next.delivery_attempts);
        hold_with_case(&mut next, CaseReason::DeliveryFailed, evidence, now);
    } else {
        next.due_at_ms = Some(retry_at.timestamp_millis());
    }
    Ok(next)
}

/// `collecting -> delivery_failed` at once: an output can never be fetched
/// (its URL is refused, or it is over the byte cap), so retrying is pointless.
/// The case names the output and the rule, never the URL's query string.
pub(super) fn delivery_refused(
    rec: &OperationRecord,
    token: &str,
    reason: CaseReason,
    evidence: &str,
    now: DateTime<Utc>,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    let mut next = rec.clone();
    next.delivery_state = DeliveryState::DeliveryFailed;
    next.delivery_claim = None;
    next.last_error = Some(RemoteError {
        kind: "delivery".into(),
        status: None,
        detail: evidence.to_owned(),
    });
    hold_with_case(&mut next, reason, evidence.to_owned(), now);
    Ok(next)
}

/// `collecting -> delivered`: every output is stored and verified.
pub(super) fn delivered(
    rec: &OperationRecord,
    token: &str,
    objects: Vec<DeliveredObject>,
    now: DateTime<Utc>,
    policy: &Policy,
) -> Result<OperationRecord, Refusal> {
    require_delivery_holder(rec, token)?;
    if objects.is_empty() {
        return Err(Refusal::CaseOpen(CaseReason::OutputsMissing));
    }
    let mut next = rec.clone();
    next.delivery_state = DeliveryState::Delivered;
    next.delivery_claim = None;
    next.delivered_objects = objects;
    next.delivered_at = Some(now);
    next.last_error = None;
    finish(&mut next, now, policy);
    Ok(next)
}
