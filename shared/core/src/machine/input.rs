//! Everything that can happen to an operation, as a stage or a person
//! reports it, and the decisions an operator can take.

use chrono::{DateTime, Utc};

use crate::record::{CancelReason, CaseReason, DeliveredObject, RemoteError};
use crate::remote::{AcceptedJob, JobSnapshot};

/// An operator's decision on an operation that waits for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// A job was found at Genace: record it and resume observation.
    AttachRemoteJob { job_id: String },
    /// Nothing was created at Genace: authorize one new dispatch. The only
    /// road back to `prepared`.
    ConfirmNotCreated,
    /// The account problem or rate limit that held a prepared operation is
    /// fixed: dispatch it now, under the same operation key.
    ReleaseHold,
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
            Resolution::ReleaseHold => "release_hold",
            Resolution::MarkSettled => "mark_settled",
            Resolution::RedriveDelivery => "redrive_delivery",
            Resolution::Abandon => "abandon",
        }
    }
}

/// Everything that can happen to an operation, as a stage or an operator
/// reports it.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// Dispatch claims a prepared operation: the only road to a POST.
    ClaimDispatch { token: &'a str, shard: u16 },
    /// The claim would take the tenant past its spend limit: wait to be
    /// woken by a write that may free credits.
    SpendLimitReached,
    /// Every slot of the Genace account is taken by our jobs: wait to be
    /// woken when a slot frees.
    CapacityReached,
    /// Genace answered 429: it did not process the request. `busy`: other
    /// jobs of ours held slots at Genace meanwhile, so the refusal is the
    /// account being full, which never counts toward a case.
    RateLimited {
        token: &'a str,
        retry_at: DateTime<Utc>,
        busy: bool,
    },
    /// Genace refused our account (401, 402, 403, a wrong path).
    AccountRefused { token: &'a str, error: &'a RemoteError },
    /// A 202 with a job id.
    Accepted { token: &'a str, job: &'a AcceptedJob },
    /// A 502 naming the failed job.
    SubmitFailed {
        token: &'a str,
        job_id: &'a str,
        error: &'a RemoteError,
    },
    /// 400, 409 or 422: the request itself is wrong.
    Rejected { token: &'a str, error: &'a RemoteError },
    /// Nobody knows whether Genace created a job.
    OutcomeUnknown { token: &'a str, evidence: &'a str },
    /// The claimant POSTed nothing: too little of its invocation was left
    /// for a POST and the save of what it answers. The claim is released
    /// for a dispatch at `retry_at`, with nothing counted against the
    /// operation.
    ClaimUnused { token: &'a str, retry_at: DateTime<Utc> },
    /// A dispatcher's claim lapsed before it recorded an outcome.
    LeaseExpired { evidence: &'a str },
    /// A recovery message carried job `job_id`, and the record refused it
    /// (another claim, another job, a person's decision): the id is kept
    /// beside the record, for a person to attach or account for.
    JobUnsaved { job_id: &'a str },
    /// A status snapshot of the saved job. `stalled` carries the evidence
    /// when the job is silent past the deadline: the stall case rides on
    /// the same write.
    Observed(Look<'a>),
    /// The remote job needs a person (missing, answered for another id, or
    /// silent past the deadline with no snapshot). `keep_due` keeps polling.
    CaseNeeded(NeededCase<'a>),
    /// A look at the job read nothing (a timeout, a 5xx, a 429) and the
    /// next one comes later than the sweep's deadline covers: the deadline
    /// moves to `next_check` (never earlier), so that the sweep does not
    /// start a second chain of looks beside the live one.
    LookDeferred { next_check: DateTime<Utc> },
    /// The sweep moves its next look.
    Reschedule { due: DateTime<Utc> },
    /// Deliver claims a rendered operation's outputs.
    ClaimDelivery { token: &'a str },
    /// Every delivery attempt was used and the last stopped without reporting.
    DeliveryLapsed,
    /// One delivery attempt failed; the next comes at `retry_at`.
    DeliveryFailed {
        token: &'a str,
        error: &'a str,
        retry_at: DateTime<Utc>,
    },
    /// An output can never be fetched.
    DeliveryRefused(RefusedDelivery<'a>),
    /// Every output is stored and verified.
    Delivered {
        token: &'a str,
        objects: &'a [DeliveredObject],
    },
    /// An operator's audited decision.
    Resolved(Decision<'a>),
    /// The operation is taken back before its dispatch claim: by `by` (its
    /// tenant or an operator) or by its deadline. It wins or loses against
    /// the claim in one conditional write.
    Cancel { by: &'a str, reason: CancelReason },
    /// The delivered objects were deleted from the bucket at `by`'s request.
    /// The tenant's or an operator's erasure; `objects`: the keys deleted.
    OutputsErased { by: &'a str, objects: &'a [String] },
}

/// Who decided what, and why.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    pub resolution: &'a Resolution,
    pub actor: &'a str,
    pub reason: &'a str,
}

impl Input<'_> {
    /// What the input asks for, as a refusal names it.
    pub fn name(&self) -> &'static str {
        match self {
            Input::ClaimDispatch { .. } => "claim",
            Input::SpendLimitReached => "wait for the spend limit",
            Input::CapacityReached => "wait for capacity",
            Input::RateLimited { .. } => "release",
            Input::AccountRefused { .. } => "hold",
            Input::Accepted { .. } => "accept",
            Input::SubmitFailed { .. } => "record a submission failure",
            Input::Rejected { .. } => "reject",
            Input::OutcomeUnknown { .. } => "mark uncertain",
            Input::ClaimUnused { .. } => "release an unused claim",
            Input::LeaseExpired { .. } => "interrupt",
            Input::JobUnsaved { .. } => "keep an unsaved job id",
            Input::Observed(..) => "observe",
            Input::CaseNeeded(..) => "open a case",
            Input::LookDeferred { .. } => "defer the next look",
            Input::Reschedule { .. } => "reschedule",
            Input::ClaimDelivery { .. } => "deliver",
            Input::DeliveryLapsed => "give up delivery",
            Input::DeliveryFailed { .. } => "record a failed delivery",
            Input::DeliveryRefused(..) => "record a refused delivery",
            Input::Delivered { .. } => "record delivery",
            Input::Resolved(d) => d.resolution.name(),
            Input::Cancel { .. } => "cancel",
            Input::OutputsErased { .. } => "erase outputs",
        }
    }

    /// Where the input applies, as a refusal names it.
    pub fn expected(&self) -> &'static str {
        match self {
            Input::ClaimDispatch { .. } | Input::SpendLimitReached | Input::CapacityReached => "prepared",
            Input::Cancel { .. } => "prepared, or cancelled already",
            Input::RateLimited { .. }
            | Input::AccountRefused { .. }
            | Input::Rejected { .. }
            | Input::OutcomeUnknown { .. }
            | Input::ClaimUnused { .. }
            | Input::LeaseExpired { .. } => "submitting",
            Input::Accepted { .. } | Input::SubmitFailed { .. } => "submitting or uncertain",
            Input::Observed(..) | Input::CaseNeeded(..) => "accepted",
            Input::LookDeferred { .. } => "accepted, or abandoned with its job observed",
            Input::Reschedule { .. } | Input::JobUnsaved { .. } => "any phase",
            Input::ClaimDelivery { .. }
            | Input::DeliveryLapsed
            | Input::DeliveryFailed { .. }
            | Input::DeliveryRefused(..)
            | Input::Delivered { .. } => "rendered",
            Input::OutputsErased { .. } => "finished, or rendered with its delivery over",
            Input::Resolved(d) => match d.resolution {
                Resolution::AttachRemoteJob { .. } => "uncertain, or accepted with its remote job missing",
                Resolution::ConfirmNotCreated => "uncertain, with no unsaved job id",
                Resolution::ReleaseHold => "prepared and held (account_problem or rate_limited)",
                Resolution::MarkSettled => "submit_failed with settlement pending",
                Resolution::RedriveDelivery => "rendered with delivery_failed",
                Resolution::Abandon => "an open reconciliation case",
            },
        }
    }
}

/// A status snapshot of the saved job and the looks around it
/// ([`Input::Observed`]).
#[derive(Debug, Clone, Copy)]
pub struct Look<'a> {
    pub snapshot: &'a JobSnapshot,
    pub next_check: DateTime<Utc>,
    pub stalled: Option<&'a str>,
    /// The looks before this one ([`crate::record::Detection`] once
    /// the job is seen to end).
    pub seen: &'a crate::record::Looks,
}

/// A case a look needs a person for ([`Input::CaseNeeded`]).
#[derive(Debug, Clone, Copy)]
pub struct NeededCase<'a> {
    pub reason: CaseReason,
    pub evidence: &'a str,
    pub keep_due: bool,
}

/// An output that can never be fetched, under the delivery's claim
/// ([`Input::DeliveryRefused`]).
#[derive(Debug, Clone, Copy)]
pub struct RefusedDelivery<'a> {
    pub token: &'a str,
    pub reason: CaseReason,
    pub evidence: &'a str,
}
