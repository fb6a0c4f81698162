//! `genace-bench [pipeline|delivery|load] [options]`: see `genace_local::bench`.
//! Run it through `scripts/bench.sh`, which starts local AWS.

use std::process::ExitCode;

use genace_local::bench;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match bench::Args::parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("genace-bench: {e}");
            eprintln!(
                "usage: genace-bench [pipeline [--intents N] [--output-bytes SIZE] | delivery [--bytes SIZE] | load [--intents N] [--rate PER_SECOND] [--duplicates PERCENT]] [--prices FILE]"
            );
            return ExitCode::from(2);
        }
    };
    match bench::run(parsed).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("genace-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
