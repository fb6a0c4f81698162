//! `genace-local`: runs Genace operations on one machine.
//!
//! - `genace-local provision`: creates the table, queues and bucket on the
//!   endpoint named by `AWS_ENDPOINT_URL` (idempotent) and prints them.
//! - `genace-local serve`: serves intake on `127.0.0.1:$INTAKE_PORT` (default 3000),
//!   verifying development JWTs the way the API Gateway authorizer does.
//! - `genace-local token <tenant>`: prints a development token for a tenant.

mod devauth;
mod serve;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use shared::aws;
use shared::config::{Config, ResourceNames};
use shared::intake::Intake;
use shared::provision;
use shared::queue::SqsQueue;
use shared::storage::S3Store;
use shared::store::DynamoStore;

const USAGE: &str = "usage: genace-local provision | serve | token <tenant> [--ttl SECONDS]";

#[tokio::main]
async fn main() -> ExitCode {
    shared::telemetry::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("provision") => provision_local().await,
        Some("serve") => serve_intake().await,
        Some("token") => token(&args[1..]),
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

fn require_local_endpoint() -> Result<(), String> {
    std::env::var("AWS_ENDPOINT_URL")
        .map(|_| ())
        .map_err(|_| "AWS_ENDPOINT_URL must point at the local AWS endpoint (see scripts/local-aws.sh env)".into())
}

async fn provision_local() -> Result<(), String> {
    require_local_endpoint()?;
    let sdk = aws::load().await;
    let names = ResourceNames::with_prefix("");
    let urls = provision::ensure_all(&sdk, &names).await.map_err(|e| e.to_string())?;
    println!("table     {}", names.table);
    println!("bucket    {}", names.bucket);
    println!("dispatch  {}", urls.dispatch);
    println!("poll      {}", urls.poll);
    println!("deliver   {}", urls.deliver);
    println!("recovery  {}", urls.recovery);
    Ok(())
}

async fn serve_intake() -> Result<(), String> {
    require_local_endpoint()?;
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let port: u16 = std::env::var("INTAKE_PORT")
        .ok()
        .map(|p| p.parse().map_err(|_| format!("INTAKE_PORT is not a port: {p}")))
        .transpose()?
        .unwrap_or(3000);
    let sdk = aws::load().await;
    let intake = Arc::new(Intake::new(
        DynamoStore::new(aws::dynamodb(&sdk), &config.table),
        SqsQueue::new(aws::sqs(&sdk), config.queues.clone()),
        S3Store::new(aws::s3(&sdk), &config.bucket),
        config,
    ));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    tracing::info!(%addr, "intake listening");
    serve::serve(addr, intake)
        .await
        .map_err(|e| format!("serving on {addr}: {e}"))
}

fn token(args: &[String]) -> Result<(), String> {
    let tenant = args.first().filter(|a| !a.starts_with("--")).ok_or(USAGE)?;
    let ttl = match args.iter().position(|a| a == "--ttl") {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or("--ttl needs a number of seconds")?,
        None => 12 * 3600,
    };
    let claim = std::env::var("TENANT_CLAIM").unwrap_or_else(|_| "tenant_id".into());
    println!("{}", devauth::issue(&claim, tenant, ttl)?);
    Ok(())
}
