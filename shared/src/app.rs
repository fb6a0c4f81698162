//! The composition root: every adapter is built once, here, and each stage
//! is made from them. The six Lambda mains, the local runner and the tests
//! all start from an [`App`]; tests and the simulator swap in the in-memory
//! adapters and a simulated clock.

use aws_config::SdkConfig;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::deliver::{Deliverer, download_client};
use crate::dispatch::Dispatcher;
use crate::genace::{GenaceClient, GenaceConfig};
use crate::intake::Intake;
use crate::poll::Poller;
use crate::queue::SqsQueue;
use crate::recovery::Recovery;
use crate::storage::S3Store;
use crate::store::DynamoStore;
use crate::sweep::Sweeper;

/// Every port a stage may use, and the configuration.
#[derive(Debug, Clone)]
pub struct App<S, Q, O, G, C = SystemClock> {
    pub store: S,
    pub queue: Q,
    pub objects: O,
    pub genace: G,
    pub clock: C,
    pub config: Config,
}

/// The place of the Genace client in an app whose functions never call
/// Genace (intake, deliver, recovery, the sweep): none is built, and no key
/// is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGenace;

/// The deployed adapters: DynamoDB, SQS, S3, the Genace HTTP client and the
/// system clock.
pub type AwsApp<G = GenaceClient> = App<DynamoStore, SqsQueue, S3Store, G, SystemClock>;

impl<S: Clone, Q: Clone, O: Clone, G: Clone, C: Clock + Clone> App<S, Q, O, G, C> {
    pub fn intake(&self) -> Intake<S, Q, O, C> {
        Intake {
            store: self.store.clone(),
            queue: self.queue.clone(),
            objects: self.objects.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
        }
    }

    pub fn dispatcher(&self) -> Dispatcher<S, Q, G, C> {
        Dispatcher {
            store: self.store.clone(),
            queue: self.queue.clone(),
            genace: self.genace.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
        }
    }

    pub fn poller(&self) -> Poller<S, Q, G, C> {
        Poller {
            store: self.store.clone(),
            queue: self.queue.clone(),
            genace: self.genace.clone(),
            config: self.config.clone(),
            clock: self.clock.clone(),
        }
    }

    /// The deliverer, with its download client behind the output URL guard.
    pub fn deliverer(&self) -> Result<Deliverer<S, Q, O, C>, String> {
        Ok(Deliverer {
            store: self.store.clone(),
            queue: self.queue.clone(),
            objects: self.objects.clone(),
            http: download_client(&self.config.url_policy).map_err(|e| format!("building the download client: {e}"))?,
            config: self.config.clone(),
            clock: self.clock.clone(),
        })
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
        Sweeper::new(
            self.store.clone(),
            self.queue.clone(),
            self.config.clone(),
            self.clock.clone(),
        )
    }

    /// The same adapters with another object store.
    pub fn with_objects<P>(self, objects: P) -> App<S, Q, P, G, C> {
        App {
            store: self.store,
            queue: self.queue,
            objects,
            genace: self.genace,
            clock: self.clock,
            config: self.config,
        }
    }

    /// The same adapters with another Genace.
    pub fn with_genace<H>(self, genace: H) -> App<S, Q, O, H, C> {
        App {
            store: self.store,
            queue: self.queue,
            objects: self.objects,
            genace,
            clock: self.clock,
            config: self.config,
        }
    }
}

impl AwsApp<NoGenace> {
    /// The AWS adapters for `config`, on clients made from `sdk`.
    pub fn from_sdk(sdk: &SdkConfig, config: Config) -> Self {
        App {
            store: DynamoStore::new(crate::aws::dynamodb(sdk), &config.table),
            queue: SqsQueue::new(crate::aws::sqs(sdk), config.queues.clone()),
            objects: S3Store::new(crate::aws::s3(sdk), &config.bucket),
            genace: NoGenace,
            clock: SystemClock,
            config,
        }
    }

    /// What a function without Genace needs: the configuration from the
    /// environment and the AWS clients.
    pub async fn from_env() -> Result<Self, String> {
        let config = Config::from_env().map_err(|e| e.to_string())?;
        Ok(Self::from_sdk(&crate::aws::load().await, config))
    }
}

impl AwsApp {
    /// The same, plus the Genace client; its key is read once, from
    /// Secrets Manager when `GENACE_API_KEY_SECRET_ARN` is set.
    pub async fn from_env_with_genace() -> Result<Self, String> {
        let config = Config::from_env().map_err(|e| e.to_string())?;
        let sdk = crate::aws::load().await;
        let genace = GenaceClient::new(GenaceConfig::load(&sdk).await?).map_err(|e| e.to_string())?;
        Ok(AwsApp::from_sdk(&sdk, config).with_genace(genace))
    }
}
