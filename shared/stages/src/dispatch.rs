//! Dispatch: one claimant, one POST, and the accepted job id saved before
//! anything announces it.

use std::time::Duration;

use tracing::{error, info, warn};

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::genace::Genace;
use crate::metrics;
use crate::queue::{RecoveryChannel, WorkQueue};
use crate::stage::{Stage, StageError, case_opened, commit_failure, write_attempts};
use crate::table::{CommitError, OperationStore, StoreError, commit, commit_with};
use genace_core::domain::OperationId;
use genace_core::machine::{self, Event, Refusal};
use genace_core::messages::Queue;
use genace_core::messages::WorkMessage;
use genace_core::messages::{RecoveredOutcome, RecoveryMessage};
use genace_core::record::{Fault, OperationRecord, Phase, RemoteError};
use genace_core::remote::{self as genace, SubmitOutcome};

/// What one dispatch message led to. The message is acknowledged in every case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dispatched {
    /// No such live operation.
    Missing,
    /// The operation is past dispatch (or waiting for an operator); nothing to do.
    NotDispatchable(Phase),
    /// Another dispatcher holds a live claim.
    Duplicate,
    /// A claim's lease had expired: the operation is now uncertain, with a case.
    Interrupted,
    /// A 429 or an account hold asked us to wait; this early message was
    /// dropped (the delayed one, or the sweep at `retry_at`, comes later).
    Deferred,
    /// Held with an open case (repeated 429s): only an operator releases it.
    Held,
    /// The claim would take the tenant past its spend limit: nothing was
    /// POSTed, and dispatch looks again after the policy's recheck interval.
    WaitingForCredits,
    /// We claimed and POSTed once; this is how it ended.
    Posted(PostResult),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostResult {
    Accepted,
    /// Accepted, but the record could not be written: the response is on the recovery queue.
    AcceptedUnpersisted,
    SubmitFailed,
    /// The 502's job id could not be written: it is on the recovery queue.
    SubmitFailedUnpersisted,
    Rejected,
    /// 401/402/403/404/405 and the like: held with an `account_problem` case.
    AccountHeld,
    RateLimited,
    Uncertain,
}

pub struct Dispatcher<S, Q, G, C = SystemClock> {
    pub store: S,
    pub queue: Q,
    pub genace: G,
    pub config: Config,
    pub clock: C,
}

/// Bounds applied to a 429's Retry-After.
const MIN_RETRY: Duration = Duration::from_secs(1);
const DEFAULT_RETRY: Duration = Duration::from_secs(30);
/// Delay before the first poll of an accepted job.
const FIRST_POLL_DELAY_SECONDS: u32 = 5;

impl<S, Q, G, C> Stage for Dispatcher<S, Q, G, C>
where
    S: OperationStore,
    Q: WorkQueue + RecoveryChannel,
    G: Genace,
    C: Clock,
{
    type Message = WorkMessage;
    type Outcome = Dispatched;

    async fn handle(&self, message: WorkMessage) -> Result<Dispatched, StageError> {
        self.dispatch(&message.operation_id).await
    }
}

