//! The artifact mode of the local stack: the deployment's own `bootstrap`
//! binaries, each run by the Lambda Runtime Interface Emulator (the program
//! `sam local` runs inside its containers), with this process playing the
//! AWS side the way `sam local start-api`, `sam local start-lambda` and an
//! event source poller would:
//!
//! - every function of `infra/template.yaml` gets the environment the
//!   template gives it, resolved for local (its `!Ref`s to the table, queues
//!   and bucket mapped to the local names and URLs), plus the local-only
//!   overlay: the local AWS endpoint and credentials, the Genace key, and any
//!   `LOCAL_OVERRIDE_<NAME>=value` of this process's environment;
//! - HTTP requests are matched against the template's HTTP API routes,
//!   checked like the JWT authorizer (401, and 403 without a required
//!   scope), and sent to the route's function as API Gateway HTTP API
//!   (payload v2) events;
//! - each SQS event source mapping of the template is a consumer with its
//!   batch size, batching window and `ReportBatchItemFailures`, invoking its
//!   function with real SQS events;
//! - the sweep is invoked with a scheduler event on a timer.
//!
//! The emulator runs one invocation at a time (a second concurrent one
//! crashes it), so each function runs as a pool of emulator instances, one
//! invocation each at a time, as Lambda runs one per execution environment.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription, ApiGatewayV2httpRequest,
    ApiGatewayV2httpRequestContext,
};
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_lambda_events::query_map::QueryMap;
use base64::Engine;
use genace_stages::config::Config;
use http_body_util::Full;
use hyper::body::Bytes;
use lambda_http::http::{Response, StatusCode};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

use crate::runner::{Consumer, RunnerSettings, Running, phase_log, spawn_timer};
use crate::serve::{Answer, Gateway, authorize};
use crate::template::{HttpRoute, Locals, Template};

/// Where the artifacts, the emulator and the template are.
#[derive(Debug, Clone)]
pub struct ArtifactSettings {
    /// Directory holding the function binaries (`target/debug`).
    pub bin_dir: PathBuf,
    /// The emulator (`aws-lambda-rie-x86_64` from the installed SAM CLI).
    pub rie: PathBuf,
    pub template: PathBuf,
    /// Template parameters given on the command line (`Name=Value`).
    pub params: HashMap<String, String>,
    /// Emulator logs, one file per instance.
    pub logs: PathBuf,
}

impl ArtifactSettings {
    /// Reads `ARTIFACTS_DIR` (default `target/debug`), `RIE_BIN` (required),
    /// `TEMPLATE` (default `infra/template.yaml`) and `ARTIFACT_LOGS`
    /// (default `.local/artifacts`); `params` are `Name=Value` pairs.
    pub fn from_env(params: &[String]) -> Result<Self, String> {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let rie = std::env::var("RIE_BIN").map_err(
            |_| "RIE_BIN must name the Lambda Runtime Interface Emulator (scripts/run-local.sh --artifacts finds it)",
        )?;
        let params = params
            .iter()
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or(format!("template parameters are Name=Value, got {p:?}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            bin_dir: var("ARTIFACTS_DIR", "target/debug").into(),
            rie: rie.into(),
            template: var("TEMPLATE", "infra/template.yaml").into(),
            params,
            logs: var("ARTIFACT_LOGS", ".local/artifacts").into(),
        })
    }
}

/// The template's parameters for a local run: the local Genace, the key
/// from the environment instead of Secrets Manager, the development JWT
/// issuer, and fault injection and http outputs as this process is set.
fn local_locals(config: &Config, given: &HashMap<String, String>) -> Locals {
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "true" || v == "1");
    let mut params = HashMap::from([
        (
            "GenaceBaseUrl".to_owned(),
            std::env::var("GENACE_BASE_URL").unwrap_or_default(),
        ),
        ("GenaceApiKeySecretArn".to_owned(), String::new()),
        ("JwtIssuer".to_owned(), crate::devauth::ISSUER.to_owned()),
        ("JwtAudience".to_owned(), crate::devauth::AUDIENCE.to_owned()),
        (
            "FaultInjection".to_owned(),
            if flag("FAULT_INJECTION") { "enabled" } else { "disabled" }.to_owned(),
        ),
        ("AllowHttpOutputs".to_owned(), flag("DELIVERY_ALLOW_HTTP").to_string()),
    ]);
    if let Ok(claim) = std::env::var("TENANT_CLAIM") {
        params.insert("TenantClaim".into(), claim);
    }
    params.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
    let refs = Locals::stack_refs(&config.table, &config.bucket, &config.queues);
    Locals { params, refs }
}

