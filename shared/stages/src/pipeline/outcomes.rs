//! Each stage's outcome in words, for the people who read it: the
//! `outcome` of a stage's span, shown in the console's waterfall and by
//! `genace-ops trace`. (Their `Debug` form is for tests and logs.)

use std::fmt::{Display, Formatter, Result};

use crate::pipeline::deliver::DeliverResult;
use crate::pipeline::dispatch::{Dispatched, PostResult};
use crate::pipeline::poll::Polled;
use crate::pipeline::recovery::RecoveryOutcome;
use crate::pipeline::webhooks::send::Webhooked;

impl Display for Dispatched {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        match self {
            Dispatched::Missing => f.write_str("no such operation"),
            Dispatched::NotDispatchable(phase) => write!(f, "nothing to dispatch: {}", phase.as_str()),
            Dispatched::Duplicate => f.write_str("another dispatcher holds the claim"),
            Dispatched::Interrupted => f.write_str("a claim lapsed: outcome unknown, case opened"),
            Dispatched::Deferred => f.write_str("deferred: Genace asked to wait"),
            Dispatched::Held => f.write_str("held for an operator"),
            Dispatched::WaitingForCredits => f.write_str("waiting for credits"),
            Dispatched::WaitingForCapacity => f.write_str("waiting for a slot"),
            Dispatched::Posted(posted) => write!(f, "posted once: {posted}"),
            Dispatched::Expired => f.write_str("past its dispatch deadline: cancelled"),
            Dispatched::Released => f.write_str("too little time left to post: sent again"),
            Dispatched::Looked => f.write_str("looked at the wait"),
        }
    }
}

impl Display for PostResult {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        f.write_str(match self {
            PostResult::Accepted => "accepted",
            PostResult::AcceptedUnpersisted => "accepted; the job id went to the recovery queue",
            PostResult::SubmitFailed => "failed at Genace (502)",
            PostResult::SubmitFailedUnpersisted => "failed at Genace (502); the job id went to the recovery queue",
            PostResult::Rejected => "refused by Genace as a bad request",
            PostResult::AccountHeld => "Genace refused the account: held",
            PostResult::RateLimited => "rate limited (429): tried again later",
            PostResult::Uncertain => "outcome unknown: case opened",
        })
    }
}

impl Display for Polled {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        match self {
            Polled::Missing => f.write_str("no such operation"),
            Polled::NotObservable(phase) => write!(f, "nothing to look at: {}", phase.as_str()),
            Polled::Running { next_poll_seconds } => write!(f, "rendering; next look in {next_poll_seconds} s"),
            Polled::Rendered => f.write_str("rendered"),
            Polled::RenderFailed => f.write_str("render failed"),
            Polled::CaseOpened(reason) => write!(f, "case opened: {}", reason.as_str()),
            Polled::BackedOff { next_poll_seconds } => {
                write!(f, "Genace unreadable; next look in {next_poll_seconds} s")
            }
            Polled::Superseded => f.write_str("a newer chain of looks took over"),
        }
    }
}

impl Display for DeliverResult {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        match self {
            DeliverResult::Missing => f.write_str("no such operation"),
            DeliverResult::NotDeliverable(phase, state) => {
                write!(f, "nothing to deliver: {}, {}", phase.as_str(), state.as_str())
            }
            DeliverResult::Duplicate => f.write_str("another delivery holds the claim"),
            DeliverResult::Delivered { objects: 1 } => f.write_str("delivered 1 object"),
            DeliverResult::Delivered { objects } => write!(f, "delivered {objects} objects"),
            DeliverResult::Retrying {
                attempts,
                next_attempt_seconds,
            } => write!(f, "attempt {attempts} failed; next in {next_attempt_seconds} s"),
            DeliverResult::GaveUp { attempts } => write!(f, "gave up after {attempts} attempts: case opened"),
            DeliverResult::Refused { reason } => write!(f, "cannot be delivered: {}", reason.as_str()),
        }
    }
}

impl Display for Webhooked {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        match self {
            Webhooked::Sent(status) => write!(f, "sent: HTTP {status}"),
            Webhooked::NoWebhook => f.write_str("no receiver"),
            Webhooked::NotSubscribed => f.write_str("no receiver takes this type"),
            Webhooked::FannedOut(1) => f.write_str("one copy queued"),
            Webhooked::FannedOut(n) => write!(f, "a copy queued for each of {n} receivers"),
            Webhooked::DeadLettered(why) => write!(f, "dead-lettered: {why}"),
        }
    }
}

impl Display for RecoveryOutcome {
    fn fmt(&self, f: &mut Formatter<'_>) -> Result {
        match self {
            RecoveryOutcome::Applied(phase) => write!(f, "saved outcome applied: {}", phase.as_str()),
            RecoveryOutcome::Missing => f.write_str("no such operation"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use genace_core::record::{CaseReason, Phase};

    #[test]
    fn outcomes_read_as_words() {
        let words = [
            Dispatched::Posted(PostResult::Accepted).to_string(),
            Polled::Running { next_poll_seconds: 5 }.to_string(),
            Webhooked::Sent(200).to_string(),
            DeliverResult::Delivered { objects: 2 }.to_string(),
            Polled::CaseOpened(CaseReason::RenderStalled).to_string(),
            RecoveryOutcome::Applied(Phase::Accepted).to_string(),
        ];
        assert_eq!(
            words,
            [
                "posted once: accepted",
                "rendering; next look in 5 s",
                "sent: HTTP 200",
                "delivered 2 objects",
                "case opened: render_stalled",
                "saved outcome applied: accepted",
            ]
        );
        for w in &words {
            assert!(!w.contains(['(', '{', '}']) || w.contains("HTTP"), "{w}");
        }
    }
}
