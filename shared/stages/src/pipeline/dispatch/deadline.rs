//! Dispatch against its invocation's deadline: a claim, a POST and the
//! save of what Genace answers start only when they can end before the
//! invocation is stopped, with the recovery channel's reserve kept back
//! (`ports::deadline`; docs/decisions/0002).

use std::time::Duration;

use tracing::warn;

use super::{Dispatched, Dispatcher, JOB_SAVE_TRY_SECONDS, RECOVERY_RESERVE, WRITE_SECONDS};
use crate::pipeline::stage::{StageError, commit_failure};
use crate::ports::Ports;
use crate::ports::clock::Clock;
use crate::ports::commit::{commit_with, write_attempts};
use crate::ports::genace::Genace;
use crate::ports::queue::{RecoveryChannel, WorkQueue};
use genace_core::machine::{self, Input};
use genace_core::messages::Queue;
use genace_core::record::{OperationRecord, Phase};

impl<P: Ports> Dispatcher<P>
where
    P::Queue: RecoveryChannel,
    P::Genace: Genace,
{
    /// With too little of the invocation left to claim, POST and save, a
    /// fresh invocation takes the operation (sent to dispatch again), and
    /// nothing is claimed for nothing: a claim a brownout left to lapse
    /// would become a case that says it may have POSTed.
    pub(super) async fn too_late_to_claim(
        &self,
        rec: &OperationRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<Dispatched>, StageError> {
        let claim_time = Duration::from_secs(WRITE_SECONDS.unsigned_abs());
        let short = crate::ports::deadline::left(now).is_some_and(|left| left < self.post_time() + claim_time);
        if rec.phase != Phase::Prepared || !short {
            return Ok(None);
        }
        let id = &rec.operation_id;
        warn!(operation_id = %id, "too little time left to claim and POST; sent to dispatch again");
        self.metrics.count("ClaimsUnused", &[]);
        self.queue.enqueue(Queue::Dispatch, id, 1).await?;
        Ok(Some(Dispatched::Released))
    }

    /// What a POST needs of the invocation: the POST at its longest, one
    /// try of saving its answer, and the recovery channel's reserve.
    fn post_time(&self) -> Duration {
        self.genace.longest_submit() + Duration::from_secs(JOB_SAVE_TRY_SECONDS) + RECOVERY_RESERVE
    }

    /// With too little of the invocation left for the POST (its longest),
    /// one try of saving its answer and the recovery channel's reserve, the
    /// claim is released unPOSTed and the operation sent to dispatch again
    /// (`ClaimsUnused`): a POST must never be cut in half by the stop, with
    /// the job id it names known only to a log.
    pub(super) async fn release_if_too_late(
        &self,
        claimed: &OperationRecord,
        token: &str,
    ) -> Result<Option<Dispatched>, StageError> {
        let now = self.clock.now();
        let Some(left) = crate::ports::deadline::left(now) else {
            return Ok(None);
        };
        if left >= self.post_time() {
            return Ok(None);
        }
        let id = &claimed.operation_id;
        warn!(operation_id = %id, left_ms = left.as_millis() as u64, "too little time left to POST and save; the claim is released");
        let policy = self.config.policy;
        let input = Input::ClaimUnused { token, retry_at: now };
        let (_, freed) = commit_with(&self.store, claimed.clone(), write_attempts(), |r| {
            let next = machine::transition(r, input, now, &policy)?;
            let freed = genace_core::ledger::frees_room(r, &next);
            Ok((next, freed))
        })
        .await
        .map_err(commit_failure)?;
        self.metrics.count("ClaimsUnused", &[]);
        self.queue.enqueue(Queue::Dispatch, id, 1).await?;
        if freed {
            crate::pipeline::wake::wake_if_room_for(&self.store, &self.queue, &claimed.tenant_id).await;
        }
        Ok(Some(Dispatched::Released))
    }
}
