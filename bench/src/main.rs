//! `genace-bench [pipeline|delivery|load] [options]`: see the crate's docs.
//! Run it through `scripts/bench.sh`, which starts local AWS.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    match genace_bench::run(genace_bench::Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("genace-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
