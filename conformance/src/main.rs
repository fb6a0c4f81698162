//! `conformance run --target <intake base URL> --token <bearer> [options]`
//!
//! Starts wiremock as Genace, prints the `GENACE_BASE_URL` the deployment
//! under test must use, and runs the acceptance scenarios through the
//! deployment's public API. `conformance run --local [--artifacts]` starts
//! the local stack configured to match; `conformance list` prints the
//! scenario names. `--help` describes every option; usage errors exit 2.
//!
//! The deployment must run with FAULT_INJECTION=true, and must be able to
//! reach the Genace stand-in and the output URLs it serves (plain http on
//! the stand-in's address).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use clap::{Parser, Subcommand, builder::PossibleValuesParser};
use conformance::api;
use conformance::genace::GenaceDouble;
use conformance::{Context, SCENARIOS, junit, run_scenarios_reporting, summary};
use tokio::process::{Child, Command};

/// Replays the acceptance scenarios against a deployment, with wiremock as Genace.
#[derive(Parser)]
#[command(name = "conformance", version, args_conflicts_with_subcommands = true)]
struct Cli {
    /// Print the scenario names (as `conformance list`).
    #[arg(long)]
    list: bool,
    #[command(subcommand)]
    command: Option<Verb>,
}

#[derive(Subcommand)]
enum Verb {
    /// Run the scenarios.
    Run(Box<Options>),
    /// Print the scenario names.
    List,
}

#[derive(clap::Args)]
struct Options {
    /// The deployment's intake base URL.
    #[arg(
        long,
        env = "CONFORMANCE_TARGET",
        value_name = "URL",
        hide_env_values = true,
        required_unless_present = "local"
    )]
    target: Option<String>,
    /// A tenant's bearer token for the target.
    #[arg(
        long,
        env = "CONFORMANCE_TOKEN",
        value_name = "BEARER",
        hide_env_values = true,
        required_unless_present = "local"
    )]
    token: Option<String>,
    /// A second tenant's token (tenant isolation).
    #[arg(long, env = "CONFORMANCE_TOKEN_B", value_name = "BEARER", hide_env_values = true)]
    token_b: Option<String>,
    /// Where the Genace stand-in listens.
    #[arg(long = "genace-listen", value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Run only this scenario (repeatable).
    #[arg(long = "scenario", value_name = "NAME", value_parser = PossibleValuesParser::new(SCENARIOS))]
    scenarios: Vec<String>,
    /// Also write a JUnit XML report.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// The longest wait for an asynchronous outcome, in seconds.
    #[arg(long = "patience", value_name = "SECONDS", default_value_t = 120)]
    patience: u64,
    /// How long a "lost" 202 is held, in seconds (more than the deployment's Genace timeout).
    #[arg(long = "lost-delay", value_name = "SECONDS", default_value_t = 40)]
    lost_delay: u64,
    /// Start the local stack (moto and genace-local), configured to match.
    #[arg(long, conflicts_with_all = ["target", "token", "token_b", "events", "traces"])]
    local: bool,
    /// With --local: run the deployment's function binaries under the Lambda
    /// Runtime Interface Emulator, configured from the template.
    #[arg(long, requires = "local")]
    artifacts: bool,
    /// A JSON-lines file of the target's lifecycle events as the bus carries
    /// them; enables the event scenarios.
    #[arg(long, value_name = "FILE")]
    events: Option<PathBuf>,
    /// A JSON-lines file of the target's spans as a trace receiver writes
    /// them (one span a line); enables the trace checks. `--local` starts
    /// a receiver of its own.
    #[arg(long, value_name = "FILE")]
    traces: Option<PathBuf>,
}

