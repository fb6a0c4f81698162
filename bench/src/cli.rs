//! The command line: the workloads and their options.

use clap::{Args, Parser, Subcommand};

/// What one operation costs and how fast the stack is, on the local stack.
/// Run it through `scripts/bench.sh`, which starts local AWS.
#[derive(Parser)]
#[command(name = "genace-bench", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// The local AWS endpoint (scripts/bench.sh sets it).
    #[arg(long = "endpoint-url", env = "AWS_ENDPOINT_URL", value_name = "URL", global = true)]
    pub endpoint: Option<String>,
    #[command(subcommand)]
    pub workload: Option<Workload>,
    /// Without a workload, `pipeline` with these options.
    #[command(flatten)]
    pub pipeline: PipelineArgs,
}

#[derive(Subcommand)]
pub enum Workload {
    /// N intents through to delivered: requests, invocations, latency, $ per million (the default).
    Pipeline(PipelineArgs),
    /// One large output: throughput and peak RSS.
    Delivery(DeliveryArgs),
    /// Intents at a fixed offered rate with a share of duplicates.
    Load(LoadArgs),
    /// A burst larger than Genace's account limit, from three tenants.
    Capacity(CapacityArgs),
    /// The same burst beside more and more idle tenants: costs stay flat.
    Scale(ScaleArgs),
    /// How soon a finished render is seen, in the simulator's virtual time.
    Latency(LatencyArgs),
    /// What lifecycle events cost a tenant without webhook receivers, with
    /// every event queued for the webhook function and with the pipe's mark.
    Events(EventsArgs),
    /// Many open cases: the console's first page in headless Chromium.
    Console(ConsoleArgs),
}

#[derive(Args, Clone)]
pub struct LatencyArgs {
    /// Median render times, one class each, in seconds.
    #[arg(long, value_name = "S,S,...", value_delimiter = ',', default_value = "10,60,300")]
    pub medians: Vec<f64>,
    /// The spread around each median (one standard deviation of the log is ln(1 + spread)).
    #[arg(long, value_name = "SHARE", default_value_t = 0.4)]
    pub spread: f64,
    /// Jobs per class that teach the render times first, then jobs per class measured.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub warmup: usize,
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub jobs: usize,
    /// The Genace account's slots.
    #[arg(long, value_name = "JOBS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub slots: u32,
    /// What each request takes in virtual time.
    #[arg(long, value_name = "MS", default_value_t = 5, value_parser = clap::value_parser!(i64).range(0..=10_000))]
    pub latency_ms: i64,
    /// Jobs of 30 minutes run beside, in a 429 storm on status reads (60 %
    /// answered 429 with Retry-After: 600); 0 skips them.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub storm_jobs: usize,
    /// Fail when a burst drains slower than this many times the ideal
    /// (virtual time gives the same figure every run: a gate, not a flake).
    #[arg(long, value_name = "RATIO")]
    pub max_drain: Option<f64>,
}

#[derive(Args, Clone)]
pub struct ConsoleArgs {
    /// How many open cases.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub cases: usize,
    /// How many times the first page is loaded afresh.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub runs: u64,
}

#[derive(Args, Clone)]
pub struct EventsArgs {
    /// How many intents in each of the two runs.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub intents: usize,
    /// The list prices.
    #[arg(long, value_name = "FILE", default_value = "docs/prices.json")]
    pub prices: String,
}

#[derive(Args, Clone)]
pub struct PipelineArgs {
    /// How many intents.
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub intents: usize,
    /// Each output's size (1GiB, 64MiB, 300KiB or bytes).
    #[arg(long, value_name = "SIZE", default_value = "256KiB", value_parser = parse_bytes)]
    pub output_bytes: u64,
    /// Trace every operation: spans exported to a local OTLP receiver.
    #[arg(long, conflicts_with = "compare_tracing")]
    pub traced: bool,
    /// Run the pipeline without and with tracing, in alternating rounds
    /// (each its own process), and print what tracing adds to handler
    /// time; fails when it adds more than 10 %.
    #[arg(long)]
    pub compare_tracing: bool,
    /// Rounds of each, with --compare-tracing.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// End with one line of the run's figures as JSON (what
    /// --compare-tracing reads).
    #[arg(long, hide = true)]
    pub summary: bool,
    /// The list prices.
    #[arg(long, value_name = "FILE", default_value = "docs/prices.json")]
    pub prices: String,
}

