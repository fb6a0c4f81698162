//! The local runner: the same handler functions the Lambdas run, hosted in
//! one process. Intake over HTTP, SQS long-poll consumers with Lambda's
//! event-source semantics, a sweep timer, and a phase-change printer.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use genace_aws::clients as aws;
use genace_edge::sqs::process_batch_with;
use genace_outbound::GenaceClient;
use genace_outbound::GenaceConfig;
use genace_stages::config::Config;
use genace_stages::pipeline::stage::Stage;
use genace_stages::ports::queue::{ReceiptDeferral, VisibilityTimeout};
use tokio::task::JoinSet;

/// Lambda event-source settings of the local consumers.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub intake_addr: SocketAddr,
    /// Messages per invocation (`LOCAL_BATCH_SIZE`, default 5).
    pub batch_size: i32,
    /// Visibility timeout of a received message (`LOCAL_VISIBILITY_SECONDS`, default 10).
    pub visibility_seconds: i32,
    /// Pollers per queue, as Lambda runs several invocations at once
    /// (`LOCAL_CONCURRENCY`, default 3): one slow delivery never holds up
    /// the others on its queue.
    pub concurrency: usize,
    /// Sweep period (`SWEEP_INTERVAL_SECONDS`, default 60).
    pub sweep_every: Duration,
    /// Print one line per phase change (`LOCAL_PHASE_LOG`, default on).
    pub phase_log: bool,
    /// Where the events pipe appends lifecycle events (`GENACE_EVENTS_FILE`,
    /// default `.local/events.jsonl`); `None` runs no pipe.
    pub events_file: Option<std::path::PathBuf>,
    /// Every event to the webhook queue, as the webhook rule took them
    /// before events were marked for tenants' receivers: for measuring
    /// what the mark saves (`genace-bench events`). Off everywhere else.
    pub webhook_rule_unfiltered: bool,
    /// How operators sign in to the console: the local sign-in, unless
    /// `CONSOLE_CLIENT_ID`, `CONSOLE_AUTHORIZE_URL` and `CONSOLE_TOKEN_URL`
    /// name an OIDC issuer, as a deployment's do.
    pub console: genace_console::SignIn,
    /// Where the trace receiver writes spans (`GENACE_TRACES_FILE`, default
    /// `.local/traces.jsonl`): the operator's trace route reads them there.
    /// `None`: the route says no traces are kept.
    pub traces_file: Option<std::path::PathBuf>,
}

impl RunnerSettings {
    /// For a test's stack: a free loopback port, quick timers (2 s
    /// visibility, a sweep every 3 s), two pollers a queue, no phase log
    /// and no events pipe.
    pub fn for_tests() -> Self {
        let intake_addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port");
        Self {
            intake_addr,
            batch_size: 5,
            visibility_seconds: 2,
            concurrency: 2,
            sweep_every: Duration::from_secs(3),
            phase_log: false,
            events_file: None,
            webhook_rule_unfiltered: false,
            console: genace_console::SignIn::Local,
            traces_file: None,
        }
    }

    pub fn from_env() -> Result<Self, String> {
        let num = |name: &str, default: u64| -> Result<u64, String> {
            match std::env::var(name) {
                Ok(v) => v.parse().map_err(|_| format!("{name} must be a number, got {v:?}")),
                Err(_) => Ok(default),
            }
        };
        Ok(Self {
            intake_addr: SocketAddr::from(([127, 0, 0, 1], num("INTAKE_PORT", 3000)? as u16)),
            batch_size: num("LOCAL_BATCH_SIZE", 5)?.clamp(1, 10) as i32,
            visibility_seconds: num("LOCAL_VISIBILITY_SECONDS", 10)? as i32,
            concurrency: num("LOCAL_CONCURRENCY", 3)?.clamp(1, 16) as usize,
            sweep_every: Duration::from_secs(num("SWEEP_INTERVAL_SECONDS", 60)?.max(1)),
            phase_log: std::env::var("LOCAL_PHASE_LOG")
                .map(|v| v != "0" && v != "false")
                .unwrap_or(true),
            events_file: Some(crate::events::events_file()),
            webhook_rule_unfiltered: false,
            console: match genace_console::SignIn::from_env() {
                genace_console::SignIn::Unconfigured => genace_console::SignIn::Local,
                issuer => issuer,
            },
            traces_file: Some(crate::traces::traces_file()),
        })
    }
}

