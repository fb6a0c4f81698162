//! DynamoDB's global secondary indexes as the in-memory store models them
//! when asked: eventually consistent. A write reaches an index only after a
//! delay (drawn per write from a seeded generator, at most the lag asked,
//! and never before the item's previous write, as DynamoDB keeps one
//! item's changes in order), so a query made moments after a write may
//! miss it. Modelled for the two indexes wake-ups read: each tenant's
//! waiting order (`waiting`) and the waiting set (`waiting_ledgers`).
//! Without a lag, every index sees every write at once, as before.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};

use super::clock::ManualClock;
use genace_stages::ports::clock::Clock;

/// One record's writes as the waiting order sees them: when each arrives,
/// and the key it carries (none: not in the order).
type Arrivals = Vec<(DateTime<Utc>, Option<String>)>;

#[derive(Debug)]
pub(super) struct IndexLag {
    clock: ManualClock,
    most_ms: i64,
    state: u64,
    /// Per record key: when each write's waiting-order key (none: not in
    /// the order) reaches the index, in write order.
    order: BTreeMap<String, Arrivals>,
    /// Per tenant: when its latest join of the waiting set reaches the index.
    joined: BTreeMap<String, DateTime<Utc>>,
}

impl IndexLag {
    pub(super) fn new(clock: ManualClock, most: Duration, seed: u64) -> Self {
        Self {
            clock,
            most_ms: most.num_milliseconds().max(0),
            state: seed,
            order: BTreeMap::new(),
            joined: BTreeMap::new(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// A delay up to the lag (a 64-bit linear congruential step).
    fn draw(&mut self) -> Duration {
        self.state = self
            .state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let span = u64::try_from(self.most_ms).unwrap_or(0) + 1;
        Duration::milliseconds(i64::try_from((self.state >> 33) % span).unwrap_or(0))
    }

    /// A record was written with waiting-order key `key`.
    pub(super) fn record_written(&mut self, pk: &str, key: Option<String>) {
        let now = self.now();
        let at = now + self.draw();
        let writes = self.order.entry(pk.to_owned()).or_default();
        let at = writes.last().map_or(at, |(last, _)| at.max(*last));
        writes.push((at, key));
        // What arrived before the latest arrival is never read again.
        if let Some(arrived) = writes.iter().rposition(|(at, _)| *at <= now) {
            writes.drain(..arrived);
        }
    }

    /// The record's key as the index shows it now: `current` when no write
    /// of it was seen (it predates the lag), none while its first write has
    /// not arrived.
    pub(super) fn order_key(&self, pk: &str, current: Option<String>) -> Option<String> {
        let Some(writes) = self.order.get(pk) else {
            return current;
        };
        let now = self.now();
        writes
            .iter()
            .rev()
            .find(|(at, _)| *at <= now)
            .and_then(|(_, key)| key.clone())
    }

    /// A tenant joined the waiting set.
    pub(super) fn tenant_joined(&mut self, tenant: &str) {
        let at = self.now() + self.draw();
        self.joined.insert(tenant.to_owned(), at);
    }

    /// Whether the tenant's entry in the waiting set shows in the index.
    pub(super) fn in_set(&self, tenant: &str) -> bool {
        self.joined.get(tenant).is_none_or(|at| *at <= self.now())
    }
}
