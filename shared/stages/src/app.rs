//! Every port in one place, and each stage made from it. The composition
//! root (`genace_app::AwsApp::from_env`) fills an [`App`] with the deployed
//! adapters once; tests and the simulator fill one with in-memory adapters
//! and a manual clock.

use crate::api::intake::Intake;
use crate::config::Config;
use crate::pipeline::deliver::Deliverer;
use crate::pipeline::dispatch::Dispatcher;
use crate::pipeline::poll::Poller;
use crate::pipeline::recovery::Recovery;
use crate::pipeline::sweep::Sweeper;
use crate::ports::clock::{Clock, SystemClock};
use crate::ports::metrics::Metrics;

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
}

/// The place of a port that a function never uses (no Genace client in
/// intake, deliver, recovery or the sweep; no download client outside
/// deliver): nothing is built, and no key is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unused;

impl<S: Clone, Q: Clone, O: Clone, G: Clone, D: Clone, C: Clock + Clone> App<S, Q, O, G, D, C> {
    pub fn intake(&self) -> Intake<S, Q, O, C> {
        Intake {
            store: self.store.clone(),
            queue: self.queue.clone(),
            objects: self.objects.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
            vault: self.vault.clone(),
        }
    }

    pub fn dispatcher(&self) -> Dispatcher<S, Q, G, C> {
        Dispatcher {
            store: self.store.clone(),
            queue: self.queue.clone(),
            genace: self.genace.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn poller(&self) -> Poller<S, Q, G, C> {
        Poller {
            store: self.store.clone(),
            queue: self.queue.clone(),
            genace: self.genace.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn deliverer(&self) -> Deliverer<S, Q, O, D, C> {
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

    pub fn recovery(&self) -> Recovery<S, Q, C> {
        Recovery {
            store: self.store.clone(),
            queue: self.queue.clone(),
            policy: self.config.policy,
            clock: self.clock.clone(),
        }
    }

    pub fn sweeper(&self) -> Sweeper<S, Q, C> {
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
        }
    }
}
