//! What `start` wires around the functions: their instances, the HTTP
//! API, the queue consumers, the sweep's schedule and the events pipe.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use genace_stages::config::Config;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::runner::{Consumer, RunnerSettings, spawn_timer};
use crate::template::{Locals, Template};

use super::function::{Function, Invocation, start_instance};
use super::gateway::ArtifactGateway;
use super::settings::ArtifactSettings;

/// What every function is started with.
pub(super) struct Shared<'a> {
    pub(super) template: &'a Template,
    pub(super) locals: &'a Locals,
    pub(super) overlay: &'a BTreeMap<String, String>,
    pub(super) settings: &'a ArtifactSettings,
    pub(super) runner: &'a RunnerSettings,
    pub(super) http: &'a reqwest::Client,
}

/// Starts `name`'s instances under the emulator (its reserved concurrency,
/// at most the runner's), each watched by a task in `tasks`.
pub(super) async fn start_function(
    shared: &Shared<'_>,
    name: String,
    tasks: &mut JoinSet<()>,
) -> Result<Arc<Function>, String> {
    let Shared {
        template,
        locals,
        overlay,
        settings,
        runner,
        http,
    } = shared;
    let binary_name = template
        .binary(&name)
        .ok_or(format!("{name} names no binary in its BuildProperties"))?;
    let binary = settings.bin_dir.join(&binary_name);
    if !binary.is_file() {
        return Err(format!(
            "{} is missing; build the functions first (cargo build -p {binary_name})",
            binary.display()
        ));
    }
    let setting = |key: &str| template.function_setting(&name, key, locals);
    let timeout = setting("Timeout")?.and_then(|t| t.parse().ok()).unwrap_or(3u64);
    let mut env = template.function_env(&name, locals)?;
    env.extend(overlay.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.insert("AWS_LAMBDA_FUNCTION_NAME".into(), name.clone());
    env.insert("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into());
    env.insert("AWS_LAMBDA_FUNCTION_TIMEOUT".into(), timeout.to_string());
    if let Some(memory) = setting("MemorySize")? {
        env.insert("AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(), memory);
    }
    let reserved = setting("ReservedConcurrentExecutions")?.and_then(|r| r.parse::<usize>().ok());
    let instances = reserved
        .unwrap_or(runner.concurrency)
        .clamp(1, runner.concurrency.max(1));
    let mut urls = Vec::new();
    for i in 0..instances {
        let log = settings.logs.join(format!("{name}-{i}.log"));
        let (url, mut child) = start_instance(settings, &binary, &env, &log).await?;
        urls.push(url);
        let (function, log) = (name.clone(), log.display().to_string());
        tasks.spawn(async move {
            let status = child.wait().await;
            tracing::error!(%function, ?status, %log, "an emulator instance stopped");
        });
    }
    tracing::info!(function = %name, binary = %binary_name, instances, "started under the emulator");
    Ok(Arc::new(Function {
        name,
        timeout: Duration::from_secs(timeout),
        free: Mutex::new(urls),
        slots: Semaphore::new(instances),
        http: (*http).clone(),
    }))
}

/// The intake address, bound before any emulator starts: each emulator
/// picks free ports of its own, and one that picked this one would
/// answer the API's requests with its own 404s.
pub(super) async fn bind_api(runner: &RunnerSettings) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(runner.intake_addr)
        .await
        .map_err(|e| format!("binding the API to {}: {e}", runner.intake_addr))
}

/// The template's HTTP API in front of the functions, on the intake
/// address bound by [`bind_api`].
pub(super) async fn serve_api(
    shared: &Shared<'_>,
    functions: &HashMap<String, Arc<Function>>,
    tasks: &mut JoinSet<()>,
    listener: tokio::net::TcpListener,
) -> Result<(), String> {
    let Shared {
        template,
        locals,
        runner,
        ..
    } = shared;
    let gateway = Arc::new(ArtifactGateway {
        routes: template.http_routes(locals)?,
        functions: functions.clone(),
    });
    let console = Arc::new(genace_console::Console::new(runner.console.clone()));
    tasks.spawn(async move {
        if let Err(e) = crate::serve::serve(listener, gateway, console).await {
            tracing::error!(error = %e, "API server stopped");
        }
    });

    Ok(())
}

/// One SQS event source mapping per queue source of the template.
pub(super) fn spawn_queue_sources(
    sdk: &aws_config::SdkConfig,
    shared: &Shared<'_>,
    functions: &HashMap<String, Arc<Function>>,
    tasks: &mut JoinSet<()>,
) -> Result<(), String> {
    let Shared {
        template,
        locals,
        runner,
        ..
    } = shared;
    let sqs = genace_aws::clients::sqs_receiver(sdk);
    for (name, function) in functions {
        for source in template.sqs_sources(name) {
            let url = locals
                .refs
                .get(&source.queue)
                .ok_or(format!("{name}: no local queue for {}", source.queue))?;
            let consumer = Consumer {
                sqs: sqs.clone(),
                batch_size: source.batch_size.clamp(1, 10) as i32,
                window: Duration::from_secs(source.window_seconds),
                visibility_seconds: runner.visibility_seconds,
                concurrency: runner.concurrency,
                report_failures: source.report_failures,
                stage: String::new(),
            };
            let function = function.clone();
            consumer.spawn_batches(tasks, url, move |event: SqsEvent| {
                let function = function.clone();
                async move {
                    let payload = serde_json::to_value(&event).ok()?;
                    match function.invoke(&payload).await {
                        Invocation::Returned(v) => {
                            Some(serde_json::from_value::<SqsBatchResponse>(v).unwrap_or_default())
                        }
                        Invocation::Failed(_) => None,
                    }
                }
            });
        }
    }
    Ok(())
}

/// The scheduled function (the sweep), invoked on the runner's interval.
pub(super) fn spawn_schedule(shared: &Shared<'_>, functions: &HashMap<String, Arc<Function>>, tasks: &mut JoinSet<()>) {
    let Shared { template, runner, .. } = shared;
    if let Some(sweep) = template
        .functions()
        .into_iter()
        .find(|f| template.has_events(f, "ScheduleV2") || template.has_events(f, "Schedule"))
        .and_then(|f| functions.get(&f).cloned())
    {
        spawn_timer(tasks, runner.sweep_every, move || {
            let sweep = sweep.clone();
            async move {
                let event = json!({
                    "version": "0",
                    "id": uuid::Uuid::new_v4().to_string(),
                    "source": "aws.scheduler",
                    "detail-type": "Scheduled Event",
                    "account": crate::LOCAL_ACCOUNT,
                    "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    "region": std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
                    "resources": [],
                    "detail": {}
                });
                match sweep.invoke(&event).await {
                    Invocation::Returned(_) => Ok(()),
                    Invocation::Failed(reason) => Err(reason),
                }
            }
        });
    }
}

/// The events pipe, with the template's enrichment function as its step.
pub(super) fn spawn_events_pipe(
    sdk: &aws_config::SdkConfig,
    config: &Config,
    shared: &Shared<'_>,
    functions: &HashMap<String, Arc<Function>>,
    tasks: &mut JoinSet<()>,
) {
    let Shared { template, runner, .. } = shared;
    let enrichment = template.pipe_enrichment().and_then(|f| functions.get(&f).cloned());
    if let (Some(enrichment), Some(file)) = (enrichment, runner.events_file.clone()) {
        let rule = Some(config.queues.webhooks.clone());
        crate::events::spawn_pipe(tasks, sdk, config.table.clone(), file, rule, move |batch| {
            let enrichment = enrichment.clone();
            async move {
                match enrichment.invoke(&Value::Array(batch)).await {
                    Invocation::Returned(Value::Array(events)) => Ok(events),
                    Invocation::Returned(other) => Err(format!("the enrichment returned {other}")),
                    Invocation::Failed(reason) => Err(reason),
                }
            }
        });
    }
}
