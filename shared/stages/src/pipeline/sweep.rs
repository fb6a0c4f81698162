//! The sweep: the table is the truth and queues are hints, so every minute
//! the sweep reads the sparse due-time index and re-enqueues work whose
//! message was lost or whose handler stopped after a commit.
//!
//! One run, most important first, each part bounded:
//! 1. The capacity look, from one read of the account item: a lost
//!    wake-up repaired, the learned limit raised or probed (the only way
//!    out when uncertain operations fill a learned limit), the gauges.
//!    First, so that no backlog of due items can starve it.
//! 2. The due items, one item of each shard in turn (oldest due first in
//!    each, a page read at a time), from where the last run its budget cut
//!    short stopped (else a shard that moves on each minute), until none
//!    are left, the page bound, or the time budget:
//!    what is left stays due, and the next run takes it up (a handled
//!    item's due time moves on, so the next run starts past it). So no
//!    shard's backlog, however slow its items, keeps the sweep from the
//!    others. A page that cannot be read skips the rest of that shard in
//!    this run, not the run.
//!
//! Each part's figures go out as metrics (`SweepExamined`, `SweepRequeued`,
//! `SweepInterrupted`, `SweepPageFailures`, `SweepTruncated`).

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use chrono::Duration;
use tracing::{Instrument as _, info, warn};

use crate::config::Config;
use crate::pipeline::stage::{StageError, case_opened};
use crate::ports::clock::Clock;
use crate::ports::metrics::Metrics;
use crate::ports::queue::WorkQueue;
use crate::ports::table::{DueCursor, DueItem, StoreError};
use genace_core::machine::{self, Input};
use genace_core::messages::Queue;
use genace_core::record::{DUE_SHARDS, DeliveryState, OperationRecord, Phase};

/// The name of the sweep's spans: one per repair, in the operation's trace.
const NAME: &str = "sweep";

/// Counts of what one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SweepReport {
    pub examined: usize,
    pub dispatch: usize,
    pub poll: usize,
    pub deliver: usize,
    /// Expired dispatch claims turned into uncertain operations with a case.
    pub interrupted: usize,
    /// More due work was left for the next run (page bound or time budget).
    pub truncated: bool,
    /// Pages of the due index that could not be read (their shard was
    /// left for the next run).
    pub page_failures: usize,
}

pub struct Sweeper<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    pub config: Config,
    pub clock: P::Clock,
    /// Items read per page, and pages per shard per run.
    pub page_size: i32,
    pub max_pages: usize,
    /// How long a run works through due items at most (the function's
    /// timeout is 55 s); the rest is the next run's.
    pub budget: std::time::Duration,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
}

/// Where one shard of the due index stands in a run: the items of its
/// last page not yet handled, and the cursor of its next page (none before
/// the first page; `Some(None)` once there is no next).
struct ShardPages {
    shard: u32,
    items: std::collections::VecDeque<DueItem>,
    next: Option<Option<DueCursor>>,
    pages: usize,
}

impl ShardPages {
    fn new(shard: u32) -> Self {
        Self {
            shard,
            items: std::collections::VecDeque::new(),
            next: None,
            pages: 0,
        }
    }

    /// Whether due items were left unread or unhandled.
    fn more_left(&self) -> bool {
        !self.items.is_empty() || matches!(self.next, Some(Some(_)))
    }
}

/// The shard a run starting at `now` takes first when no run cut short
/// left one, moved on each minute (the sweep's schedule) by just over half
/// the shards; the step is odd, so prime to the power-of-two shard count,
/// and every shard starts a run in turn.
fn first_shard(now: chrono::DateTime<chrono::Utc>) -> u32 {
    let step = i64::from(DUE_SHARDS / 2 + 1);
    let minute = now.timestamp().div_euclid(60);
    u32::try_from((minute * step).rem_euclid(i64::from(DUE_SHARDS))).unwrap_or(0)
}

/// How far the sweep pushes an item's due time after re-enqueueing it, so a
/// slow consumer does not receive a copy every minute.
const RECHECK_SECONDS: i64 = 300;

impl<P: Ports> Sweeper<P> {
    pub fn new(store: P::Store, queue: P::Queue, config: Config, clock: P::Clock) -> Self {
        Self {
            store,
            queue,
            config,
            clock,
            page_size: 100,
            max_pages: 10,
            budget: std::time::Duration::from_secs(40),
            metrics: Metrics::off(),
        }
    }
}