/// Everything the runner starts; dropping it (or `shutdown`) stops every task.
pub struct Running {
    pub(crate) tasks: JoinSet<()>,
}

impl Running {
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }

    /// Waits until a task ends (none should), then stops the rest.
    pub async fn wait(mut self) {
        self.tasks.join_next().await;
        self.shutdown().await;
    }
}

/// Starts the whole stack in this process.
pub async fn start(
    sdk: &SdkConfig,
    config: Config,
    genace: GenaceConfig,
    settings: RunnerSettings,
) -> Result<Running, String> {
    // The local stack counts as deployed unless METRICS_DISABLED says not.
    let metrics = genace_app::metrics_from_env();
    let app = genace_app::from_sdk(sdk, config.clone())
        .with_genace(GenaceClient::new(genace).map_err(|e| e.to_string())?)
        .with_downloads(genace_app::downloads(&config)?);
    let mut app = genace_app::with_metrics(app, metrics.clone());
    app.traces = match settings.traces_file.clone() {
        Some(file) => Arc::new(crate::traces::TraceFile { file }),
        None => Arc::new(genace_stages::ports::traces::NoTraces),
    };
    let mut tasks = JoinSet::new();

    let listener = tokio::net::TcpListener::bind(settings.intake_addr)
        .await
        .map_err(|e| format!("binding intake to {}: {e}", settings.intake_addr))?;
    let api = Arc::new(app.api());
    let console = Arc::new(genace_console::Console::new(settings.console.clone()));
    tasks.spawn(async move {
        if let Err(e) = crate::serve::serve(listener, api, console).await {
            tracing::error!(error = %e, "intake server stopped");
        }
    });

    let consumer = Consumer::in_process(aws::sqs_receiver(sdk), &settings);
    consumer.spawn(&mut tasks, &config.queues.dispatch, app.dispatcher());
    if config.queues.wake != config.queues.dispatch {
        // Dispatch consumes the wake queue beside its own, as deployed.
        consumer.spawn(&mut tasks, &config.queues.wake, app.dispatcher());
    }
    consumer.spawn(&mut tasks, &config.queues.poll, app.poller());
    consumer.spawn(&mut tasks, &config.queues.deliver, app.deliverer());
    consumer.spawn(&mut tasks, &config.queues.recovery, app.recovery());
    let sweeper = Arc::new(app.sweeper());
    spawn_timer(&mut tasks, settings.sweep_every, move || {
        let sweeper = sweeper.clone();
        async move { sweeper.run().await.map(|_| ()).map_err(|e| e.to_string()) }
    });
    // The events pipe seals what the webhook stage checks, as deployed;
    // both run here, so the key is drawn here.
    let seal = genace_stages::pipeline::webhooks::seal::EventSeal::random()?;
    let mut webhooks = genace_app::webhooks(sdk, &config, metrics.clone())?;
    webhooks.seal = Some(seal.clone());
    consumer.spawn_deferring(
        &mut tasks,
        &config.queues.webhooks,
        webhooks,
        genace_app::webhook_deferral(sdk, &config)?,
    );
    if let Some(file) = settings.events_file.clone() {
        let mut enrichment = genace_app::Enrichment::new(sdk, &config, metrics.clone());
        enrichment.seal = Some(seal);
        spawn_events_pipe(
            &mut tasks,
            sdk,
            &config,
            file,
            enrichment,
            settings.webhook_rule_unfiltered,
        );
    }
    if settings.phase_log {
        tasks.spawn(phase_log(aws::dynamodb(sdk), config.table.clone()));
    }
    Ok(Running { tasks })
}

/// The events pipe: the table's stream through `enrichment` to the bus
/// file and the webhook queue (every event marked when `unfiltered`).
fn spawn_events_pipe(
    tasks: &mut JoinSet<()>,
    sdk: &SdkConfig,
    config: &Config,
    file: std::path::PathBuf,
    enrichment: genace_app::Enrichment,
    unfiltered: bool,
) {
    let rule = Some(config.queues.webhooks.clone());
    let enrichment = Arc::new(enrichment);
    crate::events::spawn_pipe(tasks, sdk, config.table.clone(), file, rule, move |batch| {
        let enrichment = enrichment.clone();
        async move {
            let events = if unfiltered {
                enrichment.enrich_unfiltered(&batch)
            } else {
                enrichment.enrich(&batch).await
            };
            let events = events.map_err(|e| e.to_string())?;
            Ok(events.iter().filter_map(|e| serde_json::to_value(e).ok()).collect())
        }
    });
}