#[derive(Args, Clone)]
pub struct DeliveryArgs {
    /// The output's size (1GiB, 64MiB, 300KiB or bytes).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_bytes)]
    pub bytes: u64,
}

#[derive(Args, Clone)]
pub struct LoadArgs {
    /// How many intents.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub intents: usize,
    /// Intents offered per second.
    #[arg(long, value_name = "PER_SECOND", default_value_t = 50.0)]
    pub rate: f64,
    /// The share of intents that repeat an earlier key, in percent.
    #[arg(long = "duplicates", value_name = "PERCENT", default_value = "30", value_parser = percent)]
    pub duplicate_percent: u32,
    /// Each output's size.
    #[arg(long, value_name = "SIZE", default_value = "256KiB", value_parser = parse_bytes)]
    pub output_bytes: u64,
}

#[derive(Args, Clone)]
pub struct ScaleArgs {
    /// How many intents, at once, from one tenant.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub intents: usize,
    /// Jobs the stand-in renders at once, and GENACE_MAX_IN_FLIGHT.
    #[arg(long, value_name = "JOBS", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// How long the stand-in renders each job.
    #[arg(long, value_name = "SECONDS", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub render_seconds: u64,
    /// The tenant counts to run, fewest first (the bursting one included).
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_value = "3,100,1000")]
    pub tenants: Vec<usize>,
    /// The tenant counts to run in the simulator's virtual time, fewest
    /// first; none to skip.
    #[arg(
        long,
        value_name = "N,N,...",
        value_delimiter = ',',
        default_value = "3,100,1000,10000"
    )]
    pub model_tenants: Vec<usize>,
    /// Due items the sweep meets in the simulator's virtual time; 0 to skip.
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    pub model_due: usize,
    /// What each request takes in the simulator's virtual time.
    #[arg(long, value_name = "MS", default_value_t = 5, value_parser = clap::value_parser!(i64).range(0..=10_000))]
    pub model_latency_ms: i64,
    /// The account's shard counts to measure the ceiling with, in virtual
    /// time, fewest first; none to skip.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_value = "1,4,8")]
    pub model_shards: Vec<u16>,
    /// For the ceiling: intents, sent at once by this many tenants in turn,
    /// against an account of this many slots.
    #[arg(long, value_name = "N", default_value_t = 1920)]
    pub ceiling_intents: usize,
    #[arg(long, value_name = "N", default_value_t = 96)]
    pub ceiling_senders: usize,
    #[arg(long, value_name = "JOBS", default_value_t = 96, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub ceiling_limit: u32,
    /// Tenants short of credits beside the most tenants, in a row of their
    /// own: each under a spend limit below one video's estimate, with one
    /// intent waiting for credits. 0 to skip.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub short_of_credits: usize,
}

#[derive(Args, Clone)]
pub struct CapacityArgs {
    /// How many intents, at once.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub intents: usize,
    /// Jobs the stand-in renders at once, and GENACE_MAX_IN_FLIGHT.
    #[arg(long, value_name = "JOBS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// How long the stand-in renders each job.
    #[arg(long, value_name = "SECONDS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub render_seconds: u64,
    /// Jobs the stand-in really renders at once, when fewer than --limit:
    /// dispatch must learn it from the 429s.
    #[arg(long, value_name = "JOBS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub genace_limit: Option<u32>,
    /// The list prices.
    #[arg(long, value_name = "FILE", default_value = "docs/prices.json")]
    pub prices: String,
}

impl CapacityArgs {
    /// What the stand-in renders at once.
    pub fn real_limit(&self) -> u32 {
        self.genace_limit.unwrap_or(self.limit).min(self.limit)
    }
}

/// `1GiB`, `64MiB`, `300KiB`, or plain bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().map_err(|_| format!("bad size {s:?}"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        other => return Err(format!("unknown unit {other:?}")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("{s:?} is too large"))
}

/// `30` or `30%`, at most 100.
fn percent(s: &str) -> Result<u32, String> {
    s.trim_end_matches('%')
        .parse::<u32>()
        .ok()
        .filter(|p| *p <= 100)
        .ok_or_else(|| format!("a percentage from 0 to 100, got {s:?}"))
}