impl<P: Ports> Sweeper<P> {
    pub async fn run(&self) -> Result<SweepReport, StageError> {
        let now = self.clock.now();
        // The capacity look first, whatever the backlog behind it.
        crate::pipeline::wake::sweep(&self.store, &self.queue, &self.metrics, now).await;
        let report = self.due_items(now).await;
        if report.page_failures >= DUE_SHARDS as usize && report.examined == 0 {
            // No page read at all: the run fails, so the function's error
            // alarm sees a due index that cannot be read.
            return Err(StageError::Store(StoreError::Service(
                "no page of the due index could be read".into(),
            )));
        }
        self.metrics.emit("SweepExamined", report.examined as f64, "Count", &[]);
        let requeued = report.dispatch + report.poll + report.deliver;
        self.metrics.emit("SweepRequeued", requeued as f64, "Count", &[]);
        self.metrics
            .emit("SweepInterrupted", report.interrupted as f64, "Count", &[]);
        self.metrics
            .emit("SweepPageFailures", report.page_failures as f64, "Count", &[]);
        self.metrics
            .emit("SweepTruncated", f64::from(u8::from(report.truncated)), "Count", &[]);
        info!(?report, "sweep finished");
        Ok(report)
    }

    /// The due items, one of each shard in turn, within the page bound and
    /// the time budget. Items are taken across the shards in rotation, not
    /// a page of one shard after another: a page of slow items in one
    /// shard cannot spend the budget before the others are reached. A run
    /// the budget cuts short records the shard whose turn it was, and the
    /// next run starts there, so two runs reach every shard whenever
    /// together they have time for one item of each.
    async fn due_items(&self, now: chrono::DateTime<chrono::Utc>) -> SweepReport {
        let mut report = SweepReport::default();
        let budget = Duration::from_std(self.budget).unwrap_or(Duration::MAX);
        let first = self.first_shard(now).await;
        let mut shards: Vec<ShardPages> = (0..DUE_SHARDS)
            .map(|k| ShardPages::new((first + k) % DUE_SHARDS))
            .collect();
        loop {
            let mut handled = false;
            for shard in &mut shards {
                if self.clock.now() - now >= budget {
                    // What is left stays due, for the next run, which
                    // starts at the shard whose turn this was.
                    report.truncated = true;
                    self.start_next_at(shard.shard).await;
                    return report;
                }
                let Some(item) = self.next_item(shard, now, &mut report).await else {
                    continue;
                };
                handled = true;
                report.examined += 1;
                if let Err(e) = self.handle(&item, &mut report).await {
                    warn!(operation_id = %item.operation_id, error = %e, "sweep could not handle an item");
                }
            }
            if !handled {
                break;
            }
        }
        report.truncated |= shards.iter().any(ShardPages::more_left);
        report
    }

    /// The shard this run takes first: where the last run its budget cut
    /// short stopped, else the one for this minute. A start that cannot
    /// be read is the minute's.
    async fn first_shard(&self, now: chrono::DateTime<chrono::Utc>) -> u32 {
        match self.store.sweep_start().await {
            Ok(Some(k)) if k < DUE_SHARDS => k,
            Ok(_) => first_shard(now),
            Err(e) => {
                warn!(error = %e, "the sweep's start could not be read; it starts at the minute's shard");
                first_shard(now)
            }
        }
    }

    /// Records `shard` as where the next run starts. A failure is logged:
    /// the next run then starts at the minute's shard.
    async fn start_next_at(&self, shard: u32) {
        if genace_core::planted::on(genace_core::planted::SWEEP_START_UNSAVED) {
            return;
        }
        if let Err(e) = self.store.set_sweep_start(shard).await {
            warn!(error = %e, shard, "where the next sweep starts was not saved");
        }
    }

    /// The next due item of `shard`, reading its next page when the last
    /// one is used up (within `max_pages`); none once the shard is done.
    async fn next_item(
        &self,
        shard: &mut ShardPages,
        now: chrono::DateTime<chrono::Utc>,
        report: &mut SweepReport,
    ) -> Option<DueItem> {
        if let Some(item) = shard.items.pop_front() {
            return Some(item);
        }
        let cursor = match &shard.next {
            Some(None) => return None,
            Some(Some(next)) => Some(next.clone()),
            None => None,
        };
        if shard.pages >= self.max_pages {
            return None;
        }
        if genace_core::planted::on(genace_core::planted::PAGE_BOUND_ACROSS_SHARDS)
            && report.examined >= self.max_pages * self.page_size.max(1) as usize
        {
            return None;
        }
        shard.pages += 1;
        match self
            .store
            .due_page(shard.shard, now.timestamp_millis(), self.page_size, cursor)
            .await
        {
            Ok(page) => {
                shard.items = page.items.into();
                shard.next = Some(page.next);
                shard.items.pop_front()
            }
            Err(e) => {
                warn!(shard = shard.shard, error = %e, "a due page could not be read; the shard is left for the next run");
                report.page_failures += 1;
                shard.next = Some(None);
                None
            }
        }
    }

