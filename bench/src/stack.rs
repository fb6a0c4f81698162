//! The stack a workload runs on: fresh local resources, the in-process
//! runner with the meter on, and the Genace stand-in.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use genace_aws::DynamoStore;
use genace_aws::clients as aws;
use genace_aws::provision;
use genace_client::{Client, Request, RetryPolicy};
use genace_core::domain::Intent;
use genace_core::domain::OperationId;
use genace_core::domain::TenantId;
use genace_core::record::DeliveryState;
use genace_outbound::GenaceConfig;
use genace_stages::config::Config;
use genace_stages::config::ResourceNames;
use genace_stages::ports::table::prelude::*;
use serde_json::json;

use genace_local::{devauth, meter, runner, standin};

/// The tenant the single-tenant workloads run as.
pub(crate) const TENANT: &str = "bench-tenant";

/// A stack on fresh local resources, with the meter on for its clients.
pub(crate) struct Stack {
    pub(crate) sdk: aws_config::SdkConfig,
    pub(crate) names: ResourceNames,
    pub(crate) config: Config,
    /// Reads for the benchmark itself, built before the meter: not counted.
    pub(crate) observer: DynamoStore,
    pub(crate) observer_sqs: aws_sdk_sqs::Client,
    pub(crate) meter: Arc<meter::Meter>,
}

impl Stack {
    pub(crate) async fn fresh(endpoint: &str) -> Result<Self, String> {
        let sdk = aws::load_at(endpoint).await;
        let prefix = format!("b{}-", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let names = ResourceNames::with_prefix(&prefix);
        let queues = provision::ensure_all(&sdk, &names).await.map_err(|e| e.to_string())?;
        let mut config = Config::for_resources(&names, queues);
        config.url_policy.allow_http = true;
        config.url_policy.allow_private = true;
        // Plain SDK clients: the meter, once on, counts every client built
        // through `genace_aws::clients`, and a second run in one process
        // would count the benchmark's own reads.
        let observer = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &names.table);
        let observer_sqs = aws_sdk_sqs::Client::new(&sdk);
        let meter = meter::enable();
        Ok(Stack {
            sdk,
            names,
            config,
            observer,
            observer_sqs,
            meter,
        })
    }

    pub(crate) async fn start_runner(
        &self,
        genace_base: &str,
        concurrency: usize,
    ) -> Result<(runner::Running, SocketAddr), String> {
        self.start_runner_with(genace_base, concurrency, |_| {}).await
    }

    /// [`Self::start_runner`] with its settings changed by `adjust`.
    pub(crate) async fn start_runner_with(
        &self,
        genace_base: &str,
        concurrency: usize,
        adjust: impl FnOnce(&mut runner::RunnerSettings),
    ) -> Result<(runner::Running, SocketAddr), String> {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?;
        let mut settings = runner::RunnerSettings {
            intake_addr: addr,
            batch_size: 1,
            visibility_seconds: 30,
            concurrency,
            sweep_every: Duration::from_secs(60),
            phase_log: false,
            events_file: None,
            webhook_rule_unfiltered: false,
            console: genace_console::SignIn::Local,
            traces_file: None,
        };
        adjust(&mut settings);
        let gconf = GenaceConfig::new(genace_base, "bench-key");
        let running = runner::start(&self.sdk, self.config.clone(), gconf, settings).await?;
        Ok((running, addr))
    }

    /// Waits until every id is delivered (or finished otherwise); returns how many were delivered.
    pub(crate) async fn wait_delivered(&self, ids: &[OperationId], limit: Duration) -> Result<usize, String> {
        let started = Instant::now();
        let mut pending: Vec<OperationId> = ids.to_vec();
        let mut delivered = 0;
        while !pending.is_empty() {
            if started.elapsed() > limit {
                return Err(format!("{} operations not delivered after {limit:?}", pending.len()));
            }
            let mut still = Vec::new();
            for id in pending {
                match self
                    .observer
                    .get(&id, chrono::Utc::now())
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Some(r) if r.delivery_state == DeliveryState::Delivered => delivered += 1,
                    Some(r) if r.expires_at_seconds.is_some() || r.case.is_some() => {
                        eprintln!(
                            "bench: {id} ended {} / {:?} (case {:?})",
                            r.phase.as_str(),
                            r.delivery_state,
                            r.case.map(|c| c.reason)
                        );
                    }
                    _ => still.push(id),
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Ok(delivered)
    }

    /// Whether the webhook queue holds no message, visible or in flight.
    pub(crate) async fn webhook_queue_empty(&self) -> Result<bool, String> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let attrs = self
            .observer_sqs
            .get_queue_attributes()
            .queue_url(&self.config.queues.webhooks)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?
            .attributes
            .unwrap_or_default();
        Ok(
            [A::ApproximateNumberOfMessages, A::ApproximateNumberOfMessagesNotVisible]
                .iter()
                .all(|a| attrs.get(a).is_none_or(|v| v == "0")),
        )
    }

    /// Messages left on the dead-letter queues.
    pub(crate) async fn dead_letters(&self) -> Result<u64, String> {
        let mut total = 0;
        for q in self.names.queues() {
            let url = self
                .observer_sqs
                .get_queue_url()
                .queue_name(format!("{q}-dlq"))
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?
                .queue_url
                .ok_or_else(|| format!("no URL for {q}-dlq"))?;
            let attrs = self
                .observer_sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                .send()
                .await
                .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
            total += attrs
                .attributes
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
                        .cloned()
                })
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        Ok(total)
    }

