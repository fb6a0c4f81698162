//! `genace-local`: runs Genace operations on one machine.
//!
//! - `genace-local provision`: creates the table, queues and bucket on the
//!   endpoint named by `AWS_ENDPOINT_URL` (idempotent) and prints them.
//! - `genace-local run`: provisions, then hosts the whole stack: intake on
//!   `127.0.0.1:$INTAKE_PORT` (default 3000) behind development JWTs, the
//!   dispatch, poll, deliver and recovery consumers, and the sweep timer.
//! - `genace-local run --artifacts [Param=Value ...]`: the same, but every
//!   function is its deployment binary run by the Lambda Runtime Interface
//!   Emulator (`RIE_BIN`), configured from `infra/template.yaml`, and this
//!   process is the AWS side around them (see `genace_local::artifacts`).
//! - `genace-local token <tenant> [--ttl SECONDS]`: prints a development token.

use std::process::ExitCode;

use genace_aws::clients as aws;
use genace_aws::provision;
use genace_local::{artifacts, devauth, runner};
use genace_stages::config::Config;
use genace_stages::config::ResourceNames;

const USAGE: &str = "usage: genace-local provision | run [--artifacts [Param=Value ...]] | token <tenant> [--ttl SECONDS] | token --operator <name> [--tenant T] | env <FunctionLogicalId> [PARAM=VALUE ...]";

#[tokio::main]
async fn main() -> ExitCode {
    genace_stages::telemetry::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("provision") => provision_local().await.map(|_| ()),
        Some("run") => run(&args[1..]).await,
        Some("token") => token(&args[1..]),
        Some("env") => function_env(&args[1..]),
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("genace-local: {e}");
            ExitCode::from(2)
        }
    }
}

async fn provision_local() -> Result<aws_config::SdkConfig, String> {
    std::env::var("AWS_ENDPOINT_URL")
        .map_err(|_| "AWS_ENDPOINT_URL must point at the local AWS endpoint (see scripts/local-aws.sh env)")?;
    let sdk = aws::load().await;
    let names = ResourceNames::with_prefix("");
    let urls = provision::ensure_all(&sdk, &names).await.map_err(|e| e.to_string())?;
    eprintln!(
        "table {} | bucket {} | queues {}, {}, {}, {}",
        names.table, names.bucket, urls.dispatch, urls.poll, urls.deliver, urls.recovery
    );
    Ok(sdk)
}

async fn run(args: &[String]) -> Result<(), String> {
    let artifacts = match args.first().map(String::as_str) {
        Some("--artifacts") => Some(artifacts::ArtifactSettings::from_env(&args[1..])?),
        Some(_) => return Err(USAGE.to_owned()),
        None => None,
    };
    let sdk = provision_local().await?;
    let config = Config::from_env().map_err(|e| e.to_string())?;
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
/// queue URLs under `AWS_ENDPOINT_URL`, parameters from `PARAM=VALUE`).
fn function_env(args: &[String]) -> Result<(), String> {
    let function = args.first().ok_or(USAGE)?;
    let endpoint = std::env::var("AWS_ENDPOINT_URL").map_err(|_| "AWS_ENDPOINT_URL must be set")?;
    let params = args[1..]
        .iter()
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or("parameters are PARAM=VALUE")?;
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect::<Result<_, String>>()?;
    let locals = genace_local::template::Locals::local_endpoint(&endpoint, params);
    let template = genace_local::template::Template::load("infra/template.yaml")?;
    for (k, v) in template.function_env(function, &locals)? {
        println!("{k}={v}");
    }
    Ok(())
}

fn token(args: &[String]) -> Result<(), String> {
    let claim = std::env::var("TENANT_CLAIM").unwrap_or_else(|_| "tenant_id".into());
    if args.first().map(String::as_str) == Some("--operator") {
        let name = args.get(1).ok_or(USAGE)?;
        let tenant = args.iter().position(|a| a == "--tenant").and_then(|i| args.get(i + 1));
        println!(
            "{}",
            devauth::issue_operator(name, &claim, tenant.map(String::as_str), 12 * 3600)?
        );
        return Ok(());
    }
    let tenant = args.first().filter(|a| !a.starts_with("--")).ok_or(USAGE)?;
    let ttl = match args.iter().position(|a| a == "--ttl") {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or("--ttl needs a number of seconds")?,
        None => 12 * 3600,
    };
    println!("{}", devauth::issue(&claim, tenant, ttl)?);
    Ok(())
}