    async fn handle(&self, item: &DueItem, report: &mut SweepReport) -> Result<(), StageError> {
        let now = self.clock.now();
        let stage = match (item.phase, item.delivery_state) {
            (Phase::Prepared, _) => Queue::Dispatch,
            // An abandoned operation is due only while its job may run.
            (Phase::Accepted | Phase::Abandoned, _) => Queue::Poll,
            (Phase::Rendered, DeliveryState::NotCollected | DeliveryState::Collecting) => Queue::Deliver,
            (Phase::Submitting, _) => {
                // The interrupted-dispatch rule: uncertain plus a case, never a POST.
                let Some(rec) = self.store.get(&item.operation_id, now).await? else {
                    return Ok(());
                };
                // A live lease (or a phase that moved on) is left alone.
                let expired = Input::LeaseExpired {
                    evidence: "the dispatch claim expired before an outcome was recorded; found by the sweep",
                };
                if let Ok(next) = machine::transition(&rec, expired, now, &self.config.policy) {
                    // A repair is a span of the operation's trace; its case keeps the trace.
                    let span = genace_trace::stage_span(NAME, Some(&item.operation_id), None);
                    self.store.apply(&rec, &next).instrument(span.clone()).await?;
                    genace_trace::record_phases(
                        &span,
                        next.tenant_id.as_str(),
                        rec.phase.as_str(),
                        next.phase.as_str(),
                        next.case.is_some(),
                    );
                    genace_trace::record_outcome(&span, "interrupted dispatch: case opened");
                    case_opened(&self.metrics, &next);
                    report.interrupted += 1;
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        // Push the due time first, so a concurrent sweep does not send a second copy.
        let Some(rec) = self.store.get(&item.operation_id, now).await? else {
            return Ok(());
        };
        if rec.due_at_ms != Some(item.due_at_ms) {
            return Ok(());
        }
        // A waiting operation is woken on the wake queue, like any wake-up.
        let stage = match stage {
            Queue::Dispatch if rec.wait().is_some() => Queue::Wake,
            other => other,
        };
        let span = genace_trace::stage_span(NAME, Some(&item.operation_id), None);
        let requeued = self.requeue(&rec, stage, now).instrument(span.clone()).await;
        let said = match &requeued {
            Ok(true) => format!(
                "sent to {} again",
                match stage {
                    Queue::Dispatch => "dispatch",
                    Queue::Poll => "poll",
                    Queue::Deliver => "delivery",
                    Queue::Recovery => "recovery",
                    Queue::Wake => "the wake-up queue",
                }
            ),
            Ok(false) => "changed meanwhile".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        genace_trace::record_outcome(&span, &said);
        if requeued? {
            match stage {
                Queue::Dispatch | Queue::Wake => report.dispatch += 1,
                Queue::Poll => report.poll += 1,
                _ => report.deliver += 1,
            }
        }
        Ok(())
    }

    /// Moves `rec`'s due time on, then sends it to `stage` (in the
    /// sweep's span, which the message carries): false when the record
    /// changed meanwhile and nothing was sent.
    async fn requeue(
        &self,
        rec: &OperationRecord,
        stage: Queue,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, StageError> {
        let reschedule = Input::Reschedule {
            due: now + Duration::seconds(RECHECK_SECONDS),
        };
        let next = machine::transition(rec, reschedule, now, &self.config.policy)
            .map_err(|r| StageError::Refused(r.to_string()))?;
        match self.store.apply(rec, &next).await {
            Ok(_) => {}
            Err(StoreError::Conflict(_)) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        // A restarted chain of looks is named by the write above: a look
        // of the chain it replaces ends before it reads Genace.
        let message = match stage {
            Queue::Poll => genace_core::messages::WorkMessage::first_look(&next),
            _ => genace_core::messages::WorkMessage::for_operation(rec.operation_id.clone()),
        };
        self.queue.send_work(stage, &message, 0).await?;
        Ok(true)
    }
}
