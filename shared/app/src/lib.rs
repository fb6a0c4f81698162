//! The composition root of Genace operations: the deployed adapters, each
//! built once from the environment, in an [`App`](genace_stages::app::App).
//! The eight Lambda mains and the local runner start here:
//!
//! ```no_run
//! # async fn main_of_dispatch() -> Result<(), String> {
//! let dispatcher = genace_app::from_env_with_genace().await?.dispatcher();
//! # Ok(()) }
//! ```
//!
//! Depends on every library crate of the workspace except the edge; nothing
//! depends on it but the functions, the local stack and tests.
//!
//! This is the one place that reads the process environment
//! ([`env_var`]): the libraries take their settings as values.

use aws_config::SdkConfig;
use genace_aws::{DynamoStore, S3Store, SecretsManager, SqsQueue, SqsReceiptDeferral, SqsWebhookQueue};
use genace_outbound::{GenaceClient, GenaceConfig, HttpDownloads, HttpWebhooks};
use genace_stages::app::{App, Unused};
use genace_stages::config::Config;
use genace_stages::pipeline::webhooks::seal::{EventSeal, MIN_KEY_BYTES};
use genace_stages::pipeline::webhooks::send::WebhookStage;
use genace_stages::ports::clock::SystemClock;
use genace_stages::ports::metrics::{EmfLines, Metrics};
use genace_stages::ports::traces::XRayLink;
use serde_json::Value;

/// The deployed adapters: DynamoDB, SQS, S3, the Genace HTTP client, the
/// guarded download client and the system clock. A function builds only the
/// clients it uses: `G` and `D` are [`Unused`] elsewhere, so neither a
/// Genace key nor a TLS client is loaded where no call needs them.
pub type AwsApp<G = GenaceClient, D = HttpDownloads> = App<DynamoStore, SqsQueue, S3Store, G, D, SystemClock>;

pub mod telemetry;
pub mod traces;

/// One setting from the process environment; empty counts as unset.
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The stages' configuration from the environment.
pub fn config_from_env() -> Result<Config, String> {
    Config::from_vars(&env_var).map_err(|e| e.to_string())
}

/// Metrics as deployed: Embedded Metric Format lines on stdout in
/// `METRICS_NAMESPACE` (default `GenaceOperations`), stamped by the system
/// clock; none when `METRICS_DISABLED` is `true` or `1` (local runs).
pub fn metrics_from_env() -> Metrics {
    if env_var("METRICS_DISABLED").is_some_and(|v| v == "true" || v == "1") {
        return Metrics::off();
    }
    Metrics::to(EmfLines {
        namespace: env_var("METRICS_NAMESPACE").unwrap_or_else(|| "GenaceOperations".into()),
        clock: SystemClock,
    })
}

/// `app`, counting into `metrics`: its stages and its store.
pub fn with_metrics<G, D>(mut app: AwsApp<G, D>, metrics: Metrics) -> AwsApp<G, D> {
    app.store = app.store.with_metrics(metrics.clone());
    app.metrics = metrics;
    app
}

/// The AWS adapters for `config`, on clients made from `sdk`, with metrics
/// off ([`with_metrics`] turns them on).
pub fn from_sdk(sdk: &SdkConfig, config: Config) -> AwsApp<Unused, Unused> {
    App {
        store: DynamoStore::new(genace_aws::clients::dynamodb(sdk), &config.table)
            .with_account_limit(config.max_in_flight)
            .with_account_shards(config.policy.account_shards),
        queue: SqsQueue::new(genace_aws::clients::sqs(sdk), config.queues.clone()),
        objects: S3Store::new(genace_aws::clients::s3(sdk), &config.bucket),
        genace: Unused,
        downloads: Unused,
        clock: SystemClock,
        vault: std::sync::Arc::new(SecretsManager::new(
            genace_aws::clients::secrets(sdk),
            config.webhook_secret_overlap,
        )),
        traces: std::sync::Arc::new(XRayLink {
            region: sdk.region().map_or_else(|| "us-east-1".to_owned(), ToString::to_string),
        }),
        config,
        metrics: Metrics::off(),
    }
}

