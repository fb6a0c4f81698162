//! Dispatch: one claimant, one POST, and the accepted job id saved before
//! anything announces it.

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use std::time::Duration;

use tracing::{info, warn};

use crate::config::Config;
use crate::pipeline::poll::FIRST_POLL_DELAY_SECONDS;
use crate::pipeline::stage::{Stage, StageError, case_opened, commit_failure};
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, commit_with, write_attempts};
use crate::ports::genace::Genace;
use crate::ports::metrics::Metrics;
use crate::ports::queue::{RecoveryChannel, WorkQueue};
use crate::ports::table::StoreError;
use genace_core::domain::OperationId;
use genace_core::machine::{self, Input, Refusal};
use genace_core::messages::Queue;
use genace_core::messages::WorkMessage;
use genace_core::record::{CancelReason, Fault, OperationRecord, Phase, RemoteError};
use genace_core::remote::{self as genace, SubmitOutcome};

mod deadline;
mod outcome;
mod refused;

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
    /// Every slot of the Genace account was taken: nothing was POSTed, and
    /// the operation waits to be woken when a slot frees.
    WaitingForCapacity,
    /// We claimed and POSTed once; this is how it ended.
    Posted(PostResult),
    /// Its dispatch deadline passed before any claim: cancelled, no POST.
    Expired,
    /// Too little of the invocation was left for a claim, the POST and the
    /// save of its answer: not claimed (or, when the claim itself took the
    /// time, released unPOSTed), and sent to dispatch again.
    Released,
    /// A look at a wait begun moments ago ran a wake-up for its tenant.
    Looked,
}

/// Who the audit names when a deadline cancels an operation.
pub use genace_core::record::DEADLINE_ACTOR;

/// What one dispatch decided, as written.
enum Decided {
    /// Claimed: it POSTs once, firing this fault directive; it had waited since then.
    Claimed {
        fault: Option<Fault>,
        waited_since: Option<(genace_core::record::WaitReason, chrono::DateTime<chrono::Utc>)>,
    },
    /// A lapsed claim: uncertain, with a case.
    Interrupted,
    /// Past its deadline: cancelled (it had waited in the order).
    Expired(bool),
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

pub struct Dispatcher<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    pub genace: P::Genace,
    pub config: Config,
    pub clock: P::Clock,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
}

/// What a refused claim waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    Credits,
    /// A slot of the Genace account.
    Capacity,
    /// A slot under the tenant's own limit of jobs in flight: it waits for
    /// capacity too, but a free slot of the account is not what it lacks.
    TenantSlot,
}

/// Bounds applied to a 429's Retry-After.
pub(super) const MIN_RETRY: Duration = Duration::from_secs(1);
pub(super) const DEFAULT_RETRY: Duration = Duration::from_secs(30);

/// How long after Genace's answer a job id it named may still be tried in
/// the table while the table is busy (every try of its transaction met a
/// conflict), before it goes to the recovery channel: within the dispatch
/// function's time (60 s) after the longest POST (`GENACE_TIMEOUT_SECONDS`,
/// 30 s), with room for the recovery send (`tests/tests/template.rs` holds
/// them together).
pub const JOB_SAVE_SECONDS: u64 = 15;

/// The longest one busy try of saving a job id takes: four commit
/// attempts of eight transaction tries, each pausing at most 640 ms, and
/// the commit's own pauses. A try starts only if it can end within
/// [`JOB_SAVE_SECONDS`].
pub(super) const JOB_SAVE_TRY_SECONDS: u64 = 7;

/// What dispatch keeps back of its invocation for the recovery channel: the
/// recovery send's own bound (5 s, the SQS client's operation timeout) and
/// a margin. A job id not saved by then goes to the recovery queue.
pub const RECOVERY_RESERVE: Duration = Duration::from_secs(8);

/// The longest one write of the table takes (the DynamoDB client's
/// operation timeout, 5 s, and a commit's pause): a write that fails is
/// tried again only with that much left before the save's bound.
pub(super) const WRITE_SECONDS: i64 = 6;

/// The longest pause between two tries of saving a job id.
pub(super) const JOB_SAVE_PAUSE_MAX: Duration = Duration::from_secs(2);