    /// Average stored item size in bytes (DynamoDB's rule: names plus values), for capacity estimates.
    pub(crate) async fn average_item_bytes(&self) -> Result<f64, String> {
        let mut start = None;
        let (mut total, mut count) = (0usize, 0usize);
        let client = aws::dynamodb(&self.sdk);
        loop {
            let page = client
                .scan()
                .table_name(&self.names.table)
                // Small pages: each answers well within the client's timeout
                // on a local endpoint holding thousands of items.
                .limit(100)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())?;
            for item in page.items.unwrap_or_default() {
                total += item.iter().map(|(k, v)| k.len() + attribute_bytes(v)).sum::<usize>();
                count += 1;
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        Ok(if count == 0 { 0.0 } else { total as f64 / count as f64 })
    }
}

pub(crate) fn attribute_bytes(v: &aws_sdk_dynamodb::types::AttributeValue) -> usize {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    match v {
        A::S(s) => s.len(),
        A::N(n) => n.len().div_ceil(2) + 1,
        A::Bool(_) | A::Null(_) => 1,
        A::M(m) => 3 + m.iter().map(|(k, v)| k.len() + attribute_bytes(v) + 1).sum::<usize>(),
        A::L(l) => 3 + l.iter().map(|v| attribute_bytes(v) + 1).sum::<usize>(),
        A::B(b) => b.as_ref().len(),
        _ => 8,
    }
}

pub(crate) fn intent_body(key: &str, prompt: &str) -> String {
    json!({"operation_key": key, "media_type": "video",
        "specification": {"model": "genace-video-2", "prompt": prompt, "duration": 5}})
    .to_string()
}

pub(crate) fn operation_id(key: &str) -> OperationId {
    let intent = Intent::parse(&serde_json::from_str(&intent_body(key, "x")).expect("json"), None).expect("intent");
    OperationId::derive(&TenantId::parse(TENANT).expect("tenant"), &intent.operation_key)
}

/// A client of the API at `api` as [`TENANT`], each request sent once:
/// every answer is measured as it came.
pub(crate) fn tenant_client(api: &str) -> Result<Client, String> {
    let token = devauth::issue("tenant_id", TENANT, 3600)?;
    Ok(Client::new(api, &token).with_retry(RetryPolicy::none()))
}

/// POSTs an intent over HTTP, its key in the body alone; returns the
/// answer's status and latency.
pub(crate) async fn post_http(api: &Client, key: &str) -> Result<(u16, Duration), String> {
    let started = Instant::now();
    let req = Request::new(reqwest::Method::POST, "/v1/operations").raw(
        "application/json",
        intent_body(key, &format!("a lighthouse, take {key}")),
    );
    let reply = api.send(&req).await.map_err(|e| e.to_string())?;
    Ok((reply.status, started.elapsed()))
}

/// Starts the simulator with quick jobs: `running` at the first poll (5 s),
/// `completed` at the second.
pub(crate) async fn start_standin(output_bytes: u64) -> Result<(Arc<standin::StandIn>, String), String> {
    start_standin_with(output_bytes, Duration::from_secs(2), Duration::from_secs(4), None).await
}

/// The simulator with jobs queued for `queued` then running for `running`,
/// rendering at most `max_in_flight` at once (429 past it).
pub(crate) async fn start_standin_with(
    output_bytes: u64,
    queued: Duration,
    running: Duration,
    max_in_flight: Option<usize>,
) -> Result<(Arc<standin::StandIn>, String), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let base = format!("http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let settings = standin::Settings {
        queued,
        running,
        output_bytes: usize::try_from(output_bytes).map_err(|_| "--output-bytes is too large")?,
        pct_502: 0,
        pct_lost: 0,
        pct_failed: 0,
        lost_delay: Duration::from_secs(1),
        base: base.clone(),
        verbose: false,
        max_in_flight,
    };
    let (sim, _task) = standin::serve(listener, settings);
    Ok((sim, base))
}