impl<S, Q, G, C> Dispatcher<S, Q, G, C>
where
    S: OperationStore,
    Q: WorkQueue + RecoveryChannel,
    G: Genace,
    C: Clock,
{
    pub async fn dispatch(&self, id: &OperationId) -> Result<Dispatched, StageError> {
        let now = self.clock.now();
        let Some(rec) = self.store.get(id, now).await? else {
            warn!(operation_id = %id, "dispatch message for a missing operation");
            return Ok(Dispatched::Missing);
        };
        let token = uuid::Uuid::new_v4().to_string();
        let (policy, faults) = (self.config.policy, self.config.fault_injection);
        // One decision, re-made on the current record when the write loses a
        // race: the claim, or, for a claim whose lease lapsed, the interruption.
        let decided = commit_with(&self.store, rec, write_attempts(), |r| match r.phase {
            Phase::Submitting if !machine::planted::on(machine::planted::REPOST_AFTER_LEASE) => {
                let evidence = "a dispatcher's claim expired before its outcome was recorded; it may have POSTed";
                machine::transition(r, Event::LeaseExpired { evidence }, now, &policy).map(|next| (next, None))
            }
            _ => {
                // The fault directive the claim consumes fires in this attempt.
                let fault = r.fault.filter(|f| faults && f.fires_in_dispatch());
                machine::transition(r, Event::ClaimDispatch { token: &token }, now, &policy)
                    .map(|next| (next, Some(fault)))
            }
        })
        .await;
        match decided {
            Ok((claimed, Some(fault))) => self.submit(claimed, &token, fault).await.map(Dispatched::Posted),
            Ok((interrupted, None)) => {
                case_opened(&interrupted);
                Ok(Dispatched::Interrupted)
            }
            Err(CommitError::Refused { refusal, current }) => match refusal {
                Refusal::NotYet { until } => {
                    info!(operation_id = %id, %until, "dispatch must wait; early message dropped");
                    Ok(Dispatched::Deferred)
                }
                Refusal::CaseOpen(reason) => {
                    info!(operation_id = %id, reason = reason.as_str(), "operation held for a person");
                    Ok(Dispatched::Held)
                }
                Refusal::LeaseLive { .. } => {
                    info!(operation_id = %id, "claim held by another dispatcher; duplicate message acknowledged");
                    Ok(Dispatched::Duplicate)
                }
                _ if current.phase == Phase::Prepared => Err(StageError::Refused(refusal.to_string())),
                _ => {
                    if current.phase == Phase::Accepted && current.observed_at.is_none() {
                        // Resume after a stop between the commit and the poll enqueue.
                        self.queue.enqueue(Queue::Poll, id, FIRST_POLL_DELAY_SECONDS).await?;
                    }
                    Ok(Dispatched::NotDispatchable(current.phase))
                }
            },
            Err(CommitError::Store(StoreError::SpendLimit)) => self.wait_for_credits(id, now).await,
            Err(CommitError::Store(e)) => Err(e.into()),
        }
    }

    /// Records that the operation waits for its tenant's spend limit, and
    /// when dispatch looks again (the sweep re-sends it then).
    async fn wait_for_credits(
        &self,
        id: &OperationId,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Dispatched, StageError> {
        let policy = self.config.policy;
        let Some(rec) = self.store.get(id, now).await? else {
            return Ok(Dispatched::Missing);
        };
        let retry_at = now + policy.spend_recheck;
        match commit(&self.store, rec, write_attempts(), |r| {
            machine::transition(r, Event::SpendLimitReached { retry_at }, now, &policy)
        })
        .await
        {
            Ok(_) => {
                info!(operation_id = %id, %retry_at, "spend limit reached; dispatch waits for credits");
                metrics::count("SpendLimitWait", &[]);
                Ok(Dispatched::WaitingForCredits)
            }
            // Claimed or moved on meanwhile: nothing to hold.
            Err(CommitError::Refused { current, .. }) => Ok(Dispatched::NotDispatchable(current.phase)),
            Err(CommitError::Store(e)) => Err(e.into()),
        }
    }

    async fn submit(
        &self,
        claimed: OperationRecord,
        token: &str,
        fault: Option<Fault>,
    ) -> Result<PostResult, StageError> {
        let id = claimed.operation_id.clone();
        if fault == Some(Fault::DispatchBeforePost) {
            return Err(StageError::Crashed("dispatch.before_post"));
        }
        info!(operation_id = %id, tenant = %claimed.tenant_id, phase = "submitting", "posting to Genace");
        let outcome = self.genace.submit(&genace::submission_body(&claimed)).await;
        let received_at = self.clock.now();
        // The id is written to the log the moment it is known, before any
        // commit: if everything after this fails, the log still names the job.
        match &outcome {
            SubmitOutcome::Accepted { job, .. } => {
                info!(operation_id = %id, tenant = %claimed.tenant_id, claim_token = token, remote_job_id = %job.job_id, status = 202, "Genace job id received")
            }
            SubmitOutcome::FailedWithJob { job_id, .. } => {
                info!(operation_id = %id, tenant = %claimed.tenant_id, claim_token = token, remote_job_id = %job_id, status = 502, "Genace job id received")
            }
            _ => {}
        }
        metrics::count("DispatchOutcome", &[("Outcome", outcome_name(&outcome))]);
        if fault == Some(Fault::DispatchAfterResponse) {
            return Err(StageError::Crashed("dispatch.after_response"));
        }
        let policy = self.config.policy;
        match outcome {
            SubmitOutcome::Accepted { job, raw } => {
                let written = if fault == Some(Fault::DispatchPersistFails) {
                    Err(CommitError::Store(crate::table::StoreError::Service(
                        "injected: dispatch.persist_fails".into(),
                    )))
                } else {
                    commit(&self.store, claimed.clone(), write_attempts(), |r| {
                        machine::transition(r, Event::Accepted { token, job: &job }, received_at, &policy)
                    })
                    .await
                };
                match written {
                    Ok(rec) => {
                        info!(operation_id = %id, remote_job_id = %job.job_id, phase = "accepted", "accepted job saved");
                        if fault == Some(Fault::DispatchAfterCommit) {
                            return Err(StageError::Crashed("dispatch.after_commit"));
                        }
                        self.queue
                            .enqueue(Queue::Poll, &rec.operation_id, FIRST_POLL_DELAY_SECONDS)
                            .await?;
                        Ok(PostResult::Accepted)
                    }
                    Err(e) => {
                        self.unpersisted(
                            &claimed,
                            token,
                            RecoveryMessage::accepted(&claimed, token, &job, &raw, received_at),
                            &e,
                        )
                        .await;
                        Ok(PostResult::AcceptedUnpersisted)
                    }
                }
            }
            SubmitOutcome::FailedWithJob { job_id, error, raw } => {
                let remote = RemoteError {
                    kind: "http_502".into(),
                    status: Some(502),
                    detail: error.to_string(),
                };
                let written = commit(&self.store, claimed.clone(), write_attempts(), |r| {
                    machine::transition(
                        r,
                        Event::SubmitFailed {
                            token,
                            job_id: &job_id,
                            error: &remote,
                        },
                        received_at,
                        &policy,
                    )
                })
                .await;
                match written {
                    Ok(rec) => {
                        case_opened(&rec);
                        Ok(PostResult::SubmitFailed)
                    }
                    Err(e) => {
                        let msg = RecoveryMessage {
                            operation_id: id.clone(),
                            claim_token: token.to_owned(),
                            outcome: RecoveredOutcome::FailedWithJob { job_id, error },
                            raw_response: raw,
                            received_at,
                        };
                        self.unpersisted(&claimed, token, msg, &e).await;
                        Ok(PostResult::SubmitFailedUnpersisted)
                    }
                }
            }
            SubmitOutcome::Rejected { status, detail } => {
                let remote = RemoteError {
                    kind: format!("http_{status}"),
                    status: Some(status),
                    detail,
                };
                commit(&self.store, claimed, write_attempts(), |r| {
                    machine::transition(r, Event::Rejected { token, error: &remote }, received_at, &policy)
                })
                .await
                .map_err(commit_failure)?;
                Ok(PostResult::Rejected)
            }
            SubmitOutcome::AccountProblem { status, detail } => {
                let remote = RemoteError {
                    kind: format!("http_{status}"),
                    status: Some(status),
                    detail,
                };
                let rec = commit(&self.store, claimed, write_attempts(), |r| {
                    machine::transition(r, Event::AccountRefused { token, error: &remote }, received_at, &policy)
                })
                .await
                .map_err(commit_failure)?;
                error!(operation_id = %id, status, "Genace refused the account; the operation is held, not rejected");
                metrics::count("AccountProblem", &[("Status", &status.to_string())]);
                case_opened(&rec);
                // One second past the hold, within SQS's longest delay (a
                // hold of 900 s or more once asked for 901, which SQS refuses).
                let max_delay = i64::from(crate::queue::MAX_DELAY_SECONDS);
                let wait = (policy.account_hold.num_seconds() + 1).clamp(1, max_delay) as u32;
                self.queue.enqueue(Queue::Dispatch, &id, wait).await?;
                Ok(PostResult::AccountHeld)
            }
            SubmitOutcome::RateLimited { retry_after } => {
                let wait = retry_after
                    .unwrap_or(DEFAULT_RETRY)
                    .clamp(MIN_RETRY, Duration::from_secs(crate::queue::MAX_DELAY_SECONDS.into()));
                let retry_at = received_at + chrono::Duration::from_std(wait).expect("bounded");
                let rec = commit(&self.store, claimed, write_attempts(), |r| {
                    machine::transition(r, Event::RateLimited { token, retry_at }, received_at, &policy)
                })
                .await
                .map_err(commit_failure)?;
                if rec.case.is_some() {
                    case_opened(&rec);
                } else {
                    // One second late rather than early: an early copy is dropped.
                    let delay = (wait.as_secs() as u32 + 1).min(crate::queue::MAX_DELAY_SECONDS);
                    self.queue.enqueue(Queue::Dispatch, &id, delay).await?;
                }
                Ok(PostResult::RateLimited)
            }
            SubmitOutcome::Unknown { evidence } => {
                warn!(operation_id = %id, %evidence, "submission outcome unknown");
                let rec = commit(&self.store, claimed, write_attempts(), |r| {
                    machine::transition(
                        r,
                        Event::OutcomeUnknown {
                            token,
                            evidence: &evidence,
                        },
                        received_at,
                        &policy,
                    )
                })
                .await
                .map_err(commit_failure)?;
                case_opened(&rec);
                Ok(PostResult::Uncertain)
            }
        }
    }

    /// A remote job exists but the record could not say so. Keep the
    /// response on the restricted recovery queue, raise an incident, and never
    /// POST again: the record stays `submitting` until the recovery consumer
    /// applies it, or its lease expires and it becomes a case.
    async fn unpersisted(&self, rec: &OperationRecord, token: &str, msg: RecoveryMessage, cause: &CommitError) {
        metrics::count("AcceptedJobUnpersisted", &[]);
        let sent = self.queue.send_recovery(&msg).await;
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

fn outcome_name(o: &SubmitOutcome) -> &'static str {
    match o {
        SubmitOutcome::Accepted { .. } => "accepted",
        SubmitOutcome::FailedWithJob { .. } => "failed_with_job",
        SubmitOutcome::Rejected { .. } => "rejected",
        SubmitOutcome::RateLimited { .. } => "rate_limited",
        SubmitOutcome::AccountProblem { .. } => "account_problem",
        SubmitOutcome::Unknown { .. } => "unknown",
    }
}
