//! Progress as the API shows it: what core's `progress` needs, read once
//! per view or per page, whatever the tenants or the waiting operations:
//! each class's render times (one read per class on the page, its poll
//! plan drawn once), and only when an operation waits, one tenant's
//! waiting order (keys only) and, for a wait for a slot, one page of the
//! waiting tenants' ledgers, the account and that tenant's own ledger. A
//! page that spans tenants shows no place in a tenant's order: that would
//! be one read per tenant. A read that fails leaves its part out (logged);
//! a view is never refused for it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tracing::warn;

use crate::api::context::Api;
use crate::pipeline::wake::{POSITION_COUNTED, WAKE_CANDIDATES};
use crate::ports::Ports;
use crate::ports::clock::Clock;
use crate::ports::table::prelude::*;
use genace_core::capacity::AccountCapacity;
use genace_core::domain::{OperationId, TenantId};
use genace_core::ledger::TenantLedger;
use genace_core::machine::is_finished;
use genace_core::progress::{
    ExpectedEnd, LookHints, Queue, QueueProgress, Rival, expected_end, next_look, queue_progress,
};
use genace_core::record::{OperationRecord, Phase, WaitReason};
use genace_core::render::{MIN_SAMPLES, PollPlan, RenderClass, RenderTimes};

/// An operation's progress as a view shows it; empty once it is finished.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    pub next_look_at: Option<DateTime<Utc>>,
    pub queue: Option<QueueProgress>,
    pub expected_end: Option<ExpectedEnd>,
}

/// A class's render times and the poll plan drawn from them.
struct Class {
    times: RenderTimes,
    plan: Option<PollPlan>,
}

/// What the page's progress is drawn from, each read at most once.
#[derive(Default)]
struct Reads {
    classes: HashMap<RenderClass, Class>,
    /// The waiting tenants' ledgers, and whether they are all of them.
    ledgers: Option<(Vec<TenantLedger>, bool)>,
    account: Option<AccountCapacity>,
    /// The one tenant whose order (and ledger) was read.
    tenant: Option<TenantId>,
    order: Option<Vec<OperationId>>,
    own: Option<TenantLedger>,
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
        let max_delay = f64::from(self.config.poll_max_delay_seconds.max(1));
        let open: Vec<&OperationRecord> = recs.iter().filter(|r| !is_finished(r)).collect();
        for rec in open.iter().filter(|r| r.accepted_at.is_some() || waits_for_a_slot(r)) {
            let class = RenderClass::of(rec);
            if reads.classes.contains_key(&class) {
                continue;
            }
            match self.store.render_times(&class).await {
                Ok(times) => {
                    let plan = PollPlan::from_times(&times, max_delay);
                    reads.classes.insert(class, Class { times, plan });
                }
                Err(e) => warn!(operation_id = %rec.operation_id, error = %e, "render times unreadable for a view"),
            }
        }
        let waiting: Vec<&&OperationRecord> = open.iter().filter(|r| r.wait().is_some()).collect();
        let Some(first) = waiting.first() else {
            return reads;
        };
        let tenant = first.tenant_id.clone();
        if waiting.iter().all(|r| r.tenant_id == tenant) {
            match self.store.waiting(&tenant, POSITION_COUNTED).await {
                Ok(order) => reads.order = Some(order),
                Err(e) => warn!(tenant = %tenant, error = %e, "a waiting order unreadable for a view"),
            }
            reads.tenant = Some(tenant.clone());
        }
        if !waiting.iter().any(|r| waits_for_a_slot(r)) {
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
        if reads.tenant.is_some() {
            match self.store.ledger(&tenant).await {
                Ok(own) => reads.own = Some(own),
                Err(e) => warn!(tenant = %tenant, error = %e, "a ledger unreadable for a view"),
            }
        }
        reads
    }

    fn progress_from(&self, rec: &OperationRecord, reads: &Reads, now: DateTime<Utc>) -> Progress {
        if is_finished(rec) {
            return Progress::default();
        }
        let class = reads.classes.get(&RenderClass::of(rec));
        let expected_end = match (rec.phase, rec.accepted_at, class) {
            (Phase::Accepted, Some(accepted), Some(class)) => Some(expected_end(accepted, &class.times, now)),
            _ => None,
        };
        let queue = rec.wait().map(|_| {
            let typical = class
                .filter(|c| c.times.samples() >= MIN_SAMPLES)
                .and_then(|c| c.times.quantile(0.5));
            queue_progress(rec, &queue_of(rec, reads), typical, now)
        });
        let queue = queue.flatten();
        let hints = LookHints {
            plan: class.and_then(|c| c.plan.as_ref()),
            max_delay: f64::from(self.config.poll_max_delay_seconds.max(1)),
            start: queue.as_ref().and_then(|q| q.expected_start.as_ref()),
        };
        Progress {
            next_look_at: next_look(rec, hints, now),
            queue,
            expected_end,
        }
    }
}

/// The queue `rec` waits in, as the reads show it: its place from its
/// tenant's order whatever else was read; the account's part only when
/// the ledgers and the account were read.
fn queue_of(rec: &OperationRecord, reads: &Reads) -> Queue {
    let ours = reads.tenant.as_ref() == Some(&rec.tenant_id);
    let place = reads
        .order
        .as_ref()
        .filter(|_| ours)
        .and_then(|order| order.iter().position(|id| *id == rec.operation_id))
        .and_then(|at| u32::try_from(at + 1).ok());
    let empty = Queue {
        place,
        own_in_flight: 0,
        rivals: Vec::new(),
        rivals_complete: false,
        free_slots: 0,
        limit: None,
        tenant_may_start: false,
    };
    let (Some((ledgers, complete)), Some(account)) = (reads.ledgers.as_ref(), reads.account.as_ref()) else {
        return empty;
    };
    // Its own ledger: read for the one tenant of the page, else as the
    // waiting set shows it; a tenant in neither is parked (at its own
    // limit or out of credits), and starts when its own jobs end.
    let own = reads
        .own
        .as_ref()
        .filter(|_| ours)
        .or_else(|| ledgers.iter().find(|l| l.tenant_id == rec.tenant_id.as_str()));
    let rivals = ledgers
        .iter()
        .filter(|l| l.tenant_id != rec.tenant_id.as_str() && l.totals.waiting > 0)
        .map(|l| Rival {
            waiting: l.totals.waiting,
            in_flight: l.totals.in_flight,
        })
        .collect();
    Queue {
        own_in_flight: own.map_or(0, |l| l.totals.in_flight),
        rivals,
        rivals_complete: *complete,
        free_slots: account.free_slots().map_or(0, |f| i64::try_from(f).unwrap_or(i64::MAX)),
        limit: account.limit(),
        tenant_may_start: own.is_some_and(|l| {
            l.has_a_slot()
                && l.headroom()
                    .is_none_or(|room| room > genace_core::ledger::Millicredits::ZERO)
        }),
        ..empty
    }
}