/// The local-only variables every function gets on top of the template's:
/// the local AWS endpoint and credentials, the Genace key (the template
/// reads it from Secrets Manager), logging, and each
/// `LOCAL_OVERRIDE_<NAME>=value` of this process as `<NAME>=value`.
pub fn local_overlay(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    const PASSED: [&str; 7] = [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "GENACE_API_KEY",
        "RUST_LOG",
        "LOG_FORMAT",
    ];
    let mut overlay = BTreeMap::from([
        ("AWS_CONFIG_FILE".to_owned(), "/dev/null".to_owned()),
        ("AWS_SHARED_CREDENTIALS_FILE".to_owned(), "/dev/null".to_owned()),
        ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
        ("METRICS_DISABLED".to_owned(), "true".to_owned()),
    ]);
    for (k, v) in vars {
        if let Some(name) = k.strip_prefix("LOCAL_OVERRIDE_").filter(|n| !n.is_empty()) {
            overlay.insert(name.to_owned(), v);
        } else if PASSED.contains(&k.as_str()) || k == "METRICS_DISABLED" {
            overlay.insert(k, v);
        }
    }
    overlay
}

/// One function: a pool of emulator instances running its binary.
struct Function {
    name: String,
    timeout: Duration,
    free: Mutex<Vec<String>>,
    slots: Semaphore,
    http: reqwest::Client,
}

/// What one invocation gave.
#[derive(Debug)]
enum Invocation {
    /// The function returned this payload.
    Returned(Value),
    /// The function failed (an error payload, a crash or a timeout).
    Failed(String),
}

impl Function {
    /// Invokes the function once, on a free instance.
    async fn invoke(&self, payload: &Value) -> Invocation {
        let Ok(_slot) = self.slots.acquire().await else {
            return Invocation::Failed("the pool is closed".into());
        };
        let url = self.free.lock().await.pop().expect("a free instance for each slot");
        let sent = self
            .http
            .post(&url)
            .timeout(self.timeout + Duration::from_secs(10))
            .json(payload)
            .send()
            .await;
        let outcome = match sent {
            Ok(resp) => match resp.json::<Value>().await {
                Ok(v) if v.get("errorType").is_some() && v.get("errorMessage").is_some() => {
                    Invocation::Failed(format!("{}: {}", v["errorType"], v["errorMessage"]))
                }
                Ok(v) => Invocation::Returned(v),
                Err(e) => Invocation::Failed(format!("unreadable response: {e}")),
            },
            Err(e) => Invocation::Failed(e.to_string()),
        };
        if let Invocation::Failed(reason) = &outcome {
            tracing::warn!(function = %self.name, %reason, "invocation failed");
        }
        self.free.lock().await.push(url);
        outcome
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Starts one emulator instance running `binary` with exactly `env`. A
/// port taken between choosing and binding it makes the emulator exit at
/// once; that start is tried again on other ports.
async fn start_instance(
    settings: &ArtifactSettings,
    binary: &Path,
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Result<(String, Child), String> {
    let mut last = String::new();
    for _ in 0..3 {
        match start_once(settings, binary, env, log).await {
            Ok(started) => return Ok(started),
            Err(e) => last = e,
        }
    }
    Err(last)
}

async fn start_once(
    settings: &ArtifactSettings,
    binary: &Path,
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Result<(String, Child), String> {
    let (port, api_port) = (free_port()?, free_port()?);
    let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = Command::new(&settings.rie);
    // The emulator dies with this process, however it ends (kill_on_drop
    // covers only an orderly exit).
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = command
        .arg("--runtime-interface-emulator-address")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--runtime-api-address")
        .arg(format!("127.0.0.1:{api_port}"))
        .arg(binary)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", settings.rie.display()))?;
    // Generous: on a loaded machine an emulator can take seconds to listen.
    for _ in 0..600 {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the emulator for {} exited ({status}); see {}",
                binary.display(),
                log.display()
            ));
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok((
                format!("http://127.0.0.1:{port}/2015-03-31/functions/function/invocations"),
                child,
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "the emulator for {} did not listen on port {port} within 30 s",
        binary.display()
    ))
}

/// The API side of artifact mode: the template's routes, its authorizer's
/// checks, and payload v2 events to the route's function.
struct ArtifactGateway {
    routes: Vec<HttpRoute>,
    functions: HashMap<String, Arc<Function>>,
}

fn gateway_message(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(json!({ "message": message }).to_string())))
        .expect("a valid response")
}

impl Gateway for ArtifactGateway {
    fn call(&self, parts: lambda_http::http::request::Parts, body: Vec<u8>) -> Answer<'_> {
        Box::pin(async move {
            let method = parts.method.as_str().to_owned();
            let path = parts.uri.path().to_owned();
            // The most specific route wins: the one with the most literal segments.
            let matched = self
                .routes
                .iter()
                .filter_map(|r| r.matches(&method, &path).map(|p| (r, p)))
                .max_by_key(|(r, p)| r.path.len() - p.len());
            let Some((route, params)) = matched else {
                return gateway_message(StatusCode::NOT_FOUND, "Not Found");
            };
            let Ok(claims) = authorize(&parts) else {
                return gateway_message(StatusCode::UNAUTHORIZED, "Unauthorized");
            };
            let granted: Vec<String> = claims
                .get("scope")
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default();
            if !route.scopes.is_empty() && !route.scopes.iter().any(|s| granted.contains(s)) {
                return gateway_message(StatusCode::FORBIDDEN, "Forbidden");
            }
            let Some(function) = self.functions.get(&route.function) else {
                return gateway_message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error");
            };
            let scopes = (!route.scopes.is_empty()).then_some(granted);
            let event = apigw_event(route, params, &parts, body, claims, scopes);
            match function.invoke(&event).await {
                Invocation::Returned(v) => http_response(&v),
                Invocation::Failed(_) => gateway_message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error"),
            }
        })
    }
}

