//! The sweep: the table is the truth and queues are hints, so every minute
//! the sweep reads the sparse due-time index and re-enqueues work whose
//! message was lost or whose handler stopped after a commit.

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use chrono::Duration;
use tracing::{info, warn};

use crate::config::Config;
use crate::pipeline::stage::{StageError, case_opened};
use crate::ports::clock::Clock;
use crate::ports::metrics::Metrics;
use crate::ports::queue::WorkQueue;
use crate::ports::table::{DueItem, StoreError};
use genace_core::machine::{self, Event};
use genace_core::messages::Queue;
use genace_core::record::{DUE_SHARDS, DeliveryState, Phase};

/// Counts of what one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SweepReport {
    pub examined: usize,
    pub dispatch: usize,
    pub poll: usize,
    pub deliver: usize,
    /// Expired dispatch claims turned into uncertain operations with a case.
    pub interrupted: usize,
    /// More due work was left for the next run (page bound reached).
    pub truncated: bool,
}

pub struct Sweeper<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    pub config: Config,
    pub clock: P::Clock,
    /// Items read per page, and pages per shard per run.
    pub page_size: i32,
    pub max_pages: usize,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
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
            metrics: Metrics::off(),
        }
    }
}

impl<P: Ports> Sweeper<P> {
    pub async fn run(&self) -> Result<SweepReport, StageError> {
        let now = self.clock.now();
        let mut report = SweepReport::default();
        for shard in 0..DUE_SHARDS {
            let mut cursor = None;
            for page_no in 0..self.max_pages {
                let page = self
                    .store
                    .due_page(shard, now.timestamp_millis(), self.page_size, cursor)
                    .await?;
                for item in &page.items {
                    report.examined += 1;
                    if let Err(e) = self.handle(item, &mut report).await {
                        warn!(operation_id = %item.operation_id, error = %e, "sweep could not handle an item");
                    }
                }
                cursor = page.next;
                if cursor.is_none() {
                    break;
                }
                if page_no + 1 == self.max_pages {
                    report.truncated = true;
                }
            }
        }
        // The learned limit is raised or probed, a lost wake-up is
        // repaired, and the gauges are emitted: one read of the account.
        crate::pipeline::wake::sweep(&self.store, &self.queue, &self.metrics, now).await;
        info!(?report, "sweep finished");
        Ok(report)
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
                let expired = Event::LeaseExpired {
                    evidence: "the dispatch claim expired before an outcome was recorded; found by the sweep",
                };
                if let Ok(next) = machine::transition(&rec, expired, now, &self.config.policy) {
                    self.store.apply(&rec, &next).await?;
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
        let reschedule = Event::Reschedule {
            due: now + Duration::seconds(RECHECK_SECONDS),
        };
        let next = machine::transition(&rec, reschedule, now, &self.config.policy)
            .map_err(|r| StageError::Refused(r.to_string()))?;
        match self.store.apply(&rec, &next).await {
            Ok(_) => {}
            Err(StoreError::Conflict(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        self.queue.enqueue(stage, &item.operation_id, 0).await?;
        match stage {
            Queue::Dispatch | Queue::Wake => report.dispatch += 1,
            Queue::Poll => report.poll += 1,
            _ => report.deliver += 1,
        }
        Ok(())
    }
}
