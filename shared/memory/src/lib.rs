//! The in-memory adapters of every port of `genace-stages`, on the adapter
//! floor beside `genace-aws` and `genace-outbound`: for stage-logic tests,
//! the contract suite, the simulator and the benchmarks, never a deployed
//! function. [`MemoryStore`] keeps DynamoDB's semantics as the stages rely
//! on them: a create conditional on absence (an expired record counts as
//! absent), an update conditional on the version read, the current record
//! returned with a lost condition (`ALL_OLD`), no write when nothing changed,
//! the sparse due, case and job indexes, and the tenant ledgers moved in the
//! same atomic write as the record, with the spend limit checked on claims. `shared/aws/tests/store_contract.rs`
//! runs one suite of assertions against this store and the DynamoDB store on
//! the local endpoint, so the two cannot drift.
//!
//! One file per adapter: [`store`] (with DynamoDB's concurrency in
//! [`contention`]), [`clock`], [`queue`], [`objects`],
//! [`genace`], [`downloads`] and [`webhooks`]; the crate re-exports them
//! all and builds the whole in-memory [`App`](genace_stages::app::App).

use chrono::{DateTime, Utc};

mod account;
mod clock;
mod contention;
mod downloads;
mod genace;
mod index_lag;
mod ledgers;
mod objects;
mod queue;
mod render_times;
mod store;
mod webhooks;
mod writes;

pub use clock::*;
pub use contention::{ACCOUNT_ITEM, ITEM_WRITE_UNITS_PER_SECOND, TRANSACTION_UNITS_PER_ITEM, WriteReport};
pub use downloads::*;
pub use genace::*;
pub use objects::*;
pub use queue::*;
pub use store::*;
pub use webhooks::*;

/// Every adapter in memory, on a manual clock.
pub type MemoryApp =
    genace_stages::app::App<MemoryStore, MemoryQueue, MemoryObjects, MemoryGenace, MemoryDownloads, ManualClock>;

/// An app on in-memory adapters whose clock starts at `start`, with the
/// default configuration (fault injection off).
pub fn memory_app(start: DateTime<Utc>) -> MemoryApp {
    let names = genace_stages::config::ResourceNames::with_prefix("memory-");
    let queues = genace_stages::config::QueueUrls::under("http://memory.invalid", &names);
    let clock = ManualClock::new(start);
    genace_stages::app::App {
        store: MemoryStore::default(),
        queue: MemoryQueue::new(clock.clone()),
        objects: MemoryObjects::default(),
        genace: MemoryGenace::default(),
        downloads: MemoryDownloads::default(),
        clock,
        config: genace_stages::config::Config::for_resources(&names, queues),
        metrics: genace_stages::ports::metrics::Metrics::off(),
        vault: std::sync::Arc::new(MemorySecrets::default()),
        traces: std::sync::Arc::new(genace_stages::ports::traces::NoTraces),
    }
}