/// The API Gateway HTTP API (payload format 2.0) event for one request.
pub fn apigw_event(
    route: &HttpRoute,
    path_parameters: HashMap<String, String>,
    parts: &lambda_http::http::request::Parts,
    body: Vec<u8>,
    claims: HashMap<String, String>,
    scopes: Option<Vec<String>>,
) -> Value {
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let params = crate::serve::query_parameters(&parts.uri);
    let now = chrono::Utc::now();
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = claims;
    jwt.scopes = scopes;
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    let mut ctx = ApiGatewayV2httpRequestContext::default();
    ctx.route_key = Some(route.key());
    ctx.account_id = Some(crate::LOCAL_ACCOUNT.into());
    ctx.stage = Some("$default".into());
    ctx.request_id = Some(uuid::Uuid::new_v4().to_string());
    ctx.authorizer = Some(authorizer);
    ctx.apiid = Some("local".into());
    ctx.domain_name = Some("127.0.0.1".into());
    ctx.domain_prefix = Some("127".into());
    ctx.time = Some(now.format("%d/%b/%Y:%H:%M:%S %z").to_string());
    ctx.time_epoch = now.timestamp_millis();
    ctx.http.method = parts.method.clone();
    ctx.http.path = Some(parts.uri.path().to_owned());
    ctx.http.protocol = Some("HTTP/1.1".into());
    ctx.http.source_ip = Some("127.0.0.1".into());
    ctx.http.user_agent = parts
        .headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut event = ApiGatewayV2httpRequest::default();
    event.version = Some("2.0".into());
    event.route_key = Some(route.key());
    event.raw_path = Some(parts.uri.path().to_owned());
    event.raw_query_string = Some(query);
    let mut headers = parts.headers.clone();
    // API Gateway hands cookies apart from the headers.
    let cookies: Vec<String> = headers
        .remove("cookie")
        .and_then(|c| c.to_str().ok().map(|c| c.split("; ").map(str::to_owned).collect()))
        .unwrap_or_default();
    event.cookies = (!cookies.is_empty()).then_some(cookies);
    event.headers = headers;
    event.query_string_parameters = QueryMap::from(params);
    event.path_parameters = path_parameters;
    event.request_context = ctx;
    if !body.is_empty() {
        match String::from_utf8(body) {
            Ok(text) => event.body = Some(text),
            Err(e) => {
                event.body = Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()));
                event.is_base64_encoded = true;
            }
        }
    }
    serde_json::to_value(&event).expect("an API Gateway event serializes")
}

