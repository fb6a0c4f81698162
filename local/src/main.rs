//! `genace-local`: runs Genace operations on one machine.
//!
//! - `genace-local provision`: creates the table, queues and bucket on the
//!   local AWS endpoint (idempotent) and prints them.
//! - `genace-local run`: provisions, then hosts the whole stack: intake on
//!   `127.0.0.1:$INTAKE_PORT` (default 3000) behind development JWTs, the
//!   dispatch, poll, deliver and recovery consumers, and the sweep timer.
//! - `genace-local run --artifacts [Param=Value ...]`: the same, but every
//!   function is its deployment binary run by the Lambda Runtime Interface
//!   Emulator (`RIE_BIN`), configured from `infra/template.yaml`, and this
//!   process is the AWS side around them (see `genace_local::artifacts`).
//! - `genace-local token <tenant>` / `token --operator <name>`: prints a
//!   development token.
//! - `genace-local env <FunctionLogicalId>`: the environment the template
//!   gives a function, resolved for the local stack.
//!
//! `--help` works on every command. Usage errors exit 2.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use genace_aws::clients as aws;
use genace_aws::provision;
use genace_local::{artifacts, devauth, runner};
use genace_stages::config::ResourceNames;

/// Runs Genace operations on one machine, against a local AWS (moto).
#[derive(Parser)]
#[command(name = "genace-local", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The local AWS endpoint every client is sent to.
#[derive(clap::Args)]
struct Endpoint {
    /// The local AWS endpoint (see `scripts/local-aws.sh env`).
    #[arg(long = "endpoint-url", env = "AWS_ENDPOINT_URL", value_name = "URL")]
    url: String,
}

