//! What dispatch does with an answer that names a Genace job (a 202, or a
//! 502 with the failed job's id): the id is saved in the record, tried
//! again while the table is busy or failing, and handed to the recovery
//! channel only when that time is over.

use std::time::Duration;

use tracing::{error, info, warn};

use super::{
    Dispatcher, JOB_SAVE_PAUSE_MAX, JOB_SAVE_SECONDS, JOB_SAVE_TRY_SECONDS, PostResult, Posted, RECOVERY_RESERVE,
};
use crate::pipeline::poll::{
    FIRST_POLL_DELAY_SECONDS, SWEEP_SLACK_SECONDS, look_at_ms, next_look_delay, planned, queue_delay_until,
};
use crate::pipeline::stage::{StageError, case_opened};
use crate::ports::Ports;
use crate::ports::clock::Clock;
use crate::ports::commit::CommitError;
use crate::ports::genace::Genace;
use crate::ports::queue::{RecoveryChannel, WorkQueue};
use crate::ports::table::StoreError;
use genace_core::machine::{self, Input};
use genace_core::messages::{PollHistory, Queue, RecoveredOutcome, RecoveryMessage, WorkMessage};
use genace_core::record::{Fault, OperationRecord, RemoteError};

impl<P: Ports> Dispatcher<P>
where
    P::Queue: RecoveryChannel,
    P::Genace: Genace,
{
    /// [`Self::record_freeing`] for an outcome that names a Genace job: a
    /// table that is busy (every try of the transaction met a conflict) is
    /// tried again, pausing up to [`JOB_SAVE_PAUSE_MAX`], for as long as a
    /// try can still end within [`JOB_SAVE_SECONDS`] of the answer and
    /// [`RECOVERY_RESERVE`] before the invocation's deadline. Only then is
    /// the id the recovery channel's: contention is not an incident. A
    /// table that fails otherwise (unreachable, timing out, refusing) is
    /// one: its write is tried again only while a try can end by the same
    /// bound, and a try still running at the bound is given up, so the id
    /// reaches the recovery channel before the invocation is stopped,
    /// however slow the store.
    async fn save_job(&self, posted: &Posted<'_>, input: Input<'_>) -> Result<OperationRecord, CommitError> {
        // The bound: JOB_SAVE_SECONDS after the answer, and never past the
        // invocation's deadline less the recovery channel's reserve.
        let after_answer = posted.received_at + chrono::Duration::seconds(JOB_SAVE_SECONDS as i64);
        let deadline = crate::ports::deadline::current();
        let until = deadline.map_or(after_answer, |d| {
            after_answer.min(d - chrono::Duration::from_std(RECOVERY_RESERVE).unwrap_or_default())
        });
        let last_start = until - chrono::Duration::seconds(JOB_SAVE_TRY_SECONDS as i64);
        let mut pause = Duration::from_millis(100);
        loop {
            let tried = match deadline {
                // However slow the store, the try ends by the bound: what
                // it had not saved by then goes to the recovery channel.
                Some(_) => {
                    let left = (until - self.clock.now()).to_std().unwrap_or_default();
                    tokio::time::timeout(left, self.commit_freeing_until(posted, input, Some(until)))
                        .await
                        .unwrap_or_else(|_| {
                            Err(CommitError::Store(StoreError::Service(
                                "saving the job id ran out of the invocation's time".into(),
                            )))
                        })
                }
                None => self.commit_freeing_until(posted, input, Some(until)).await,
            };
            match tried {
                // Saved: the wake-up it owes comes after, outside the bound.
                Ok((rec, freed)) => {
                    if freed {
                        crate::pipeline::wake::wake_if_room_for(&self.store, &self.queue, &rec.tenant_id).await;
                    }
                    return Ok(rec);
                }
                Err(CommitError::Store(e @ StoreError::Contention))
                    if self.clock.now() + chrono::Duration::from_std(pause).unwrap_or_default() <= last_start =>
                {
                    warn!(operation_id = %posted.claimed.operation_id, error = %e, "the job id is not saved yet; trying again");
                    self.metrics.count("JobSaveRetried", &[]);
                    self.clock.pause(pause).await;
                    pause = (pause * 2).min(JOB_SAVE_PAUSE_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The first poll of a job just saved: when its class's plan says (its
    /// render times are read here, once, and carried in the message), but
    /// before the sweep's deadline, else [`FIRST_POLL_DELAY_SECONDS`] after
    /// the 202.
    async fn first_look(&self, rec: &OperationRecord) -> Result<(), StageError> {
        let max = self.config.poll_max_delay_seconds;
        let chain = PollHistory {
            chain: rec.poll_chain,
            ..PollHistory::default()
        };
        let mut history = planned(&self.store, rec, chain, max).await;
        // Before the sweep's deadline the acceptance set (`observe_grace`,
        // less its slack): a later first look would find a second chain of
        // polls, started by the sweep, already looking.
        let grace = self.config.policy.observe_grace.num_seconds() - SWEEP_SLACK_SECONDS;
        let latest = u32::try_from(grace).unwrap_or(0).max(FIRST_POLL_DELAY_SECONDS);
        let now = self.clock.now();
        let seconds = match history.plan {
            Some(_) => next_look_delay(rec, &history, now, max).min(f64::from(latest)),
            None => f64::from(FIRST_POLL_DELAY_SECONDS),
        };
        let at = look_at_ms(now, seconds);
        history.look_at_ms = Some(at);
        let delay = queue_delay_until(at, self.clock.now());
        let message = WorkMessage {
            operation_id: rec.operation_id.clone(),
            poll: Some(history),
            look: false,
        };
        self.queue.send_work(Queue::Poll, &message, delay).await?;
        Ok(())
    }

    /// A 202: save the job id (or hand it to the recovery queue), then poll.
    pub(super) async fn accepted(
        &self,
        posted: Posted<'_>,
        job: machine::AcceptedJob,
        raw: String,
    ) -> Result<PostResult, StageError> {
        let token = posted.token;
        let written = if posted.fault == Some(Fault::DispatchPersistFails) {
            Err(CommitError::Store(StoreError::Service(
                "injected: dispatch.persist_fails".into(),
            )))
        } else {
            self.save_job(&posted, Input::Accepted { token, job: &job }).await
        };
        match written {
            Ok(rec) => {
                info!(operation_id = %rec.operation_id, remote_job_id = %job.job_id, phase = "accepted", "accepted job saved");
                if posted.fault == Some(Fault::DispatchAfterCommit) {
                    return Err(StageError::Crashed("dispatch.after_commit"));
                }
                self.first_look(&rec).await?;
                Ok(PostResult::Accepted)
            }
            Err(e) => {
                let claimed = &posted.claimed;
                let msg = RecoveryMessage::accepted(claimed, token, &job, &raw, posted.received_at);
                self.unpersisted(claimed, token, msg, &e).await;
                Ok(PostResult::AcceptedUnpersisted)
            }
        }
    }

    /// A 502 naming a failed job: save the id for settlement (or hand it to
    /// the recovery queue).
    pub(super) async fn failed_with_job(
        &self,
        posted: Posted<'_>,
        job_id: String,
        error: serde_json::Value,
        raw: String,
    ) -> Result<PostResult, StageError> {
        let token = posted.token;
        let remote = RemoteError {
            kind: "http_502".into(),
            status: Some(502),
            detail: error.to_string(),
        };
        let input = Input::SubmitFailed {
            token,
            job_id: &job_id,
            error: &remote,
        };
        // The failed job holds no slot: the record written wakes the next.
        match self.save_job(&posted, input).await {
            Ok(rec) => {
                case_opened(&self.metrics, &rec);
                Ok(PostResult::SubmitFailed)
            }
            Err(e) => {
                let msg = RecoveryMessage {
                    operation_id: posted.claimed.operation_id.clone(),
                    claim_token: token.to_owned(),
                    outcome: RecoveredOutcome::FailedWithJob { job_id, error },
                    raw_response: raw,
                    received_at: posted.received_at,
                };
                self.unpersisted(&posted.claimed, token, msg, &e).await;
                Ok(PostResult::SubmitFailedUnpersisted)
            }
        }
    }

    /// A remote job exists but the record could not say so. Keep the
    /// response on the restricted recovery queue, raise an incident, and never
    /// POST again: the record stays `submitting` until the recovery consumer
    /// applies it, or its lease expires and it becomes a case.
    async fn unpersisted(&self, rec: &OperationRecord, token: &str, msg: RecoveryMessage, cause: &CommitError) {
        self.metrics.count("AcceptedJobUnpersisted", &[]);
        let sent = if genace_core::planted::on(genace_core::planted::RECOVERY_SKIPPED) {
            Err(crate::ports::queue::QueueError {
                queue: genace_core::messages::Queue::Recovery,
                detail: "planted: not sent".into(),
            })
        } else {
            self.queue.send_recovery(&msg).await
        };
        error!(
            operation_id = %rec.operation_id,
            tenant = %rec.tenant_id,
            claim_token = token,
            raw_response = %msg.raw_response,
            cause = %cause,
            recovery_queued = sent.is_ok(),
            "INCIDENT: Genace answered with a job id that could not be saved"
        );
        if let Err(e) = sent {
            error!(operation_id = %rec.operation_id, error = %e, "the recovery queue refused the message too; the log above is the only copy");
        }
    }
}
