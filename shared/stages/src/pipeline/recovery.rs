//! The recovery channel: remote outcomes that dispatch received but could
//! not write to the record. The consumer applies them later, only to the
//! claim they were received under, and never creates anything remote.

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use tracing::{error, info, warn};

use crate::pipeline::stage::{Stage, StageError};
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, commit_with, write_attempts};
use crate::ports::queue::WorkQueue;
use genace_core::machine::{self, AcceptedJob, Input, Policy};
use genace_core::messages::Queue;
use genace_core::messages::{RecoveredOutcome, RecoveryMessage};
use genace_core::record::{OperationRecord, Phase, RemoteError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryOutcome {
    /// The saved outcome is now on the record.
    Applied(Phase),
    /// The operation no longer exists (past its retention).
    Missing,
}

/// The recovery stage: applies saved outcomes to their records.
pub struct Recovery<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    pub policy: Policy,
    pub clock: P::Clock,
}

impl<P: Ports> Stage for Recovery<P> {
    type Message = RecoveryMessage;
    type Outcome = RecoveryOutcome;
    const NAME: &'static str = "recovery";

    async fn handle(&self, message: RecoveryMessage) -> Result<RecoveryOutcome, StageError> {
        self.apply(&message).await
    }
}

impl<P: Ports> Recovery<P> {
    /// Applies one recovery message. A refusal (another claim, another job,
    /// an operator's decision) is an error: the message stays and ends in the
    /// recovery DLQ, where an alarm brings a person to it.
    pub async fn apply(&self, msg: &RecoveryMessage) -> Result<RecoveryOutcome, StageError> {
        let (store, queue, policy) = (&self.store, &self.queue, &self.policy);
        let now = self.clock.now();
        let Some(rec) = store.get(&msg.operation_id, now).await? else {
            error!(operation_id = %msg.operation_id, raw_response = %msg.raw_response, "recovery message for a missing operation");
            return Ok(RecoveryOutcome::Missing);
        };
        let token = msg.claim_token.as_str();
        // Each decision also says whether the record it wrote freed room
        // (judged on the record it replaced), for the wake-up below.
        let decide = |r: &OperationRecord, input: Input<'_>| {
            let next = machine::transition(r, input, now, policy)?;
            let freed = genace_core::ledger::frees_room(r, &next);
            Ok((next, freed))
        };
        let result = match &msg.outcome {
            RecoveredOutcome::Accepted {
                job_id,
                state,
                model,
                created_at,
                held_credits,
            } => {
                let job = AcceptedJob {
                    job_id: job_id.clone(),
                    state: state.clone(),
                    model: model.clone(),
                    created_at: created_at.clone(),
                    held_credits: *held_credits,
                };
                commit_with(store, rec, write_attempts(), |r| {
                    decide(r, Input::Accepted { token, job: &job })
                })
                .await
            }
            RecoveredOutcome::FailedWithJob { job_id, error } => {
                let remote = RemoteError {
                    kind: "http_502".into(),
                    status: Some(502),
                    detail: error.to_string(),
                };
                commit_with(store, rec, write_attempts(), |r| {
                    let input = Input::SubmitFailed {
                        token,
                        job_id,
                        error: &remote,
                    };
                    decide(r, input)
                })
                .await
            }
        };
        match result {
            Ok((rec, freed)) => {
                info!(operation_id = %rec.operation_id, remote_job_id = ?rec.remote_job_id, phase = rec.phase.as_str(), "recovered outcome applied");
                if freed {
                    crate::pipeline::wake::wake_if_room_for(store, queue, &rec.tenant_id).await;
                }
                if rec.phase == Phase::Accepted && rec.observed_at.is_none() {
                    let first = genace_core::messages::WorkMessage::first_look(&rec);
                    queue.send_work(Queue::Poll, &first, 0).await?;
                }
                Ok(RecoveryOutcome::Applied(rec.phase))
            }
            Err(CommitError::Refused { refusal, current }) => {
                error!(operation_id = %current.operation_id, phase = current.phase.as_str(), %refusal, raw_response = %msg.raw_response, "recovery message refused");
                self.keep_unsaved(*current, msg).await;
                Err(StageError::Refused(refusal.to_string()))
            }
            Err(CommitError::Store(e)) => Err(e.into()),
        }
    }

    /// Keeps the job id of a refused message on its record, where the case
    /// views show it and a scoped operator may attach it. The message
    /// stays too: it ends in the dead-letter queue, whose alarm brings a
    /// person. A failure here loses nothing (the message is read again).
    async fn keep_unsaved(&self, current: OperationRecord, msg: &RecoveryMessage) {
        // A job Genace failed at once (a 502) is a refund to settle, not
        // a job to attach: only an accepted one is kept.
        let RecoveredOutcome::Accepted { job_id, .. } = &msg.outcome else {
            return;
        };
        let (now, policy) = (self.clock.now(), &self.policy);
        let kept = commit(&self.store, current, write_attempts(), |r| {
            machine::transition(r, Input::JobUnsaved { job_id }, now, policy)
        })
        .await;
        match kept {
            Ok(rec)
                if !rec.unsaved_jobs.iter().any(|j| j == job_id) && rec.remote_job_id.as_deref() != Some(job_id) =>
            {
                warn!(operation_id = %msg.operation_id, remote_job_id = %job_id, kept = rec.unsaved_jobs.len(), "the record keeps no more unsaved job ids; this one is on the recovery queue only");
            }
            Ok(_) => {}
            Err(e) => {
                warn!(operation_id = %msg.operation_id, remote_job_id = %job_id, error = %e, "the unsaved job id could not be kept on the record");
            }
        }
    }
}