/// The HTTP response API Gateway makes of a function's payload v2 result.
pub fn http_response(v: &Value) -> Response<Full<Bytes>> {
    let Some(status) = v.get("statusCode").and_then(Value::as_u64) else {
        // A result without a status code is the body of a 200 JSON response.
        return Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(v.to_string())))
            .expect("a valid response");
    };
    let mut builder = Response::builder().status(status as u16);
    for (k, value) in v.get("headers").and_then(Value::as_object).into_iter().flatten() {
        if let Some(s) = value.as_str() {
            builder = builder.header(k.as_str(), s);
        }
    }
    for (k, values) in v
        .get("multiValueHeaders")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if v["headers"].get(k).is_some() {
            continue;
        }
        for s in values.as_array().into_iter().flatten().filter_map(Value::as_str) {
            builder = builder.header(k.as_str(), s);
        }
    }
    for cookie in v.get("cookies").and_then(Value::as_array).into_iter().flatten() {
        if let Some(c) = cookie.as_str() {
            builder = builder.header("set-cookie", c);
        }
    }
    let text = v.get("body").and_then(Value::as_str).unwrap_or_default();
    let body = if v.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default()
    } else {
        text.as_bytes().to_vec()
    };
    builder
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| gateway_message(StatusCode::BAD_GATEWAY, "Bad Gateway"))
}

/// What every function is started with.
struct Shared<'a> {
    template: &'a Template,
    locals: &'a Locals,
    overlay: &'a BTreeMap<String, String>,
    settings: &'a ArtifactSettings,
    runner: &'a RunnerSettings,
    http: &'a reqwest::Client,
}