/// What a function without Genace needs: the configuration from the
/// environment, the AWS clients and the deployed metrics.
pub async fn from_env() -> Result<AwsApp<Unused, Unused>, String> {
    let mut app = from_sdk(&genace_aws::clients::load().await, config_from_env()?);
    // A local receiver's file (the artifacts under the emulator) is read
    // back; deployed, the route links to X-Ray.
    if let Some(file) = traces::TraceFile::from_env() {
        app.traces = std::sync::Arc::new(file);
    }
    Ok(with_metrics(app, metrics_from_env()))
}

/// [`from_env`] with the guarded download client: what deliver needs.
pub async fn from_env_with_downloads() -> Result<AwsApp<Unused>, String> {
    let app = from_env().await?;
    let downloads = downloads(&app.config)?;
    Ok(app.with_downloads(downloads))
}

/// The webhook stage on the deployed adapters: webhook settings from the
/// table, secrets from Secrets Manager, POSTs through the webhook URL
/// policy, undeliverable events to the dead-letter queue.
pub type AwsWebhooks = WebhookStage<DynamoStore, SecretsManager, HttpWebhooks, SqsWebhookQueue>;

/// [`AwsWebhooks`] for `config`, on clients made from `sdk`, counting into `metrics`.
pub fn webhooks(sdk: &SdkConfig, config: &Config, metrics: Metrics) -> Result<AwsWebhooks, String> {
    if config.queues.webhook_dead_letters.is_empty() {
        return Err("WEBHOOK_DLQ_URL is not set".into());
    }
    if config.queues.webhooks.is_empty() {
        return Err("WEBHOOK_QUEUE_URL is not set".into());
    }
    Ok(WebhookStage {
        store: DynamoStore::new(genace_aws::clients::dynamodb(sdk), &config.table),
        secrets: SecretsManager::new(genace_aws::clients::secrets(sdk), config.webhook_secret_overlap),
        sender: HttpWebhooks::new(&config.webhook_url_policy())
            .map_err(|e| format!("building the webhook client: {e}"))?,
        queue: SqsWebhookQueue::new(
            genace_aws::clients::sqs(sdk),
            &config.queues.webhooks,
            &config.queues.webhook_dead_letters,
        ),
        clock: SystemClock,
        retry: config.webhook_retry,
        log_for: config.webhook_log_days,
        disable_after: config.webhook_disable_after,
        metrics,
        seal: None,
    })
}

/// Defers failed webhook events on the webhook queue, by
/// [`genace_stages::config::RetrySchedule`].
pub fn webhook_deferral(sdk: &SdkConfig, config: &Config) -> Result<SqsReceiptDeferral, String> {
    if config.queues.webhooks.is_empty() {
        return Err("WEBHOOK_QUEUE_URL is not set".into());
    }
    Ok(SqsReceiptDeferral::new(
        genace_aws::clients::sqs(sdk),
        &config.queues.webhooks,
    ))
}

/// [`webhooks`] and [`webhook_deferral`] from the environment: what the
/// webhook function runs.
pub async fn webhooks_from_env() -> Result<(AwsWebhooks, SqsReceiptDeferral), String> {
    let config = config_from_env()?;
    let sdk = genace_aws::clients::load().await;
    let mut stage = webhooks(&sdk, &config, metrics_from_env())?;
    stage.seal = event_seal(&sdk).await?;
    Ok((stage, webhook_deferral(&sdk, &config)?))
}

/// The download client behind the output URL guard of `config`.
pub fn downloads(config: &Config) -> Result<HttpDownloads, String> {
    HttpDownloads::new(&config.url_policy).map_err(|e| format!("building the download client: {e}"))
}

/// The same, plus the Genace client; its key is read once, from Secrets
/// Manager when `GENACE_API_KEY_SECRET_ARN` is set.
pub async fn from_env_with_genace() -> Result<AwsApp<GenaceClient, Unused>, String> {
    let sdk = genace_aws::clients::load().await;
    let genace = GenaceClient::new(genace_config(&sdk).await?).map_err(|e| e.to_string())?;
    let app = from_sdk(&sdk, config_from_env()?).with_genace(genace);
    Ok(with_metrics(app, metrics_from_env()))
}

/// [`GenaceConfig::from_vars`] on the environment, with the API key read from Secrets Manager
/// when `GENACE_API_KEY_SECRET_ARN` is set (the deployed way: the key is
/// never a plain-text parameter). The secret is the key itself, or JSON
/// with an `api_key` member.
pub async fn genace_config(sdk: &SdkConfig) -> Result<GenaceConfig, String> {
    let mut conf = GenaceConfig::from_vars(&env_var)?;
    if let Some(arn) = env_var("GENACE_API_KEY_SECRET_ARN") {
        conf.api_key = api_key_from_secret(&secret_string(sdk, &arn, "the Genace API key").await?);
    }
    Ok(conf)
}