/// One SQS queue consumed the way Lambda's event source mapping does it:
/// batches of up to `batch_size`, gathered for up to `window`, handed to a
/// function as one `SqsEvent`.
#[derive(Clone)]
pub(crate) struct Consumer {
    pub sqs: aws_sdk_sqs::Client,
    pub batch_size: i32,
    /// `MaximumBatchingWindowInSeconds`: how long a partial batch waits for more.
    pub window: Duration,
    pub visibility_seconds: i32,
    pub concurrency: usize,
    /// `ReportBatchItemFailures`: only the reported messages stay on the
    /// queue; without it, a batch is deleted or kept as a whole.
    pub report_failures: bool,
    /// Which stage this consumer feeds (for the meter).
    pub stage: String,
}

/// What one invocation made of a batch: `None` when the function failed
/// (every message stays), else its partial batch response.
pub(crate) type BatchOutcome = Option<SqsBatchResponse>;

impl Consumer {
    fn in_process(sqs: aws_sdk_sqs::Client, settings: &RunnerSettings) -> Self {
        Self {
            sqs,
            batch_size: settings.batch_size,
            window: Duration::ZERO,
            visibility_seconds: settings.visibility_seconds,
            concurrency: settings.concurrency,
            report_failures: true,
            stage: String::new(),
        }
    }

    /// Consumes `url` into a stage in this process, one message after
    /// another within a batch (what `genace_edge::sqs::serve_sqs` does in the Lambda).
    fn spawn<S: Stage + 'static>(&self, tasks: &mut JoinSet<()>, url: &str, stage: S) {
        self.spawn_deferring(tasks, url, stage, VisibilityTimeout);
    }

    /// [`Self::spawn`], with failed messages deferred through `deferral`
    /// (what `genace_edge::sqs::serve_sqs_with` does in the Lambda).
    fn spawn_deferring<S: Stage + 'static, R: ReceiptDeferral + 'static>(
        &self,
        tasks: &mut JoinSet<()>,
        url: &str,
        stage: S,
        deferral: R,
    ) {
        let both = Arc::new((stage, deferral));
        self.spawn_batches(tasks, url, move |event| {
            let both = both.clone();
            async move { Some(process_batch_with(event, &both.0, &both.1).await) }
        });
    }

    /// Consumes `url` on `concurrency` tasks until the runner stops, each
    /// batch going to `invoke`.
    pub(crate) fn spawn_batches<F, Fut>(&self, tasks: &mut JoinSet<()>, url: &str, invoke: F)
    where
        F: Fn(SqsEvent) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = BatchOutcome> + Send + 'static,
    {
        let stage = url
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .rsplit('-')
            .next()
            .unwrap_or_default()
            .to_owned();
        for _ in 0..self.concurrency.max(1) {
            let (mut consumer, url, invoke) = (self.clone(), url.to_owned(), invoke.clone());
            consumer.stage = stage.clone();
            tasks.spawn(async move { consumer.run(url, invoke).await });
        }
    }

    async fn receive(&self, url: &str, max: i32, wait_seconds: i32) -> Vec<aws_sdk_sqs::types::Message> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max)
            .visibility_timeout(self.visibility_seconds)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await;
        match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(queue = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "receive failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                Vec::new()
            }
        }
    }

    async fn run<F, Fut>(&self, url: String, invoke: F)
    where
        F: Fn(SqsEvent) -> Fut,
        Fut: Future<Output = BatchOutcome>,
    {
        let name = url.rsplit('/').next().unwrap_or_default();
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        let arn = format!("arn:aws:sqs:{region}:{}:{name}", crate::LOCAL_ACCOUNT);
        loop {
            let mut messages = self.receive(&url, self.batch_size, 2).await;
            if messages.is_empty() {
                continue;
            }
            // The batching window: a partial batch waits for more, up to the window.
            let deadline = tokio::time::Instant::now() + self.window;
            while (messages.len() as i32) < self.batch_size && tokio::time::Instant::now() < deadline {
                let more = self.receive(&url, self.batch_size - messages.len() as i32, 0).await;
                if more.is_empty() {
                    tokio::time::sleep(Duration::from_millis(100).min(deadline - tokio::time::Instant::now())).await;
                }
                messages.extend(more);
            }
            let mut handles = HashMap::new();
            let mut event = SqsEvent::default();
            for m in messages {
                let mut record = SqsMessage::default();
                record.message_id = m.message_id.clone();
                record.receipt_handle = m.receipt_handle.clone();
                record.body = m.body.clone();
                record.md5_of_body = m.md5_of_body.clone();
                record.attributes = m
                    .attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v))
                    .collect();
                // The message attributes (the sender's `traceparent`), as Lambda hands them over.
                record.message_attributes = m
                    .message_attributes
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| {
                        let mut attribute = SqsMessageAttribute::default();
                        attribute.string_value = v.string_value;
                        attribute.data_type = Some(v.data_type);
                        (k, attribute)
                    })
                    .collect();
                record.event_source = Some("aws:sqs".into());
                record.event_source_arn = Some(arn.clone());
                record.aws_region = Some(region.clone());
                if let (Some(id), Some(h)) = (m.message_id, m.receipt_handle) {
                    handles.insert(id, h);
                }
                event.records.push(record);
            }
            let started = std::time::Instant::now();
            let outcome = invoke(event).await;
            crate::meter::invocation(&self.stage, started.elapsed());
            match outcome {
                // A failed invocation: the whole batch reappears after the visibility timeout.
                None => continue,
                Some(response) if self.report_failures => {
                    for failure in &response.batch_item_failures {
                        handles.remove(&failure.item_identifier);
                    }
                }
                Some(response) if !response.batch_item_failures.is_empty() => continue,
                Some(_) => {}
            }
            self.delete(&url, handles.into_values()).await;
        }
    }

    /// Deletes what succeeded; failures reappear after the visibility timeout.
    async fn delete(&self, url: &str, receipts: impl Iterator<Item = String>) {
        let entries: Vec<_> = receipts
            .enumerate()
            .filter_map(|(i, h)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .build()
                    .ok()
            })
            .collect();
        if !entries.is_empty()
            && let Err(e) = self
                .sqs
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
        {
            tracing::warn!(queue = %url, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "delete failed; messages will be received again");
        }
    }
}