impl<P: Ports> Stage for Dispatcher<P>
where
    P::Queue: RecoveryChannel,
    P::Genace: Genace,
{
    type Message = WorkMessage;
    type Outcome = Dispatched;
    const NAME: &'static str = "dispatch";

    async fn handle(&self, message: WorkMessage) -> Result<Dispatched, StageError> {
        if message.look {
            return self.look(&message.operation_id).await;
        }
        self.dispatch(&message.operation_id).await
    }

    async fn handle_receipt(&self, message: WorkMessage, receives: u32) -> Result<Dispatched, StageError> {
        if message.look {
            return self.look(&message.operation_id).await;
        }
        self.dispatch_received(&message.operation_id, receives > 1).await
    }
}

impl<P: Ports> Dispatcher<P>
where
    P::Queue: RecoveryChannel,
    P::Genace: Genace,
{
    /// A look at a wait `id` began moments ago ([`WorkMessage::look`]),
    /// now that the wait indexes show it: while no slot is free, nothing
    /// (one account read: the end of a job wakes it in its turn); with one
    /// free, a slot freed before the indexes showed the wait may have
    /// woken nobody, and it is dispatched as a woken operation is. Nothing
    /// when it no longer waits in its tenant's order.
    pub async fn look(&self, id: &OperationId) -> Result<Dispatched, StageError> {
        let Some(rec) = self.store.get(id, self.clock.now()).await? else {
            return Ok(Dispatched::Missing);
        };
        if rec.waits_in_order().is_none() {
            return Ok(Dispatched::NotDispatchable(rec.phase));
        }
        if !self.store.account().await?.has_room() {
            return Ok(Dispatched::Looked);
        }
        // A wait for credits is dispatched only once they fit: a claim
        // refused for them would cost a cancelled transaction.
        if rec.spend_hold.is_some() {
            let ledger = self.store.ledger(&rec.tenant_id).await?;
            let need = genace_core::ledger::reservation(&rec);
            if ledger.headroom().is_some_and(|room| room < need) {
                return Ok(Dispatched::Looked);
            }
        }
        self.dispatch_received(id, false).await
    }

    /// Dispatches `id` for a message that may be a redelivery.
    pub async fn dispatch(&self, id: &OperationId) -> Result<Dispatched, StageError> {
        self.dispatch_received(id, true).await
    }

    /// Dispatches `id`. `received_again`: the queue handed this message out
    /// before, so the dispatcher that took it may have stopped after its
    /// commit and before it sent the first poll, which this one then sends.
    /// A first delivery for an operation accepted meanwhile is a duplicate
    /// (a second wake-up, the intake message after a wake-up): the
    /// dispatcher that committed the 202 sent the poll, and a second one
    /// would start a second chain of polls for the job's whole life.
    pub async fn dispatch_received(&self, id: &OperationId, received_again: bool) -> Result<Dispatched, StageError> {
        let now = self.clock.now();
        let Some(rec) = self.store.get(id, now).await? else {
            warn!(operation_id = %id, "dispatch message for a missing operation");
            return Ok(Dispatched::Missing);
        };
        if let Some(later) = self.too_late_to_claim(&rec, now).await? {
            return Ok(later);
        }
        let token = uuid::Uuid::new_v4().to_string();
        let shard = self.claim_shard(&rec).await;
        // One decision, re-made on the current record when the write loses a race.
        // The deadline is judged at the time of each claim write, not at
        // the first read: a retried write reads the clock again.
        let decided = commit_with(&self.store, rec, write_attempts(), |r| {
            self.decide(r, &token, shard, self.clock.now())
        })
        .await;
        match decided {
            Ok((claimed, Decided::Claimed { fault, waited_since })) => {
                self.admitted(waited_since, now);
                if let Some(released) = self.release_if_too_late(&claimed, &token).await? {
                    return Ok(released);
                }
                // Nothing between the claim and its POST but the POST: the
                // next waiters are woken once its outcome is committed.
                let posted = self.submit(claimed, &token, fault).await;
                if waited_since.is_some() {
                    // Woken and admitted: there may be room for the next.
                    crate::pipeline::wake::wake_if_room(&self.store, &self.queue).await;
                }
                posted.map(Dispatched::Posted)
            }
            Ok((interrupted, Decided::Interrupted)) => {
                case_opened(&self.metrics, &interrupted);
                Ok(Dispatched::Interrupted)
            }
            Ok((_, Decided::Expired(waited))) => Ok(self.expired(id, waited).await),
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
                    if received_again && current.phase == Phase::Accepted && current.observed_at.is_none() {
                        // Resume after a stop between the commit and the poll enqueue.
                        let first = genace_core::messages::WorkMessage::first_look(&current);
                        self.queue
                            .send_work(Queue::Poll, &first, FIRST_POLL_DELAY_SECONDS)
                            .await?;
                    }
                    Ok(Dispatched::NotDispatchable(current.phase))
                }
            },
            Err(CommitError::Store(StoreError::SpendLimit)) => self.wait(id, now, Room::Credits).await,
            Err(CommitError::Store(StoreError::AccountFull)) => self.wait(id, now, Room::Capacity).await,
            Err(CommitError::Store(StoreError::TenantFull)) => self.wait(id, now, Room::TenantSlot).await,
            Err(CommitError::Store(e)) => Err(e.into()),
        }
    }

    /// What dispatch writes over `r`: the claim; for a claim whose lease
    /// lapsed, the interruption; past the deadline, whatever held it, the
    /// cancel (never a POST).
    fn decide(
        &self,
        r: &OperationRecord,
        token: &str,
        shard: u16,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(OperationRecord, Decided), Refusal> {
        let policy = self.config.policy;
        match r.phase {
            Phase::Submitting if !genace_core::planted::on(genace_core::planted::REPOST_AFTER_LEASE) => {
                let evidence = "a dispatcher's claim expired before its outcome was recorded; it may have POSTed";
                machine::transition(r, Input::LeaseExpired { evidence }, now, &policy)
                    .map(|next| (next, Decided::Interrupted))
            }
            Phase::Prepared if r.deadline_passed(now) => {
                let input = Input::Cancel {
                    by: DEADLINE_ACTOR,
                    reason: CancelReason::Deadline,
                };
                machine::transition(r, input, now, &policy).map(|next| (next, Decided::Expired(r.wait().is_some())))
            }
            _ => {
                // The fault directive the claim consumes fires in this attempt.
                let fault = r.fault.filter(|f| self.config.fault_injection && f.fires_in_dispatch());
                let waited_since = r.wait();
                machine::transition(r, Input::ClaimDispatch { token, shard }, now, &policy)
                    .map(|next| (next, Decided::Claimed { fault, waited_since }))
            }
        }
    }

    /// The account shard a claim of `rec` goes to: its home; for an
    /// operation woken from a wait for a slot, a shard with a free slot
    /// when its own has none ([`genace_core::shard::woken_claim_shard`]),
    /// read in one request. With one shard, no read.
    async fn claim_shard(&self, rec: &OperationRecord) -> u16 {
        let shards = self.config.policy.account_shards;
        let home = shards.home(rec);
        if shards.get() == 1 || !matches!(rec.wait(), Some((genace_core::record::WaitReason::Capacity, _))) {
            return home;
        }
        match self.store.account_shards().await {
            Ok(mut all) => {
                // Only the shards in use take claims.
                all.truncate(usize::from(shards.get()));
                genace_core::shard::woken_claim_shard(home, &all)
            }
            Err(e) => {
                warn!(operation_id = %rec.operation_id, error = %e, "account shards unread; claiming on the home shard");
                home
            }
        }
    }

    /// Cancelled at its deadline: counted, and a wake-up it may have been
    /// sent is passed on.
    async fn expired(&self, id: &OperationId, waited: bool) -> Dispatched {
        info!(operation_id = %id, "dispatch deadline passed before any claim; cancelled with no POST");
        self.metrics
            .count("Cancelled", &[("Reason", CancelReason::Deadline.as_str())]);
        if waited {
            crate::pipeline::wake::wake_if_room(&self.store, &self.queue).await;
        }
        Dispatched::Expired
    }

    /// A claim was admitted: counted, with how long it waited when it did,
    /// and the wait a span of the operation's trace, from its start.
    fn admitted(
        &self,
        waited_since: Option<(genace_core::record::WaitReason, chrono::DateTime<chrono::Utc>)>,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        self.metrics.count("Admitted", &[]);
        if let Some((reason, since)) = waited_since {
            let waited = (now - since).num_milliseconds().max(0) as f64 / 1000.0;
            self.metrics.emit("WaitSeconds", waited, "Seconds", &[]);
            let name = match reason {
                genace_core::record::WaitReason::Capacity => "wait.capacity",
                genace_core::record::WaitReason::SpendLimit => "wait.credits",
            };
            genace_trace::wait_span(name, since.into(), vec![]);
        }
    }

    /// Records that the operation waits in its tenant's order (for its
    /// tenant's spend limit, or a slot of the Genace account). It sets no
    /// timer: it is woken by the write that frees what it lacks, and a lost
    /// wake-up is repaired by the sweep's look at the account.
    async fn wait(
        &self,
        id: &OperationId,
        now: chrono::DateTime<chrono::Utc>,
        room: Room,
    ) -> Result<Dispatched, StageError> {
        let policy = self.config.policy;
        let Some(rec) = self.store.get(id, now).await? else {
            return Ok(Dispatched::Missing);
        };
        let input = match room {
            Room::Credits => Input::SpendLimitReached,
            Room::Capacity | Room::TenantSlot => Input::CapacityReached,
        };
        // A wait that begins now reaches the wait indexes late.
        let newly = rec.waits_in_order().is_none();
        match commit(&self.store, rec, write_attempts(), |r| {
            machine::transition(r, input, now, &policy)
        })
        .await
        {
            Ok(waited) if room == Room::Credits => {
                // Woken by the next write that frees credits, or, if one
                // came before this wait, by its id now; a wait begun while
                // its tenant's jobs run also gets a look once the indexes
                // show it (docs/decisions/0006).
                crate::pipeline::wake::wake_after_credit_wait(&self.store, &self.queue, &waited, newly).await;
                info!(operation_id = %id, "spend limit reached; the operation waits for credits");
                self.metrics.count("SpendLimitWait", &[]);
                Ok(Dispatched::WaitingForCredits)
            }
            Ok(_) => {
                info!(operation_id = %id, "the Genace account is full; the operation waits for a slot");
                self.metrics.count("CapacityWait", &[]);
                // A slot freed between the refusal and this write woke
                // nobody: look once more, now that the wait is on record
                // (by its id too, when an account slot is what it lacks:
                // the indexes may not show it yet; one at its tenant's own
                // limit would only be refused again).
                if room == Room::Capacity {
                    crate::pipeline::wake::wake_after_wait(&self.store, &self.queue, id, newly).await;
                } else {
                    crate::pipeline::wake::wake_if_room(&self.store, &self.queue).await;
                    if newly {
                        // The end of one of its tenant's jobs wakes it, if
                        // the waiting order shows it by then.
                        crate::pipeline::wake::look_once_settled(&self.queue, id).await;
                    }
                }
                Ok(Dispatched::WaitingForCapacity)
            }
            // Claimed or moved on meanwhile: nothing to hold.
            Err(CommitError::Refused { current, .. }) => Ok(Dispatched::NotDispatchable(current.phase)),
            Err(CommitError::Store(e)) => Err(e.into()),
        }
    }

    /// POSTs once for the claimed operation and records how it ended: the
    /// faults around the POST, the log line that names a job id before any
    /// commit, then one method per outcome.
    async fn submit(
        &self,
        claimed: OperationRecord,
        token: &str,
        fault: Option<Fault>,
    ) -> Result<PostResult, StageError> {
        if fault == Some(Fault::DispatchBeforePost) {
            return Err(StageError::Crashed("dispatch.before_post"));
        }
        info!(operation_id = %claimed.operation_id, tenant = %claimed.tenant_id, phase = "submitting", "posting to Genace");
        let outcome = self.genace.submit(&genace::submission_body(&claimed)).await;
        let posted = Posted {
            claimed,
            token,
            received_at: self.clock.now(),
            fault,
        };
        log_job_id(&posted, &outcome);
        self.metrics
            .count("DispatchOutcome", &[("Outcome", outcome_name(&outcome))]);
        if fault == Some(Fault::DispatchAfterResponse) {
            return Err(StageError::Crashed("dispatch.after_response"));
        }
        match outcome {
            SubmitOutcome::Accepted { job, raw } => self.accepted(posted, job, raw).await,
            SubmitOutcome::FailedWithJob { job_id, error, raw } => {
                self.failed_with_job(posted, job_id, error, raw).await
            }
            SubmitOutcome::Rejected { status, detail } => {
                let error = http_error(status, detail);
                let input = Input::Rejected { token, error: &error };
                // Genace ran nothing: the claim's slot goes to the next
                // waiting operation. (A 429 or an account refusal frees the
                // slot too, but waking another POST there would only meet
                // the same answer.)
                self.record_freeing(&posted, input).await.map_err(commit_failure)?;
                Ok(PostResult::Rejected)
            }
            SubmitOutcome::AccountProblem { status, detail } => self.account_refused(posted, status, detail).await,
            SubmitOutcome::RateLimited { retry_after } => self.rate_limited(posted, retry_after).await,
            SubmitOutcome::Unknown { evidence } => {
                warn!(operation_id = %posted.claimed.operation_id, %evidence, "submission outcome unknown");
                let input = Input::OutcomeUnknown {
                    token,
                    evidence: &evidence,
                };
                let rec = self.record(&posted, input).await.map_err(commit_failure)?;
                case_opened(&self.metrics, &rec);
                Ok(PostResult::Uncertain)
            }
        }
    }

    /// Writes `input` over the claimed record, as of when the answer came.
    async fn record(&self, posted: &Posted<'_>, input: Input<'_>) -> Result<OperationRecord, CommitError> {
        let policy = self.config.policy;
        commit(&self.store, posted.claimed.clone(), write_attempts(), |r| {
            machine::transition(r, input, posted.received_at, &policy)
        })
        .await
    }

    /// [`Self::record`] for an outcome that may free room (a 202 holding
    /// less than was reserved, a 502 naming a failed job, a refused
    /// request, a refused account): wakes waiting operations when the record written, judged
    /// against the one it replaced, freed a slot or credits.
    pub(super) async fn record_freeing(
        &self,
        posted: &Posted<'_>,
        input: Input<'_>,
    ) -> Result<OperationRecord, CommitError> {
        let (rec, freed) = self.commit_freeing_until(posted, input, None).await?;
        if freed {
            crate::pipeline::wake::wake_if_room_for(&self.store, &self.queue, &rec.tenant_id).await;
        }
        Ok(rec)
    }

    /// The commit of [`Self::record_freeing`], trying a failed write again
    /// only while one more can end by `until`, and whether it freed room
    /// (the caller wakes the next waiting operations then).
    pub(super) async fn commit_freeing_until(
        &self,
        posted: &Posted<'_>,
        input: Input<'_>,
        until: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<(OperationRecord, bool), CommitError> {
        let policy = self.config.policy;
        let write = chrono::Duration::seconds(WRITE_SECONDS);
        let time_left = || until.is_none_or(|u| self.clock.now() + write <= u);
        let decide = |r: &OperationRecord| {
            let next = machine::transition(r, input, posted.received_at, &policy)?;
            let freed = genace_core::ledger::frees_room(r, &next);
            Ok((next, freed))
        };
        crate::ports::commit::commit_while(&self.store, posted.claimed.clone(), write_attempts(), decide, time_left)
            .await
    }
}

/// One POST's context: the record as claimed, the claim token, when the
/// answer came, and the fault directive read at the claim.
pub(super) struct Posted<'a> {
    pub(super) claimed: OperationRecord,
    pub(super) token: &'a str,
    pub(super) received_at: chrono::DateTime<chrono::Utc>,
    pub(super) fault: Option<Fault>,
}

/// The id is written to the log the moment it is known, before any commit:
/// if everything after this fails, the log still names the job.
fn log_job_id(posted: &Posted<'_>, outcome: &SubmitOutcome) {
    let (job_id, status) = match outcome {
        SubmitOutcome::Accepted { job, .. } => (job.job_id.as_str(), 202),
        SubmitOutcome::FailedWithJob { job_id, .. } => (job_id.as_str(), 502),
        _ => return,
    };
    let rec = &posted.claimed;
    info!(operation_id = %rec.operation_id, tenant = %rec.tenant_id, claim_token = posted.token, remote_job_id = %job_id, status, "Genace job id received");
}

/// A refusal Genace answered with `status`.
pub(super) fn http_error(status: u16, detail: String) -> RemoteError {
    RemoteError {
        kind: format!("http_{status}"),
        status: Some(status),
        detail,
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
