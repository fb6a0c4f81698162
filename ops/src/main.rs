//! `genace-ops`: the operator's view of Genace operations, through the operator API.
//!
//! ```text
//! genace-ops cases list [--tenant T] [--reason R] [--limit N] [--cursor C] [--json]
//! genace-ops cases show <operation_id> [--json]
//! genace-ops cases counts [--tenant T] [--json]
//! genace-ops resolve <operation_id> attach --job-id <ID> --reason <TEXT> [--json]
//! genace-ops resolve <operation_id> confirm-not-created --reason <TEXT>
//! genace-ops resolve <operation_id> release-hold --reason <TEXT>
//! genace-ops resolve <operation_id> mark-settled --reason <TEXT>
//! genace-ops resolve <operation_id> redrive-delivery --reason <TEXT>
//! genace-ops resolve <operation_id> abandon --reason <TEXT>
//! genace-ops op list [--tenant T] [--phase P] [--delivery-state D] [--created-after T] [--created-before T] [--key-prefix K] [--limit N] [--cursor C] [--json]
//! genace-ops op show <operation_id> [--json]
//! genace-ops credits list [--limit N] [--cursor C] [--json]
//! genace-ops credits limit <tenant> <credits|none> [--json]
//! genace-ops webhook show <tenant> [--json]
//! genace-ops webhook set <tenant> --hook-url <URL> --secret-id genace/webhooks/<tenant>/<name> [--events a,b] [--json]
//! genace-ops webhook remove <tenant> [--json]
//! genace-ops endpoint list|create|update|delete|rotate|attempts --tenant <tenant> ... [--json]
//! genace-ops capacity [--json]
//! genace-ops capacity limit <tenant> <jobs|none> [--json]
//! genace-ops capacity account <jobs|none> [--json]
//! genace-ops whoami [--tenant-claim C] [--global-scope S] [--json]
//! ```
//!
//! Every resolution is tied to the version of the operation it was decided
//! on: `--version N` (the `version` that `op show` printed), or else the
//! version `resolve` reads and prints just before it sends the decision. The
//! API answers 412 when the operation changed since, and nothing happens.
//!
//! The API and the operator's token come from `--url`/`--token` or
//! `GENACE_OPS_URL`/`GENACE_OPS_TOKEN`. Exit codes: 0 done, 1 the API
//! refused (its problem detail is printed), 2 bad usage or no connection.
//! `--help` works on every command and subcommand.

mod api;
mod cli;
mod commands;
mod print;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, error::ErrorKind};
use genace_client::Client;

use api::Failure;
use cli::{Cli, Command};

async fn run(api: &Client, json: bool, command: Command) -> Result<(), Failure> {
    match command {
        Command::Cases(c) => commands::cases(api, json, c).await,
        Command::Op(o) => commands::op(api, json, o).await,
        Command::Resolve { operation_id, action } => commands::resolve(api, json, &operation_id, action).await,
        Command::Credits(c) => commands::credits(api, json, c).await,
        Command::Webhook(w) => commands::webhook(api, json, w).await,
        Command::Endpoint { tenant, action } => commands::endpoint(api, json, &tenant, action).await,
        Command::Capacity { action } => commands::capacity(api, json, action).await,
        // Answered before the API is needed.
        Command::Trace { .. } | Command::Whoami { .. } => Ok(()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Trace {
        operation_id,
        file,
        width,
    } = &cli.command
    {
        return commands::trace(cli.json, operation_id, file, usize::from(*width));
    }
    if let Command::Whoami {
        tenant_claim,
        operator_claim,
        global_scope,
    } = &cli.command
    {
        let Some(token) = &cli.token else {
            eprintln!("genace-ops: set --token or GENACE_OPS_TOKEN");
            return ExitCode::from(2);
        };
        let names = commands::ClaimNames {
            tenant: tenant_claim,
            operator: operator_claim,
            global: global_scope,
        };
        return commands::whoami(cli.json, token, &names);
    }
    let missing = |what: &str| -> ! {
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, format!("set {what}"))
            .exit()
    };
    let url = cli.url.unwrap_or_else(|| missing("--url or GENACE_OPS_URL"));
    let token = cli.token.unwrap_or_else(|| missing("--token or GENACE_OPS_TOKEN"));
    let api = api::client(&url, &token);
    match run(&api, cli.json, cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Transport(e)) => {
            eprintln!("genace-ops: cannot reach the API: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Api(problem)) => {
            eprintln!(
                "genace-ops: {} {}: {}",
                print::s(&problem["status"]),
                print::s(&problem["title"]),
                print::s(&problem["detail"])
            );
            ExitCode::from(1)
        }
    }
}
