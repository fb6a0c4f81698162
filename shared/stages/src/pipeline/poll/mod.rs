//! Poll: observe an accepted job, by its saved remote id, until a terminal state.

mod schedule;

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use chrono::{DateTime, Duration, Utc};
use tracing::{info, warn};

use crate::config::Config;
use crate::pipeline::stage::{Stage, StageError, case_opened};
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, commit_with, write_attempts};
use crate::ports::genace::Genace;
use crate::ports::metrics::Metrics;
use crate::ports::queue::WorkQueue;
use genace_core::domain::OperationId;
use genace_core::machine::{self, Input};
use genace_core::messages::Queue;
use genace_core::messages::{PollHistory, WorkMessage};
use genace_core::record::{CaseReason, Fault, Looks, MAX_LOOKS_KEPT, OperationRecord, Phase};
use genace_core::remote::{JobSnapshot, RenderStatus, StatusOutcome};
use genace_core::render::{PollPlan, RenderClass};
use schedule::look_order;
pub(crate) use schedule::{look_at_ms, next_look_delay, planned, queue_delay_until};

/// What one poll message led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    Missing,
    /// Not (or no longer) an accepted operation, or one waiting for a person.
    NotObservable(Phase),
    /// Still rendering; the next poll was enqueued with this delay.
    Running {
        next_poll_seconds: u32,
    },
    Rendered,
    RenderFailed,
    /// Genace does not know the saved id, or answered for another one.
    CaseOpened(CaseReason),
    /// The read said nothing (timeout, 5xx): polled again later.
    BackedOff {
        next_poll_seconds: u32,
    },
    /// The chain of looks ends: another replaced it (the record names
    /// another chain, and the look read nothing), or moved the sweep's
    /// deadline since the look read the record (what it saw is recorded).
    Superseded,
}

pub struct Poller<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    pub genace: P::Genace,
    pub config: Config,
    pub clock: P::Clock,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
}

/// Slack added to the sweep deadline beyond the next scheduled poll.
pub(crate) const SWEEP_SLACK_SECONDS: i64 = 120;
const MIN_POLL_DELAY_SECONDS: u32 = 5;
/// Delay before the first poll of an accepted job whose class has no plan.
pub(crate) const FIRST_POLL_DELAY_SECONDS: u32 = MIN_POLL_DELAY_SECONDS;
/// How much later than planned a chain's first look may come and still
/// count a render it saw done (see [`Poller::seen_to_end`]); a chain the
/// sweep restarts comes at least `SWEEP_SLACK_SECONDS` late.
const CENSORED_SLACK_SECONDS: f64 = 30.0;

/// Backoff grows with the job's age: about a tenth of it, within bounds.
pub fn next_poll_delay(accepted_at: Option<DateTime<Utc>>, now: DateTime<Utc>, max: u32) -> u32 {
    let age = accepted_at.map(|a| (now - a).num_seconds().max(0)).unwrap_or(0);
    ((age / 10) as u32).max(MIN_POLL_DELAY_SECONDS).min(max.max(1))
}

/// Whether `history`'s look is of a chain another replaced (the sweep
/// restarted the looks, a person attached the job again): it ends unread.
/// A look of no named chain (sent before chains were named) looks on.
fn of_a_replaced_chain(history: &PollHistory, rec: &OperationRecord) -> bool {
    history
        .chain
        .is_some_and(|c| rec.poll_chain.is_some_and(|current| current != c))
}

impl<P: Ports> Stage for Poller<P>
where
    P::Genace: Genace,
{
    type Message = WorkMessage;
    type Outcome = Polled;
    const NAME: &'static str = "poll";

    async fn handle(&self, message: WorkMessage) -> Result<Polled, StageError> {
        self.poll_after(&message.operation_id, message.poll.unwrap_or_default())
            .await
    }

    /// A batch's looks by their planned times, earliest first: a look
    /// waits for its time, and must not hold up one due before it. A
    /// message without a time goes first.
    fn batch_order(body: &str) -> i64 {
        look_order(body)
    }
}

