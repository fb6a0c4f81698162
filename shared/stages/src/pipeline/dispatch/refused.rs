//! What dispatch does when Genace refuses for the account rather than the
//! request: a 429 (the operation waits for a slot, or is retried after the
//! Retry-After, and a lower limit is learned), or a refusal of the account
//! itself (the operation is held with a case).

use std::time::Duration;

use tracing::{error, info, warn};

use super::{DEFAULT_RETRY, Dispatcher, MIN_RETRY, PostResult, Posted, http_error};
use crate::pipeline::stage::{StageError, case_opened, commit_failure};
use crate::ports::Ports;
use crate::ports::genace::Genace;
use crate::ports::queue::{RecoveryChannel, WorkQueue};
use crate::ports::table::prelude::*;
use genace_core::machine::Input;
use genace_core::messages::Queue;

impl<P: Ports> Dispatcher<P>
where
    P::Queue: RecoveryChannel,
    P::Genace: Genace,
{
    /// Genace refused our account: hold the operation with a case, and look
    /// once more after the hold.
    pub(super) async fn account_refused(
        &self,
        posted: Posted<'_>,
        status: u16,
        detail: String,
    ) -> Result<PostResult, StageError> {
        let id = posted.claimed.operation_id.clone();
        let error = http_error(status, detail);
        let input = Input::AccountRefused {
            token: posted.token,
            error: &error,
        };
        // The held operation gives its slot back: the record written wakes
        // the next, which Genace may accept (a refusal can be this
        // request's alone) or hold in turn.
        let rec = self.record_freeing(&posted, input).await.map_err(commit_failure)?;
        error!(operation_id = %id, status, "Genace refused the account; the operation is held, not rejected");
        self.metrics.count("AccountProblem", &[("Status", &status.to_string())]);
        case_opened(&self.metrics, &rec);
        // One second past the hold, within SQS's longest delay (a hold of
        // 900 s or more once asked for 901, which SQS refuses).
        let max_delay = i64::from(crate::ports::queue::MAX_DELAY_SECONDS);
        let wait = (self.config.policy.account_hold.num_seconds() + 1).clamp(1, max_delay) as u32;
        self.queue.enqueue(Queue::Dispatch, &id, wait).await?;
        Ok(PostResult::AccountHeld)
    }

    /// A 429: release the claim until Retry-After (or hold with a case after
    /// too many in a row).
    pub(super) async fn rate_limited(
        &self,
        posted: Posted<'_>,
        retry_after: Option<Duration>,
    ) -> Result<PostResult, StageError> {
        let id = posted.claimed.operation_id.clone();
        let wait = retry_after.unwrap_or(DEFAULT_RETRY).clamp(
            MIN_RETRY,
            Duration::from_secs(crate::ports::queue::MAX_DELAY_SECONDS.into()),
        );
        let retry_at = posted.received_at + chrono::Duration::from_std(wait).expect("bounded");
        // Other jobs of ours holding slots (the account counts this claim's
        // own): the account is full, which is not a failure. Unknown counts
        // as not busy, so a stuck limit still reaches a person.
        let busy = match self.store.account().await {
            // Refused while we believed there was room: learn a lower
            // limit. A lesson not saved leaves the account showing the room
            // Genace refused, so no end of a job may come to wake a wait:
            // the 429 counts as not busy (a retry after Retry-After, and
            // toward a case if it repeats), and its next 429 teaches again.
            Ok(account) if account.in_flight > 1 => {
                crate::pipeline::wake::learn_from_429(&self.store, &account, &self.metrics, posted.received_at).await
            }
            Ok(_) => false,
            Err(e) => {
                warn!(operation_id = %id, error = %e, "account capacity unreadable after a 429");
                false
            }
        };
        let input = Input::RateLimited {
            token: posted.token,
            retry_at,
            busy,
        };
        let rec = self.record(&posted, input).await.map_err(commit_failure)?;
        if rec.case.is_some() {
            case_opened(&self.metrics, &rec);
        } else if rec.capacity_hold.is_some() {
            // Waits in its tenant's order: woken when one of our jobs ends.
            info!(operation_id = %id, "Genace's account is full of our jobs; the operation waits for a slot");
            self.metrics.count("CapacityWait", &[]);
            // The wait begins now, and reaches the wait indexes late.
            crate::pipeline::wake::look_once_settled(&self.queue, &id).await;
        } else {
            // One second late rather than early: an early copy is dropped.
            let delay = (wait.as_secs() as u32 + 1).min(crate::ports::queue::MAX_DELAY_SECONDS);
            self.queue.enqueue(Queue::Dispatch, &id, delay).await?;
        }
        Ok(PostResult::RateLimited)
    }
}
