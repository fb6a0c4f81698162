//! Progress as the API shows it: what core's `progress` needs, read once
//! per view or per page, whatever the tenants or the waiting operations:
//! each class's render times (one read per class on the page), and, only
//! when an operation waits for a slot, the waiting tenants' ledgers (one
//! page of the waiting set), the account, and one tenant's waiting order
//! (keys only). A page that spans tenants shows no place in a tenant's
//! order: that would be one read per tenant. A read that fails leaves its
//! part out (logged); a view is never refused for it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tracing::warn;

use crate::api::context::Api;
use crate::pipeline::wake::{POSITION_COUNTED, WAKE_CANDIDATES};
use crate::ports::Ports;
use crate::ports::clock::Clock;
use crate::ports::table::prelude::*;
use genace_core::capacity::AccountCapacity;
use genace_core::domain::TenantId;
use genace_core::ledger::TenantLedger;
use genace_core::machine::is_finished;
use genace_core::progress::{
    ExpectedEnd, LookHints, Queue, QueueProgress, Rival, expected_end, next_look, queue_progress,
};
use genace_core::record::{OperationRecord, Phase, WaitReason};
use genace_core::render::{MIN_SAMPLES, RenderClass, RenderTimes};

/// An operation's progress as a view shows it; empty once it is finished.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    pub next_look_at: Option<DateTime<Utc>>,
    pub queue: Option<QueueProgress>,
    pub expected_end: Option<ExpectedEnd>,
}

/// What the page's progress is drawn from, each read at most once.
#[derive(Default)]
struct Reads {
    times: HashMap<RenderClass, RenderTimes>,
    ledgers: Option<(Vec<TenantLedger>, bool)>,
    account: Option<AccountCapacity>,
    /// The one tenant whose waiting order was read, and the order.
    order: Option<(TenantId, Vec<genace_core::domain::OperationId>)>,
}

fn waits_for_a_slot(rec: &OperationRecord) -> bool {
    matches!(rec.wait(), Some((WaitReason::Capacity, _)))
}

impl<P: Ports> Api<P> {
    /// One operation's progress.
    pub async fn progress(&self, rec: &OperationRecord) -> Progress {
        self.progress_of(std::slice::from_ref(rec))
            .await
            .pop()
            .unwrap_or_default()
    }

    /// The progress of each operation of a page, in its order.
    pub async fn progress_of(&self, recs: &[OperationRecord]) -> Vec<Progress> {
        let now = self.clock.now();
        let reads = self.reads_for(recs).await;
        recs.iter().map(|rec| self.progress_from(rec, &reads, now)).collect()
    }

    async fn reads_for(&self, recs: &[OperationRecord]) -> Reads {
        let mut reads = Reads::default();
        let open: Vec<&OperationRecord> = recs.iter().filter(|r| !is_finished(r)).collect();
        for rec in open
            .iter()
            .filter(|r| r.phase == Phase::Accepted || waits_for_a_slot(r))
        {
            let class = RenderClass::of(rec);
            if reads.times.contains_key(&class) {
                continue;
            }
            match self.store.render_times(&class).await {
                Ok(times) => {
                    reads.times.insert(class, times);
                }
                Err(e) => warn!(operation_id = %rec.operation_id, error = %e, "render times unreadable for a view"),
            }
        }
        let waiting: Vec<&&OperationRecord> = open.iter().filter(|r| r.wait().is_some()).collect();
        if waiting.is_empty() {
            return reads;
        }
        match self.store.waiting_ledgers(WAKE_CANDIDATES).await {
            Ok(ledgers) => {
                let complete = ledgers.len() < WAKE_CANDIDATES;
                reads.ledgers = Some((ledgers, complete));
            }
            Err(e) => warn!(error = %e, "waiting tenants unreadable for a view"),
        }
        match self.store.account().await {
            Ok(account) => reads.account = Some(account),
            Err(e) => warn!(error = %e, "the account unreadable for a view"),
        }
        let tenant = &waiting[0].tenant_id;
        if waiting.iter().all(|r| r.tenant_id == *tenant) {
            match self.store.waiting(tenant, POSITION_COUNTED).await {
                Ok(order) => reads.order = Some((tenant.clone(), order)),
                Err(e) => warn!(tenant = %tenant, error = %e, "a waiting order unreadable for a view"),
            }
        }
        reads
    }

    fn progress_from(&self, rec: &OperationRecord, reads: &Reads, now: DateTime<Utc>) -> Progress {
        if is_finished(rec) {
            return Progress::default();
        }
        let times = reads.times.get(&RenderClass::of(rec));
        let expected_end = match (rec.phase, rec.accepted_at, times) {
            (Phase::Accepted, Some(accepted), Some(times)) => Some(expected_end(accepted, times, now)),
            _ => None,
        };
        let queue = rec
            .wait()
            .is_some()
            .then(|| queue_of(rec, reads))
            .flatten()
            .and_then(|q| {
                let typical = times
                    .filter(|t| t.samples() >= MIN_SAMPLES)
                    .and_then(|t| t.quantile(0.5));
                queue_progress(rec, &q, typical, now)
            });
        let hints = LookHints {
            times,
            max_delay: f64::from(self.config.poll_max_delay_seconds),
            start: queue.as_ref().and_then(|q| q.expected_start.as_ref()),
        };
        Progress {
            next_look_at: next_look(rec, hints, now),
            queue,
            expected_end,
        }
    }
}

/// The queue `rec` waits in, as the reads show it.
fn queue_of(rec: &OperationRecord, reads: &Reads) -> Option<Queue> {
    let (ledgers, complete) = reads.ledgers.as_ref()?;
    let account = reads.account.as_ref()?;
    let place = reads
        .order
        .as_ref()
        .filter(|(tenant, _)| *tenant == rec.tenant_id)
        .and_then(|(_, order)| order.iter().position(|id| *id == rec.operation_id))
        .and_then(|at| u32::try_from(at + 1).ok());
    let own = ledgers.iter().find(|l| l.tenant_id == rec.tenant_id.as_str());
    let rivals = ledgers
        .iter()
        .filter(|l| l.tenant_id != rec.tenant_id.as_str() && l.totals.waiting > 0)
        .map(|l| Rival {
            waiting: l.totals.waiting,
            in_flight: l.totals.in_flight,
        })
        .collect();
    Some(Queue {
        place,
        own_in_flight: own.map_or(0, |l| l.totals.in_flight),
        rivals,
        rivals_complete: *complete,
        free_slots: account.free_slots().map_or(0, |f| i64::try_from(f).unwrap_or(i64::MAX)),
        limit: account.limit(),
    })
}
