//! `genace-local`: runs Genace operations on one machine.
//!
//! `genace-local provision` creates the table, queues and bucket on the
//! endpoint named by `AWS_ENDPOINT_URL` (idempotent) and prints the queue URLs.

use std::process::ExitCode;

use shared::aws;
use shared::config::ResourceNames;
use shared::provision::{self, Clients};

const USAGE: &str = "usage: genace-local provision";

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("provision") => provision_local().await,
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

async fn provision_local() -> ExitCode {
    if std::env::var("AWS_ENDPOINT_URL").is_err() {
        eprintln!(
            "AWS_ENDPOINT_URL must point at the local AWS endpoint (see scripts/local-aws.sh env)"
        );
        return ExitCode::from(2);
    }
    let sdk = aws::load().await;
    let (ddb, sqs, s3) = (aws::dynamodb(&sdk), aws::sqs(&sdk), aws::s3(&sdk));
    let names = ResourceNames::with_prefix("");
    match provision::ensure_all(
        &Clients {
            dynamodb: &ddb,
            sqs: &sqs,
            s3: &s3,
        },
        &names,
    )
    .await
    {
        Ok(urls) => {
            println!("table     {}", names.table);
            println!("bucket    {}", names.bucket);
            println!("dispatch  {}", urls.dispatch);
            println!("poll      {}", urls.poll);
            println!("deliver   {}", urls.deliver);
            println!("recovery  {}", urls.recovery);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
