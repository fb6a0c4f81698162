//! The API's context: every port and setting a request to the HTTP API
//! may need, tenant and operator routes alike. Each route's logic is an
//! `impl Api` in the file of its feature (intake, listing, cancel, erase,
//! credits, capacity, cases and resolutions, webhook endpoints and
//! settings).

use crate::config::Config;
use crate::ports::clock::SystemClock;
use crate::ports::metrics::Metrics;
use crate::ports::{Parts, Ports};

/// What the HTTP API's routes share: the table, the queues, the output
/// bucket (for read links), the settings, the clock, the metrics, the
/// webhook secrets and the operators' trace reader.
pub struct Api<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    /// Signs read links to delivered objects.
    pub objects: P::Objects,
    pub config: Config,
    pub clock: P::Clock,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
    /// Where webhook endpoints' secrets are written.
    pub vault: std::sync::Arc<dyn crate::ports::webhooks::SecretVault>,
    /// Where operators read an operation's trace.
    pub traces: std::sync::Arc<dyn crate::ports::traces::TraceReader>,
}

impl<S, Q, O> Api<Parts<S, Q, O>>
where
    Parts<S, Q, O>: Ports<Store = S, Queue = Q, Objects = O, Clock = SystemClock>,
{
    /// The API on the system clock, with metrics, secrets and traces off.
    pub fn new(store: S, queue: Q, objects: O, config: Config) -> Self {
        Self {
            store,
            queue,
            objects,
            config,
            clock: SystemClock,
            metrics: Metrics::off(),
            vault: std::sync::Arc::new(crate::ports::webhooks::NoVault),
            traces: std::sync::Arc::new(crate::ports::traces::NoTraces),
        }
    }
}