impl<P: Ports> Poller<P>
where
    P::Genace: Genace,
{
    /// Looks at the job as the first poll of it would.
    pub async fn poll(&self, id: &OperationId) -> Result<Polled, StageError> {
        self.poll_after(id, PollHistory::default()).await
    }

    /// Looks at the job after the looks `history` records: plans the next
    /// look from the class's render times (read at every look), and
    /// carries what this one saw to the next.
    pub async fn poll_after(&self, id: &OperationId, history: PollHistory) -> Result<Polled, StageError> {
        // A queue delays by whole seconds: the rest of the planned delay
        // is waited out here, so that a look comes when its plan says.
        let wait = history.wait_before_look_ms(self.clock.now().timestamp_millis());
        if wait > 0 {
            self.clock.pause(std::time::Duration::from_millis(wait)).await;
        }
        let now = self.clock.now();
        let Some(rec) = self.store.get(id, now).await? else {
            return Ok(Polled::Missing);
        };
        // Looked at: a saved job of an accepted operation, or of an abandoned
        // one whose hold waits on it (spent or released when Genace says
        // the job is over), and no person asked to find it.
        let Some(job_id) = rec.remote_job_id.clone().filter(|_| machine::looked_at(&rec)) else {
            if genace_core::planted::on(genace_core::planted::POLL_AFTER_END)
                && let Some(job_id) = &rec.remote_job_id
            {
                let _ = self.genace.status(job_id).await;
            }
            return Ok(Polled::NotObservable(rec.phase));
        };
        if of_a_replaced_chain(&history, &rec) {
            return Ok(Polled::Superseded);
        }
        let history = planned(&self.store, &rec, history, self.config.poll_max_delay_seconds).await;
        let planned = next_look_delay(&rec, &history, now, self.config.poll_max_delay_seconds);
        let delay = planned.ceil() as u32;
        // An unreadable status waits at least the age-based delay: the
        // sweep's deadline covers the longer of the two (and a look that
        // waits longer still moves it; see `unreadable`).
        let longest = delay.max(next_poll_delay(
            rec.accepted_at,
            now,
            self.config.poll_max_delay_seconds,
        ));
        // Nobody waits for an abandoned job's outputs: it is never stalled.
        let stalled =
            rec.phase != Phase::Abandoned && rec.accepted_at.is_some_and(|a| now - a > self.config.stall_after);
        let look = Look {
            now,
            delay,
            planned,
            next_check: now + Duration::seconds(longest as i64 + SWEEP_SLACK_SECONDS),
            stalled,
            history,
        };
        match self.genace.status(&job_id).await {
            StatusOutcome::Snapshot(snap) if snap.id.as_deref().is_some_and(|sid| sid != job_id) => {
                let evidence = format!("status of {job_id} answered for job {:?}", snap.id);
                self.open_case(rec, CaseReason::RemoteJobMissing, &evidence, false)
                    .await
            }
            // The job was created for another operation (an attach of the wrong id).
            StatusOutcome::Snapshot(snap)
                if snap
                    .client_reference
                    .as_deref()
                    .is_some_and(|r| r != rec.operation_id.as_str()) =>
            {
                let evidence = format!(
                    "job {job_id} was created with client_reference {:?}, not this operation",
                    snap.client_reference.as_deref().unwrap_or_default()
                );
                self.open_case(rec, CaseReason::RemoteJobMissing, &evidence, false)
                    .await
            }
            StatusOutcome::Snapshot(snap) => self.observed(rec, &job_id, &snap, &look).await,
            StatusOutcome::NotFound => {
                let evidence = format!("Genace answered 404 for the saved job id {job_id}");
                self.open_case(rec, CaseReason::RemoteJobMissing, &evidence, false)
                    .await
            }
            StatusOutcome::Transient { evidence } => self.unreadable(rec, &job_id, &evidence, 0, &look).await,
            StatusOutcome::RateLimited { retry_after } => self.rate_limited(rec, &job_id, retry_after, &look).await,
        }
    }

    /// The next look, carrying what this one saw.
    /// `running`: the state a look found the job in, not yet ended (none:
    /// the look read nothing).
    async fn look_again(
        &self,
        id: &OperationId,
        look: &Look,
        running: Option<&str>,
        delay: u32,
    ) -> Result<(), StageError> {
        let mut history = look.history.clone();
        history.looks += 1;
        // The look after a read of the job waits for its planned time;
        // one after an unreadable read looks when received.
        let delay = if running.is_some() {
            let at = look_at_ms(look.now, look.planned);
            history.look_at_ms = Some(at);
            queue_delay_until(at, self.clock.now())
        } else {
            history.look_at_ms = None;
            delay
        };
        if running == Some("running") && history.first_running_ms.is_none() {
            history.first_running_ms = Some(look.now.timestamp_millis());
        }
        history.looked_at_ms.push(look.now.timestamp_millis());
        let over = history.looked_at_ms.len().saturating_sub(MAX_LOOKS_KEPT);
        history.looked_at_ms.drain(..over);
        if running.is_some() {
            history.running_seen_ms = Some(look.now.timestamp_millis());
        }
        let message = WorkMessage {
            operation_id: id.clone(),
            poll: Some(history),
            look: false,
        };
        self.queue.send_work(Queue::Poll, &message, delay).await?;
        Ok(())
    }

    /// A job seen to end: how late (`DetectionLagSeconds`, an upper bound:
    /// from the last look that saw it running; none when no look did),
    /// after how many looks (`PollsPerJob`), and, for a render that
    /// succeeded, its render time added to its class's: the midpoint of
    /// the last look that saw it running (else its acceptance) and this
    /// one. A job seen done at the first look of its chain (its only look)
    /// is counted too, when that look came as planned (within [`CENSORED_SLACK_SECONDS`] of
    /// the first planned look, or of the first look without a plan): left
    /// out, the renders shorter than the first look would never be learned,
    /// and the plan's first look could never move earlier. A chain the
    /// sweep or recovery restarted without its history sees the end too
    /// late to say when it was, and a failed or cancelled render says
    /// nothing of how long a render takes: neither is counted.
    async fn seen_to_end(&self, rec: &OperationRecord, succeeded: bool, history: &PollHistory) {
        let Some(detection) = &rec.detection else {
            return;
        };
        self.metrics
            .emit("PollsPerJob", f64::from(detection.looks), "Count", &[]);
        if let Some(lag) = detection.lag_bound_seconds() {
            self.metrics.emit("DetectionLagSeconds", lag, "Seconds", &[]);
        }
        let since = detection.last_running_at.or(rec.accepted_at);
        let (Some(accepted), Some(since), true) = (rec.accepted_at, since, succeeded) else {
            return;
        };
        let seconds_since = |t: DateTime<Utc>| (t - accepted).num_milliseconds().max(0) as f64 / 1000.0;
        let first_look = history
            .plan
            .as_ref()
            .and_then(PollPlan::first)
            .unwrap_or(f64::from(FIRST_POLL_DELAY_SECONDS));
        let as_planned =
            detection.looks == 1 && seconds_since(detection.ended_seen_at) <= first_look + CENSORED_SLACK_SECONDS;
        if detection.last_running_at.is_none() && !as_planned {
            return;
        }
        let ended = since + (detection.ended_seen_at - since) / 2;
        if let Err(e) = self
            .store
            .add_render_time(&RenderClass::of(rec), seconds_since(ended))
            .await
        {
            warn!(operation_id = %rec.operation_id, error = %e, "render time not counted");
        }
    }

    /// A snapshot of the saved job: record it (a stall case riding along),
    /// then poll again, hand over to delivery, or count a failed render.
    async fn observed(
        &self,
        rec: OperationRecord,
        job_id: &str,
        snap: &JobSnapshot,
        look: &Look,
    ) -> Result<Polled, StageError> {
        let id = rec.operation_id.clone();
        let fault = rec
            .fault
            .filter(|f| self.config.fault_injection && *f == Fault::PollAfterObserve);
        let stall = look.stalled.then(|| {
            format!(
                "no terminal state {} after acceptance",
                humanize(self.config.stall_after)
            )
        });
        let seen = Looks {
            count: look.history.looks,
            first_running_at: look.history.first_running_ms.and_then(DateTime::from_timestamp_millis),
            last_running_at: look.history.running_seen_ms.and_then(DateTime::from_timestamp_millis),
            at: look
                .history
                .looked_at_ms
                .iter()
                .filter_map(|ms| DateTime::from_timestamp_millis(*ms))
                .collect(),
        };
        let input = Input::Observed(genace_core::machine::Look {
            snapshot: snap,
            next_check: look.next_check,
            stalled: stall.as_deref(),
            seen: &seen,
        });
        let end = snap.status != RenderStatus::Running;
        let (written, superseded) = match self.record(rec, input, look, end).await? {
            Ok(w) => w,
            // Another poll already recorded a terminal state.
            Err(phase) => return Ok(Polled::NotObservable(phase)),
        };
        if written
            .case
            .as_ref()
            .is_some_and(|c| c.reason == CaseReason::RenderStalled && c.opened_at == look.now)
        {
            case_opened(&self.metrics, &written);
        }
        info!(operation_id = %written.operation_id, remote_job_id = %job_id, remote_state = %snap.state, phase = written.phase.as_str(), "observed");
        if fault.is_some() {
            return Err(StageError::Crashed("poll.after_observe"));
        }
        match snap.status {
            RenderStatus::Running if superseded => Ok(Polled::Superseded),
            RenderStatus::Running => {
                self.look_again(&id, look, Some(&snap.state), look.delay).await?;
                Ok(Polled::Running {
                    next_poll_seconds: look.delay,
                })
            }
            RenderStatus::Succeeded => {
                if written.phase == Phase::Abandoned {
                    // Spent, and nothing to deliver.
                } else if written.case.is_some() {
                    // Outputs missing: nothing to deliver, a person decides.
                    case_opened(&self.metrics, &written);
                } else {
                    self.queue.enqueue(Queue::Deliver, &id, 0).await?;
                }
                // Last, and best effort: the delivery is on its way.
                self.seen_to_end(&written, true, &look.history).await;
                Ok(Polled::Rendered)
            }
            RenderStatus::Failed => {
                self.metrics.count("RenderFailed", &[]);
                self.seen_to_end(&written, false, &look.history).await;
                Ok(Polled::RenderFailed)
            }
        }
    }

    /// A 429 on the read: Genace's own limit on reads, which the next look
    /// waits for too.
    async fn rate_limited(
        &self,
        rec: OperationRecord,
        job_id: &str,
        retry_after: Option<std::time::Duration>,
        look: &Look,
    ) -> Result<Polled, StageError> {
        self.metrics.count("StatusRateLimited", &[]);
        let asked = retry_after.map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        let evidence = format!("HTTP 429 (Retry-After {asked} s)");
        self.unreadable(rec, job_id, &evidence, asked, look).await
    }

    /// The read said nothing (a timeout, a 5xx, a 429): poll again later,
    /// at least `asked` seconds later (a 429's Retry-After), with a stall
    /// case once the job is silent past the deadline.
    async fn unreadable(
        &self,
        rec: OperationRecord,
        job_id: &str,
        evidence: &str,
        asked: u32,
        look: &Look,
    ) -> Result<Polled, StageError> {
        let id = rec.operation_id.clone();
        let rec_accepted_at = rec.accepted_at;
        warn!(operation_id = %id, remote_job_id = %job_id, %evidence, "status read failed; backing off");
        // A read that said nothing (a 429 among them) lengthens the plan:
        // the age-based schedule at least, and a 429's Retry-After in full
        // (within the longest delay a poll message may carry).
        let unasked = look.delay.max(next_poll_delay(
            rec_accepted_at,
            look.now,
            self.config.poll_max_delay_seconds,
        ));
        let delay = unasked.max(asked.min(self.config.poll_max_delay_seconds.max(1)));
        let covered_delay = if genace_core::planted::on(genace_core::planted::RETRY_AFTER_UNCOVERED) {
            unasked
        } else {
            delay
        };
        let next_check = look.now + Duration::seconds(i64::from(covered_delay) + SWEEP_SLACK_SECONDS);
        let mut rec = rec;
        if look.stalled {
            let evidence = format!(
                "no terminal state {} after acceptance; last read: {evidence}",
                humanize(self.config.stall_after)
            );
            let input = Input::CaseNeeded(genace_core::machine::NeededCase {
                reason: CaseReason::RenderStalled,
                evidence: &evidence,
                keep_due: true,
            });
            // Another poll may have recorded a terminal state meanwhile.
            match self.record(rec, input, look, false).await? {
                Ok((_, true)) => return Ok(Polled::Superseded),
                Ok((written, false)) => rec = written,
                Err(phase) => return Ok(Polled::NotObservable(phase)),
            }
        }
        // The sweep's deadline must cover the next look, or the sweep
        // would start a second chain of looks beside this one: moved on
        // (one write) when it would come first. A running look moves it
        // with its own write; a look that read nothing writes only then.
        let margin = Duration::seconds(SWEEP_SLACK_SECONDS / 2);
        let covered = rec
            .due_at_ms
            .is_some_and(|d| d >= (next_check - margin).timestamp_millis());
        if !covered && !genace_core::planted::on(genace_core::planted::DEADLINE_UNMOVED) {
            match self
                .record(rec, Input::LookDeferred { next_check }, look, false)
                .await?
            {
                Ok((_, true)) => return Ok(Polled::Superseded),
                Ok((_, false)) => {}
                Err(phase) => return Ok(Polled::NotObservable(phase)),
            }
        }
        self.look_again(&id, look, None, delay).await?;
        Ok(Polled::BackedOff {
            next_poll_seconds: delay,
        })
    }

    /// Writes `input`; `Ok(Err(phase))` when the rules refuse it because the
    /// record moved on (to `phase`), which is no failure of this poll.
    /// With the record written, whether this look's chain is superseded:
    /// the record it wrote over had another sweep deadline than the one
    /// this look read, moved by another chain of looks (a sweep's restart
    /// that sent one, or a second delivery of a look), which looks on in
    /// its place. Ending this one keeps one chain per job.
    ///
    /// A look of a chain the record no longer names (`look`'s) writes
    /// only an end it saw: what it would write of a running job (the
    /// deadline, a stall) is the chain that replaced it's to write, and
    /// would end that one too.
    async fn record(
        &self,
        rec: OperationRecord,
        input: Input<'_>,
        look: &Look,
        end: bool,
    ) -> Result<Result<(OperationRecord, bool), Phase>, StageError> {
        let (policy, now) = (self.config.policy, look.now);
        let read_due = rec.due_at_ms;
        // Judged on the record written over, which a lost race makes a
        // later one than `rec`.
        match commit_with(&self.store, rec, write_attempts(), |r| {
            if !end && of_a_replaced_chain(&look.history, r) {
                return Ok((r.clone(), (false, true)));
            }
            machine::transition(r, input, now, &policy).map(|w| {
                let frees = crate::pipeline::wake::frees_a_slot(r, &w);
                (w, (frees, r.due_at_ms != read_due))
            })
        })
        .await
        {
            Ok((w, (frees, superseded))) => {
                // A job Genace is done with frees its slot: wake the next waiting operation.
                if frees {
                    crate::pipeline::wake::wake_if_room_for(&self.store, &self.queue, &w.tenant_id).await;
                }
                Ok(Ok((w, superseded)))
            }
            Err(CommitError::Refused { current, .. }) => Ok(Err(current.phase)),
            Err(CommitError::Store(e)) => Err(e.into()),
        }
    }

    async fn open_case(
        &self,
        rec: OperationRecord,
        reason: CaseReason,
        evidence: &str,
        keep_due: bool,
    ) -> Result<Polled, StageError> {
        let now = self.clock.now();
        let written = match commit(&self.store, rec, write_attempts(), |r| {
            let input = Input::CaseNeeded(genace_core::machine::NeededCase {
                reason,
                evidence,
                keep_due,
            });
            machine::transition(r, input, now, &self.config.policy)
        })
        .await
        {
            Ok(written) => written,
            // A racing poll already moved the job on (rendered, failed):
            // the case no longer applies, and nothing is written.
            Err(CommitError::Refused { current, .. }) => return Ok(Polled::NotObservable(current.phase)),
            Err(CommitError::Store(e)) => return Err(e.into()),
        };
        case_opened(&self.metrics, &written);
        Ok(Polled::CaseOpened(reason))
    }
}

/// When and how a poll looks: the time, the delay of the next poll, the
/// sweep's next deadline, and whether the job is silent past the stall limit.
struct Look {
    now: chrono::DateTime<chrono::Utc>,
    /// The next look's delay in whole seconds, rounded up.
    delay: u32,
    /// The next look's delay as planned, to the tenth of a second.
    planned: f64,
    next_check: chrono::DateTime<chrono::Utc>,
    stalled: bool,
    /// The looks before this one, and the job's plan.
    history: PollHistory,
}

fn humanize(d: Duration) -> String {
    if d.num_hours() >= 1 {
        format!("{} h", d.num_hours())
    } else {
        format!("{} s", d.num_seconds())
    }
}