/// The events pipe's seal, from the secret `EVENTS_SEAL_SECRET_ARN` names
/// (the template generates it; only the events and webhook functions may
/// read it). None when the variable is unset: events are not sealed, and
/// the webhook stage checks them against the table alone.
pub async fn event_seal(sdk: &SdkConfig) -> Result<Option<EventSeal>, String> {
    let Some(arn) = env_var("EVENTS_SEAL_SECRET_ARN") else {
        return Ok(None);
    };
    let key = secret_string(sdk, &arn, "the events seal").await?;
    EventSeal::new(key.trim().as_bytes())
        .map(Some)
        .ok_or_else(|| format!("the events seal is shorter than {MIN_KEY_BYTES} bytes"))
}

/// The string value of the secret `arn`, `what` it is named in errors.
pub(crate) async fn secret_string(sdk: &SdkConfig, arn: &str, what: &str) -> Result<String, String> {
    aws_sdk_secretsmanager::Client::new(sdk)
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            format!(
                "reading {what} secret: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(e)
            )
        })?
        .secret_string
        .ok_or_else(|| format!("{what} secret has no string value"))
}

/// The lifecycle events of one batch of the table's stream records.
pub use genace_aws::stream::lifecycle_events;

/// The events function's step: a batch of the table's stream records in,
/// their lifecycle events out, each marked when a receiver of its tenant
/// takes it (the bus's webhook rule queues only those).
pub struct Enrichment<S = DynamoStore> {
    pub store: S,
    pub ctx: genace_core::events::Context,
    pub metrics: Metrics,
    /// Seals each event for the webhook stage ([`EventSeal`]).
    pub seal: Option<EventSeal>,
}

impl Enrichment {
    /// On the table of `config`, with clients made from `sdk`.
    pub fn new(sdk: &SdkConfig, config: &Config, metrics: Metrics) -> Self {
        Enrichment {
            store: DynamoStore::new(genace_aws::clients::dynamodb(sdk), &config.table),
            ctx: genace_core::events::Context {
                bucket: config.events_name_bucket.then(|| config.bucket.clone()),
            },
            metrics,
            seal: None,
        }
    }

    /// What the events function runs.
    pub async fn from_env() -> Result<Self, String> {
        let sdk = genace_aws::clients::load().await;
        let mut enrichment = Self::new(&sdk, &config_from_env()?, metrics_from_env());
        enrichment.seal = event_seal(&sdk).await?;
        Ok(enrichment)
    }
}

impl<S: genace_stages::ports::table::WebhookEndpoints> Enrichment<S> {
    pub async fn enrich(
        &self,
        batch: &[Value],
    ) -> Result<Vec<genace_core::events::LifecycleEvent>, genace_aws::stream::StreamError> {
        let mut events = lifecycle_events(batch, &self.ctx)?;
        genace_stages::pipeline::webhooks::filter::mark_for_webhooks(&self.store, &self.metrics, &mut events).await;
        if let Some(seal) = &self.seal {
            seal.seal_all(&mut events);
        }
        Ok(events)
    }

    /// [`Self::enrich`] with no look at receivers: every event marked for
    /// the webhook rule (a local stack's unfiltered rule).
    pub fn enrich_unfiltered(
        &self,
        batch: &[Value],
    ) -> Result<Vec<genace_core::events::LifecycleEvent>, genace_aws::stream::StreamError> {
        let mut events = lifecycle_events(batch, &self.ctx)?;
        for e in &mut events {
            e.webhooks = true;
        }
        if let Some(seal) = &self.seal {
            seal.seal_all(&mut events);
        }
        Ok(events)
    }
}

fn api_key_from_secret(secret: &str) -> String {
    serde_json::from_str::<Value>(secret)
        .ok()
        .and_then(|v| v.get("api_key").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| secret.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_may_be_the_key_or_json() {
        assert_eq!(api_key_from_secret("sk-live-123\n"), "sk-live-123");
        assert_eq!(api_key_from_secret(r#"{"api_key":"sk-json"}"#), "sk-json");
    }
}