#[derive(Subcommand)]
enum Command {
    /// Create the table, queues and bucket (idempotent) and print them.
    Provision {
        #[command(flatten)]
        endpoint: Endpoint,
    },
    /// Provision, then host the whole stack until Ctrl-C or SIGTERM.
    #[command(after_help = "The stack's settings come from the environment, as in a deployment \
        (GENACE_BASE_URL, GENACE_API_KEY, INTAKE_PORT, TENANT_CLAIM, FAULT_INJECTION, ...); \
        see the README's \"Run it locally\".")]
    Run {
        #[command(flatten)]
        endpoint: Endpoint,
        /// Run each function's deployment binary under the Lambda Runtime
        /// Interface Emulator (RIE_BIN), configured from infra/template.yaml.
        #[arg(long)]
        artifacts: bool,
        /// Template parameters for --artifacts.
        #[arg(value_name = "PARAM=VALUE", requires = "artifacts")]
        params: Vec<String>,
    },
    /// Print a development token (signed with DEV_JWT_SECRET).
    Token {
        /// The tenant the token belongs to.
        #[arg(required_unless_present = "operator", conflicts_with = "operator")]
        tenant: Option<String>,
        /// An operator's token with this name instead.
        #[arg(long, value_name = "NAME")]
        operator: Option<String>,
        /// Also grant `operations.webhooks`: the application may manage its
        /// tenant's webhook endpoints.
        #[arg(long, conflicts_with = "operator")]
        webhooks: bool,
        /// Scope the operator to one tenant.
        #[arg(
            long = "tenant",
            value_name = "TENANT",
            requires = "operator",
            conflicts_with = "tenant"
        )]
        scope: Option<String>,
        /// How long the token lives.
        #[arg(long, value_name = "SECONDS", default_value_t = 12 * 3600,
              value_parser = clap::value_parser!(i64).range(1..))]
        ttl: i64,
        /// The claim that names the tenant.
        #[arg(long, env = "TENANT_CLAIM", default_value = "tenant_id", hide_env_values = true)]
        claim: String,
    },
    /// Print the environment infra/template.yaml gives a function, resolved
    /// for the local stack.
    Env {
        #[command(flatten)]
        endpoint: Endpoint,
        /// The function's logical id, such as IntakeFunction.
        function: String,
        /// Template parameters.
        #[arg(value_name = "PARAM=VALUE")]
        params: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let command = Cli::parse().command;
    // The stack's spans go to a receiver of its own, unless an OTLP
    // endpoint is named.
    let receiver = match command {
        Command::Run { .. } => traces().await,
        _ => {
            genace_app::telemetry::init();
            None
        }
    };
    let result = match command {
        Command::Provision { endpoint } => provision_local(&endpoint).await.map(|_| ()),
        Command::Run {
            endpoint,
            artifacts,
            params,
        } => {
            // The functions under the emulator send their spans where this
            // process sends its own.
            // (with the headers it sends, a hosted receiver's key).
            let spans_to = receiver
                .as_ref()
                .map(|r| (r.endpoint.clone(), None))
                .or_else(|| genace_app::telemetry::tracing_from_env().map(|t| (t.endpoint, t.headers)));
            run(&endpoint, artifacts.then_some(params), spans_to).await
        }
        Command::Token {
            tenant,
            operator,
            webhooks,
            scope,
            ttl,
            claim,
        } => token(tenant, operator.map(|o| (o, scope)), webhooks, ttl, &claim),
        Command::Env {
            endpoint,
            function,
            params,
        } => function_env(&endpoint, &function, &params),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("genace-local: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the local OTLP receiver (`TRACES_PORT`, default 4318; spans to
/// `GENACE_TRACES_FILE`, default `.local/traces.jsonl`) and sends this
/// process's spans to it; with `OTEL_EXPORTER_OTLP_ENDPOINT` set, sends
/// them there instead and starts none.
async fn traces() -> Option<genace_local::traces::Receiver> {
    if genace_app::telemetry::tracing_from_env().is_some() {
        genace_app::telemetry::init();
        return None;
    }
    let port = std::env::var("TRACES_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(4318);
    let file = genace_local::traces::traces_file();
    match genace_local::traces::Receiver::start(port, &file).await {
        Ok(receiver) => {
            let rate = genace_app::telemetry::sample_rate(std::env::var("GENACE_TRACE_SAMPLE_RATE").ok().as_deref());
            genace_app::telemetry::init_with(Some(genace_app::telemetry::Tracing {
                endpoint: receiver.endpoint.clone(),
                service: "genace-local".into(),
                rate,
                headers: None,
            }));
            eprintln!("genace-local: spans to {} ({})", receiver.endpoint, file.display());
            Some(receiver)
        }
        Err(e) => {
            genace_app::telemetry::init();
            eprintln!("genace-local: no trace receiver on port {port} ({e}); spans are not kept");
            None
        }
    }
}

async fn provision_local(endpoint: &Endpoint) -> Result<aws_config::SdkConfig, String> {
    let sdk = aws::load_at(&endpoint.url).await;
    let names = ResourceNames::with_prefix("");
    let urls = provision::ensure_all(&sdk, &names).await.map_err(|e| e.to_string())?;
    eprintln!(
        "table {} | bucket {} | queues {}, {}, {}, {}",
        names.table, names.bucket, urls.dispatch, urls.poll, urls.deliver, urls.recovery
    );
    Ok(sdk)
}

async fn run(
    endpoint: &Endpoint,
    artifacts: Option<Vec<String>>,
    spans_to: Option<(String, Option<genace_app::telemetry::HeaderList>)>,
) -> Result<(), String> {
    let artifacts = match artifacts {
        Some(params) => {
            let mut settings = artifacts::ArtifactSettings::from_env(&params)?;
            if let Some((spans_to, headers)) = spans_to {
                let rate =
                    genace_app::telemetry::sample_rate(std::env::var("GENACE_TRACE_SAMPLE_RATE").ok().as_deref());
                settings.send_spans_to(&spans_to, rate, headers.map(|h| h.text));
            }
            Some(settings)
        }
        None => None,
    };
    let sdk = provision_local(endpoint).await?;
    let config = genace_local::local_config(&endpoint.url)?;
    let settings = runner::RunnerSettings::from_env()?;
    let addr = settings.intake_addr;
    let running = match artifacts {
        Some(a) => artifacts::start(&sdk, config, settings, a).await?,
        None => runner::start(&sdk, config, genace_app::genace_config(&sdk).await?, settings).await?,
    };
    tracing::info!(%addr, "local stack running");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("listening for SIGTERM: {e}"))?;
    let result = tokio::select! {
        _ = running.wait() => Err("a stage of the local stack stopped".into()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
    };
    result
}

/// Prints `NAME=VALUE` lines: the environment `infra/template.yaml` gives a
/// function, resolved for the local stack (its default resource names, the
/// queue URLs under the endpoint, parameters from `PARAM=VALUE`).
fn function_env(endpoint: &Endpoint, function: &str, params: &[String]) -> Result<(), String> {
    let params = params
        .iter()
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or("parameters are PARAM=VALUE")?;
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect::<Result<_, String>>()?;
    let locals = genace_local::template::Locals::local_endpoint(&endpoint.url, params);
    let template = genace_local::template::Template::load("infra/template.yaml")?;
    for (k, v) in template.function_env(function, &locals)? {
        println!("{k}={v}");
    }
    Ok(())
}

/// An operator's token (`operator`: its name and the tenant it is limited
/// to, if any), or an application's for `tenant`, with the webhook scope
/// when `webhooks`.
fn token(
    tenant: Option<String>,
    operator: Option<(String, Option<String>)>,
    webhooks: bool,
    ttl: i64,
    claim: &str,
) -> Result<(), String> {
    let token = match (operator, tenant) {
        (Some((name, scope)), _) => devauth::issue_operator(&name, claim, scope.as_deref(), ttl)?,
        (None, Some(tenant)) if webhooks => devauth::issue_with_webhooks(claim, &tenant, ttl)?,
        (None, Some(tenant)) => devauth::issue(claim, &tenant, ttl)?,
        (None, None) => unreachable!("clap requires a tenant unless --operator is given"),
    };
    println!("{token}");
    Ok(())
}
