//! Reconciliation cases: why a person is needed, and the runbook's advice.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseReason {
    /// The POST's outcome is unknown (timeout, reset, 5xx without id, malformed 202).
    UnknownSubmitOutcome,
    /// A dispatcher's lease expired while it was submitting: it may have POSTed.
    InterruptedDispatch,
    /// Genace does not know the saved job id, or answered for another id.
    RemoteJobMissing,
    /// No terminal state was observed within the deadline.
    RenderStalled,
    /// Delivery failed after the bounded number of attempts.
    DeliveryFailed,
    /// A 502 with a job id: a failed remote job whose refund needs settling.
    SettlementPending,
    /// Genace reported the job completed, but its outputs were null, empty or
    /// unreadable: nothing can be delivered.
    OutputsMissing,
    /// An output URL was refused by the URL guard (scheme, host, address or
    /// port); retrying cannot change that.
    OutputUrlRefused,
    /// An output is larger than the configured byte cap.
    OutputTooLarge,
    /// Genace refused our account (401, 402, 403, a wrong path): the
    /// operation is held undispatched, not rejected.
    AccountProblem,
    /// Genace kept answering 429 past the bound: the operation is held.
    RateLimited,
}

impl CaseReason {
    pub const ALL: [CaseReason; 11] = [
        CaseReason::UnknownSubmitOutcome,
        CaseReason::InterruptedDispatch,
        CaseReason::RemoteJobMissing,
        CaseReason::RenderStalled,
        CaseReason::DeliveryFailed,
        CaseReason::SettlementPending,
        CaseReason::OutputsMissing,
        CaseReason::OutputUrlRefused,
        CaseReason::OutputTooLarge,
        CaseReason::AccountProblem,
        CaseReason::RateLimited,
    ];

    /// The reason named `s` (its `as_str`).
    pub fn parse(s: &str) -> Option<CaseReason> {
        CaseReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CaseReason::UnknownSubmitOutcome => "unknown_submit_outcome",
            CaseReason::InterruptedDispatch => "interrupted_dispatch",
            CaseReason::RemoteJobMissing => "remote_job_missing",
            CaseReason::RenderStalled => "render_stalled",
            CaseReason::DeliveryFailed => "delivery_failed",
            CaseReason::SettlementPending => "settlement_pending",
            CaseReason::OutputsMissing => "outputs_missing",
            CaseReason::OutputUrlRefused => "output_url_refused",
            CaseReason::OutputTooLarge => "output_too_large",
            CaseReason::AccountProblem => "account_problem",
            CaseReason::RateLimited => "rate_limited",
        }
    }

    /// What the operators' runbook says to do about a case of this reason:
    /// the decisions to consider, the usual one first, and the checks that
    /// choose between them. The API shows it with every case, so the CLI
    /// and the console give the same advice.
    pub fn runbook(self) -> Runbook {
        let (actions, advice): (&'static [&'static str], &'static str) = match self {
            CaseReason::UnknownSubmitOutcome | CaseReason::InterruptedDispatch => (
                &["attach_remote_job", "confirm_not_created"],
                "A job may exist at Genace. Look for it there by the operation id (its client_reference) \
                 around the time the case opened. Found: attach its id and observation resumes. \
                 Certainly absent: confirm it was not created, which allows exactly one new POST.",
            ),
            CaseReason::RemoteJobMissing => (
                &["attach_remote_job", "abandon"],
                "Genace does not know the saved job id, or answered for another operation. Find the job \
                 that carries this operation id as client_reference and attach it; abandon if none exists.",
            ),
            CaseReason::RenderStalled => (
                &["abandon"],
                "No final state within the stall deadline. Check the job at Genace: polling goes on, and a \
                 final state closes the case by itself. Abandon only a job Genace has lost for good.",
            ),
            CaseReason::DeliveryFailed => (
                &["redrive_delivery", "abandon"],
                "Every delivery attempt failed. Fix the cause named in the evidence (the bucket, the network, \
                 Genace's output host), then redrive: rendering is never repeated.",
            ),
            CaseReason::SettlementPending => (
                &["mark_settled"],
                "Genace failed the job after taking it. Confirm the refund with Genace's billing, then mark \
                 it settled.",
            ),
            CaseReason::OutputsMissing => (
                &["abandon"],
                "Genace reported the job completed with no readable outputs. Ask Genace's support; abandon \
                 when nothing can be recovered.",
            ),
            CaseReason::OutputUrlRefused => (
                &["redrive_delivery", "abandon"],
                "The URL guard refused an output's address. If Genace really serves outputs from that host, \
                 allow it in the delivery policy and redrive; otherwise abandon.",
            ),
            CaseReason::OutputTooLarge => (
                &["redrive_delivery", "abandon"],
                "An output is over MAX_OUTPUT_BYTES. Raise the limit and redrive, or abandon.",
            ),
            CaseReason::AccountProblem => (
                &["release_hold"],
                "Genace refused our account (key, billing or path). Fix the account, then release the hold; \
                 a later try that succeeds also closes the case by itself.",
            ),
            CaseReason::RateLimited => (
                &["release_hold"],
                "Genace kept refusing with 429 while nothing of ours was rendering: an account problem. \
                 Check the account's limits with Genace, then release the hold.",
            ),
        };
        Runbook { actions, advice }
    }
}

/// The runbook's advice for one case reason ([`CaseReason::runbook`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Runbook {
    /// Decisions (resolution actions) to consider, the usual one first.
    pub actions: &'static [&'static str],
    /// How to choose between them.
    pub advice: &'static str,
}

/// An open question a person must answer. While a case is open nothing
/// automatic creates remote work for the operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconciliationCase {
    pub reason: CaseReason,
    pub opened_at: DateTime<Utc>,
    pub evidence: String,
}
