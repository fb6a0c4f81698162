//! Every port in one place, and each stage made from it. The composition
//! root (`genace_app::AwsApp::from_env`) fills an [`App`] with the deployed
//! adapters once; tests and the simulator fill one with in-memory adapters
//! and a manual clock. Each stage it makes is typed with the
//! [`Parts`](crate::ports::Parts) of the adapters that stage uses.

use crate::api::context::Api;
use crate::config::Config;
use crate::pipeline::deliver::Deliverer;
use crate::pipeline::dispatch::Dispatcher;
use crate::pipeline::poll::Poller;
use crate::pipeline::recovery::Recovery;
use crate::pipeline::sweep::Sweeper;
use crate::ports::Parts;
pub use crate::ports::Unused;
use crate::ports::clock::{Clock, SystemClock};
use crate::ports::metrics::Metrics;
use crate::ports::outputs::ObjectStore;
use crate::ports::queue::WorkQueue;
use crate::ports::table::OperationStore;

/// Every port a stage may use, and the configuration.
#[derive(Debug, Clone)]
pub struct App<S, Q, O, G, D, C = SystemClock> {
    pub store: S,
    pub queue: Q,
    pub objects: O,
    pub genace: G,
    /// Where deliver fetches outputs.
    pub downloads: D,
    pub clock: C,
    pub config: Config,
    /// Where stages count what happened (off unless the root installs a sink).
    pub metrics: Metrics,
    /// Where webhook endpoints' secrets are written (intake only).
    pub vault: std::sync::Arc<dyn crate::ports::webhooks::SecretVault>,
    /// Where operators read an operation's trace (intake only).
    pub traces: std::sync::Arc<dyn crate::ports::traces::TraceReader>,
}

impl<S, Q, O, G, D, C> App<S, Q, O, G, D, C>
where
    S: OperationStore + Clone + 'static,
    Q: WorkQueue + Clone + 'static,
    O: ObjectStore + Clone + 'static,
    G: Clone + Send + Sync + 'static,
    D: Clone + Send + Sync + 'static,
    C: Clock + Clone + 'static,
{
    pub fn api(&self) -> Api<Parts<S, Q, O, Unused, Unused, C>> {
        Api {
            store: self.store.clone(),
            queue: self.queue.clone(),
            objects: self.objects.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
            vault: self.vault.clone(),
            traces: self.traces.clone(),
        }
    }

    pub fn dispatcher(&self) -> Dispatcher<Parts<S, Q, O, G, Unused, C>> {
        Dispatcher {
            store: self.store.clone(),
            queue: self.queue.clone(),
            genace: self.genace.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn poller(&self) -> Poller<Parts<S, Q, O, G, Unused, C>> {
        Poller {
            store: self.store.clone(),
            queue: self.queue.clone(),
            genace: self.genace.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn deliverer(&self) -> Deliverer<Parts<S, Q, O, Unused, D, C>> {
        Deliverer {
            store: self.store.clone(),
            queue: self.queue.clone(),
            objects: self.objects.clone(),
            downloads: self.downloads.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn recovery(&self) -> Recovery<Parts<S, Q, O, Unused, Unused, C>> {
        Recovery {
            store: self.store.clone(),
            queue: self.queue.clone(),
            policy: self.config.policy,
            clock: self.clock.clone(),
        }
    }

    pub fn sweeper(&self) -> Sweeper<Parts<S, Q, O, Unused, Unused, C>> {
        Sweeper {
            metrics: self.metrics.clone(),
            ..Sweeper::new(
                self.store.clone(),
                self.queue.clone(),
                self.config.clone(),
                self.clock.clone(),
            )
        }
    }

    /// The same adapters with another object store.
    pub fn with_objects<P>(self, objects: P) -> App<S, Q, P, G, D, C> {
        App {
            store: self.store,
            queue: self.queue,
            objects,
            genace: self.genace,
            downloads: self.downloads,
            clock: self.clock,
            config: self.config,
            metrics: self.metrics,
            vault: self.vault,
            traces: self.traces,
        }
    }

    /// The same adapters with another Genace.
    pub fn with_genace<H>(self, genace: H) -> App<S, Q, O, H, D, C> {
        App {
            store: self.store,
            queue: self.queue,
            objects: self.objects,
            genace,
            downloads: self.downloads,
            clock: self.clock,
            config: self.config,
            metrics: self.metrics,
            vault: self.vault,
            traces: self.traces,
        }
    }

    /// The same adapters with other downloads.
    pub fn with_downloads<E>(self, downloads: E) -> App<S, Q, O, G, E, C> {
        App {
            store: self.store,
            queue: self.queue,
            objects: self.objects,
            genace: self.genace,
            downloads,
            clock: self.clock,
            config: self.config,
            metrics: self.metrics,
            vault: self.vault,
            traces: self.traces,
        }
    }
}