/// Runs the sweep every `every`, as the deployed schedule does.
pub(crate) fn spawn_timer<F, Fut>(tasks: &mut JoinSet<()>, every: Duration, sweep: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let started = std::time::Instant::now();
            let swept = genace_app::telemetry::flushed(sweep()).await;
            crate::meter::invocation("sweep", started.elapsed());
            if let Err(e) = swept {
                tracing::warn!(error = %e, "sweep failed");
            }
        }
    });
}

/// Prints one line whenever an operation's phase or delivery state changes.
pub(crate) async fn phase_log(ddb: aws_sdk_dynamodb::Client, table: String) {
    let mut seen: HashMap<String, String> = HashMap::new();
    loop {
        let mut start = None;
        loop {
            let page = ddb
                .scan()
                .table_name(&table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await;
            let Ok(page) = page else { break };
            for item in page.items.unwrap_or_default() {
                let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
                let id = get("operation_id");
                if id.is_empty() {
                    // A tenant's credits ledger, not an operation.
                    continue;
                }
                let mut line = format!("{:<13} {}", get("phase"), get("delivery_state"));
                let job = get("remote_job_id");
                if !job.is_empty() {
                    line.push_str(&format!("  job={job}"));
                }
                if let Some(reason) = item
                    .get("case")
                    .and_then(|c| c.as_m().ok())
                    .and_then(|c| c.get("reason"))
                    .and_then(|r| r.as_s().ok())
                {
                    line.push_str(&format!("  case={reason}"));
                }
                if item.contains_key("spend_hold") {
                    line.push_str("  waiting for the spend limit");
                }
                if seen.get(&id) != Some(&line) {
                    println!(
                        "{}  {id}  tenant={}  {line}",
                        chrono::Utc::now().format("%H:%M:%S"),
                        get("tenant_id")
                    );
                    seen.insert(id, line);
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