/// Starts `name`'s instances under the emulator (its reserved concurrency,
/// at most the runner's), each watched by a task in `tasks`.
async fn start_function(shared: &Shared<'_>, name: String, tasks: &mut JoinSet<()>) -> Result<Arc<Function>, String> {
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

/// The template's HTTP API in front of the functions, on the intake address.
async fn serve_api(
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
    let gateway = Arc::new(ArtifactGateway {
        routes: template.http_routes(locals)?,
        functions: functions.clone(),
    });
    let listener = tokio::net::TcpListener::bind(runner.intake_addr)
        .await
        .map_err(|e| format!("binding the API to {}: {e}", runner.intake_addr))?;
    let console = Arc::new(genace_console::Console::new(runner.console.clone()));
    tasks.spawn(async move {
        if let Err(e) = crate::serve::serve(listener, gateway, console).await {
            tracing::error!(error = %e, "API server stopped");
        }
    });

    Ok(())
}

/// One SQS event source mapping per queue source of the template.
fn spawn_queue_sources(
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
fn spawn_schedule(shared: &Shared<'_>, functions: &HashMap<String, Arc<Function>>, tasks: &mut JoinSet<()>) {
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
fn spawn_events_pipe(
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

/// Starts every function of the template under the emulator and the AWS
/// side around them.
pub async fn start(
    sdk: &aws_config::SdkConfig,
    config: Config,
    runner: RunnerSettings,
    settings: ArtifactSettings,
) -> Result<Running, String> {
    let template = Template::load(&settings.template.to_string_lossy())?;
    let locals = local_locals(&config, &settings.params);
    let mut overlay = local_overlay(std::env::vars());
    // The endpoint this process was given (flag or environment) is the one
    // the functions use.
    if let Some(endpoint) = sdk.endpoint_url() {
        overlay.insert("AWS_ENDPOINT_URL".to_owned(), endpoint.to_owned());
    }
    std::fs::create_dir_all(&settings.logs).map_err(|e| format!("{}: {e}", settings.logs.display()))?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let shared = Shared {
        template: &template,
        locals: &locals,
        overlay: &overlay,
        settings: &settings,
        runner: &runner,
        http: &http,
    };
    let mut tasks = JoinSet::new();
    let mut functions = HashMap::new();
    for name in template.functions() {
        let function = start_function(&shared, name.clone(), &mut tasks).await?;
        functions.insert(name, function);
    }
    serve_api(&shared, &functions, &mut tasks).await?;
    spawn_queue_sources(sdk, &shared, &functions, &mut tasks)?;
    spawn_schedule(&shared, &functions, &mut tasks);
    spawn_events_pipe(sdk, &config, &shared, &functions, &mut tasks);
    if runner.phase_log {
        tasks.spawn(phase_log(genace_aws::clients::dynamodb(sdk), config.table.clone()));
    }
    Ok(Running { tasks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_is_local_only_and_takes_explicit_overrides() {
        let vars = [
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
            ("GENACE_API_KEY", "k"),
            ("LOCAL_OVERRIDE_DISPATCH_LEASE_SECONDS", "8"),
            ("LOCAL_OVERRIDE_", "ignored"),
            ("HOME", "/root"),
            ("OPERATIONS_TABLE", "not-from-the-shell"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let overlay = local_overlay(vars);
        assert_eq!(overlay["AWS_ENDPOINT_URL"], "http://127.0.0.1:5000");
        assert_eq!(overlay["GENACE_API_KEY"], "k");
        assert_eq!(overlay["DISPATCH_LEASE_SECONDS"], "8");
        assert_eq!(overlay["AWS_CONFIG_FILE"], "/dev/null");
        assert!(!overlay.contains_key("HOME"));
        assert!(
            !overlay.contains_key("OPERATIONS_TABLE"),
            "the template names the table"
        );
        assert!(!overlay.contains_key(""));
    }

    fn parts(method: &str, uri: &str) -> lambda_http::http::request::Parts {
        lambda_http::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .header("cookie", "a=1; b=2")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn a_request_becomes_a_payload_v2_event_that_lambda_http_reads_back() {
        let route = HttpRoute {
            function: "IntakeFunction".into(),
            method: "GET".into(),
            path: "/v1/operations/{operation_id}".into(),
            scopes: vec![],
        };
        let claims = HashMap::from([("tenant_id".to_owned(), "t-1".to_owned())]);
        let event = apigw_event(
            &route,
            HashMap::from([("operation_id".to_owned(), "op_1".to_owned())]),
            &parts("GET", "/v1/operations/op_1?view=full&tag=a%20b&tag=c"),
            Vec::new(),
            claims,
            None,
        );
        assert_eq!(event["version"], "2.0");
        assert_eq!(event["routeKey"], "GET /v1/operations/{operation_id}");
        assert_eq!(
            event["requestContext"]["authorizer"]["jwt"]["claims"]["tenant_id"],
            "t-1"
        );
        assert_eq!(event["cookies"], json!(["a=1", "b=2"]));
        assert_eq!(event["queryStringParameters"]["tag"], "a b,c");
        // What the Lambda's runtime makes of it.
        let request = lambda_http::request::LambdaRequest::ApiGatewayV2(serde_json::from_value(event).unwrap());
        let request: lambda_http::Request = request.into();
        use lambda_http::RequestExt;
        assert_eq!(request.uri().path(), "/v1/operations/op_1");
        assert_eq!(
            request.path_parameters_ref().unwrap().first("operation_id"),
            Some("op_1")
        );
        assert_eq!(
            request.query_string_parameters_ref().unwrap().all("tag"),
            Some(vec!["a b", "c"])
        );
        assert_eq!(request.method(), "GET");

        let binary = apigw_event(
            &route,
            HashMap::new(),
            &parts("POST", "/x"),
            vec![0xff, 0x00],
            HashMap::new(),
            None,
        );
        assert_eq!(binary["isBase64Encoded"], true);
        assert_eq!(binary["body"], "/wA=");
    }

    #[test]
    fn a_payload_v2_result_becomes_the_http_response() {
        let resp = http_response(&json!({
            "statusCode": 201,
            "headers": {"content-type": "application/problem+json", "location": "/v1/operations/op_1"},
            "multiValueHeaders": {"content-type": ["application/problem+json"], "vary": ["a", "b"]},
            "cookies": ["c=1"],
            "body": "eyJrIjoxfQ==",
            "isBase64Encoded": true
        }));
        assert_eq!(resp.status(), 201);
        assert_eq!(resp.headers()["location"], "/v1/operations/op_1");
        assert_eq!(resp.headers().get_all("content-type").iter().count(), 1);
        assert_eq!(resp.headers().get_all("vary").iter().count(), 2);
        assert_eq!(resp.headers()["set-cookie"], "c=1");
        let resp = http_response(&json!({"ok": true}));
        assert_eq!(resp.status(), 200);
    }
}