/// The local stack started by `--local`, stopped on drop.
struct LocalStack {
    root: PathBuf,
    moto_port: u16,
    runner: Child,
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        let _ = self.runner.start_kill();
        let _ = std::process::Command::new(self.root.join("scripts/local-aws.sh"))
            .arg("stop")
            .env("MOTO_PORT", self.moto_port.to_string())
            .status();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The function binaries `--artifacts` runs.
const FUNCTIONS: [&str; 9] = [
    "intake", "dispatch", "poll", "deliver", "recovery", "sweep", "events", "webhook", "console",
];

/// What `--local` started: the stack, its URL, two tenants' tokens, and
/// its events and spans files.
type Started = (LocalStack, String, String, String, PathBuf, PathBuf);

/// Builds what `--local` runs: genace-local, and with `artifacts` the function binaries.
async fn build(root: &std::path::Path, artifacts: bool) -> Result<(), String> {
    // `--bin` would apply to every package named, so the functions build apart.
    let mut builds = vec![vec!["build", "--quiet", "-p", "genace-local", "--bin", "genace-local"]];
    if artifacts {
        let mut functions = vec!["build", "--quiet"];
        functions.extend(FUNCTIONS.iter().flat_map(|f| ["-p", *f]));
        builds.push(functions);
    }
    for build in builds {
        let ok = Command::new("cargo")
            .args(&build)
            .current_dir(root)
            .status()
            .await
            .map_err(|e| e.to_string())?;
        if !ok.success() {
            return Err(format!("cargo {} failed", build.join(" ")));
        }
    }
    Ok(())
}

/// The local stack's environment, matched to the suite's timings.
fn stack_env(
    moto_port: u16,
    intake_port: u16,
    genace_base: &str,
    events: &std::path::Path,
    traces: (u16, &std::path::Path),
) -> Vec<(&'static str, String)> {
    vec![
        ("TRACES_PORT", traces.0.to_string()),
        ("GENACE_TRACES_FILE", traces.1.display().to_string()),
        ("GENACE_TRACE_SAMPLE_RATE", "1".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{moto_port}")),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "local".into()),
        ("AWS_SECRET_ACCESS_KEY", "local".into()),
        ("AWS_CONFIG_FILE", "/dev/null".into()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("INTAKE_PORT", intake_port.to_string()),
        ("GENACE_BASE_URL", genace_base.to_owned()),
        ("GENACE_TIMEOUT_SECONDS", "3".into()),
        ("FAULT_INJECTION", "true".into()),
        ("DELIVERY_ALLOW_HTTP", "true".into()),
        ("DELIVERY_ALLOW_PRIVATE", "true".into()),
        ("DISPATCH_LEASE_SECONDS", "8".into()),
        ("LOCAL_VISIBILITY_SECONDS", "4".into()),
        ("SWEEP_INTERVAL_SECONDS", "3".into()),
        ("LOCAL_PHASE_LOG", "false".into()),
        ("METRICS_DISABLED", "true".into()),
        ("RUST_LOG", "error".into()),
        ("GENACE_EVENTS_FILE", events.display().to_string()),
    ]
}

/// With `--artifacts`: the emulator and the binaries in `env`, and the
/// suite's timings as local overrides for the functions (the template's
/// timings are for AWS; everything else is the template's).
fn artifacts_env(
    root: &std::path::Path,
    intake_port: u16,
    env: &mut Vec<(&'static str, String)>,
) -> Result<Vec<(String, String)>, String> {
    let rie = std::process::Command::new(root.join("scripts/rie.sh"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("scripts/rie.sh: {e}"))?;
    if !rie.status.success() {
        return Err("finding the Lambda Runtime Interface Emulator failed (scripts/rie.sh)".into());
    }
    let logs = root.join(format!(".local/artifacts-{intake_port}"));
    env.extend([
        ("RIE_BIN", String::from_utf8_lossy(&rie.stdout).trim().to_owned()),
        ("ARTIFACTS_DIR", root.join("target/debug").display().to_string()),
        ("TEMPLATE", root.join("infra/template.yaml").display().to_string()),
        ("ARTIFACT_LOGS", logs.display().to_string()),
    ]);
    println!(
        "artifacts: {} (emulator logs in {})",
        FUNCTIONS.join(", "),
        logs.display()
    );
    const OVERRIDDEN: [&str; 3] = [
        "GENACE_TIMEOUT_SECONDS",
        "DISPATCH_LEASE_SECONDS",
        "DELIVERY_ALLOW_PRIVATE",
    ];
    Ok(env
        .iter()
        .filter(|(k, _)| OVERRIDDEN.contains(k))
        .map(|(k, v)| (format!("LOCAL_OVERRIDE_{k}"), v.clone()))
        .collect())
}

async fn start_local(genace_base: &str, artifacts: bool) -> Result<Started, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let moto_port = free_port().map_err(|e| e.to_string())?;
    let intake_port = free_port().map_err(|e| e.to_string())?;
    build(&root, artifacts).await?;
    let ok = Command::new(root.join("scripts/local-aws.sh"))
        .arg("server")
        .env("MOTO_PORT", moto_port.to_string())
        .status()
        .await
        .map_err(|e| e.to_string())?;
    if !ok.success() {
        return Err("starting local AWS failed".into());
    }
    let bin = root.join("target/debug/genace-local");
    let events = root.join(format!(".local/events-{intake_port}.jsonl"));
    let traces = root.join(format!(".local/traces-{intake_port}.jsonl"));
    let traces_port = free_port().map_err(|e| e.to_string())?;
    let mut env = stack_env(moto_port, intake_port, genace_base, &events, (traces_port, &traces));
    let mut args = vec!["run"];
    let overrides_env = if artifacts {
        args.push("--artifacts");
        artifacts_env(&root, intake_port, &mut env)?
    } else {
        Vec::new()
    };
    let runner = Command::new(&bin)
        .args(&args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .envs(overrides_env)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting genace-local: {e}"))?;
    let stack = LocalStack {
        root,
        moto_port,
        runner,
    };
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(("127.0.0.1", intake_port)).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let token = |tenant: &str| {
        std::process::Command::new(&bin)
            .args(["token", tenant])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .map_err(|e| e.to_string())
    };
    let (a, b) = (token("conformance-tenant-a")?, token("conformance-tenant-b")?);
    Ok((stack, format!("http://127.0.0.1:{intake_port}"), a, b, events, traces))
}

async fn run(o: Options) -> Result<bool, String> {
    let genace = GenaceDouble::start(o.listen)
        .await
        .map_err(|e| format!("starting the Genace stand-in: {e}"))?;
    println!("GENACE_BASE_URL={}", genace.base_url());
    let mut _stack = None;
    let mut events = o.events.clone();
    let mut traces = o.traces.clone();
    let (target, token, token_b) = if o.local {
        let (stack, target, a, b, file, spans) = start_local(&genace.base_url(), o.artifacts).await?;
        _stack = Some(stack);
        events = Some(file);
        traces = Some(spans);
        (target, a, Some(b))
    } else {
        (
            o.target.clone().ok_or("--target is required (or --local)")?,
            o.token.clone().ok_or("--token is required (or --local)")?,
            o.token_b.clone(),
        )
    };
    println!("target: {target}");
    let ctx = Context {
        api: api::client(&target, &token),
        api_other_tenant: token_b.map(|t| api::client(&target, &t)),
        genace,
        patience: Duration::from_secs(o.patience),
        lost_delay: Duration::from_secs(o.lost_delay),
        run_id: uuid::Uuid::new_v4().simple().to_string()[..10].to_owned(),
        events,
        traces,
    };
    if ctx.events.is_none() {
        println!("no --events file: the event scenarios observe nothing and pass vacuously");
    }
    if ctx.traces.is_none() {
        println!("no --traces file: the trace checks are skipped");
    }
    let count = if o.scenarios.is_empty() {
        SCENARIOS.len()
    } else {
        o.scenarios.len()
    };
    let bar = progress(count);
    let results = run_scenarios_reporting(&ctx, &o.scenarios, |r| {
        bar.set_message(r.name.clone());
        bar.inc(1);
    })
    .await;
    bar.finish_and_clear();
    print!("{}", summary(&results));
    if let Some(path) = &o.junit {
        std::fs::write(path, junit(&results)).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(results.iter().all(|r| r.outcome.is_ok()))
}

/// A bar on a terminal; nothing otherwise, so CI keeps its plain lines.
fn progress(count: usize) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(count as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{elapsed_precise} {wide_bar} {pos}/{len} scenarios {msg}")
    {
        bar.set_style(style);
    }
    bar
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Verb::Run(o)) => match run(*o).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("conformance: {e}");
                ExitCode::from(2)
            }
        },
        Some(Verb::List) => {
            SCENARIOS.iter().for_each(|s| println!("{s}"));
            ExitCode::SUCCESS
        }
        None if cli.list => {
            SCENARIOS.iter().for_each(|s| println!("{s}"));
            ExitCode::SUCCESS
        }
        None => {
            use clap::CommandFactory;
            let _ = Cli::command().print_help();
            ExitCode::from(2)
        }
    }
}
