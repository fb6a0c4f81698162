//! The command line: every command, subcommand and argument, as clap
//! derives them.

use clap::{Args, Parser, Subcommand};

/// The operator's view of Genace operations, through the operator API.
#[derive(Parser)]
#[command(
    name = "genace-ops",
    version,
    about,
    after_help = "Exit codes: 0 done, 1 the API refused (its problem detail is printed), 2 bad usage or no connection."
)]
pub(crate) struct Cli {
    /// The API's base URL.
    #[arg(
        long,
        env = "GENACE_OPS_URL",
        global = true,
        value_name = "URL",
        hide_env_values = true
    )]
    pub url: Option<String>,
    /// An operator's bearer token.
    #[arg(
        long,
        env = "GENACE_OPS_TOKEN",
        global = true,
        value_name = "JWT",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Open reconciliation cases.
    #[command(subcommand)]
    Cases(Cases),
    /// Decide an operation's case, tied to the version it was decided on.
    Resolve {
        /// The operation, `op_…`.
        operation_id: String,
        #[command(subcommand)]
        action: Action,
    },
    /// One operation.
    #[command(subcommand)]
    Op(Op),
    /// Tenants' credits and spend limits.
    #[command(subcommand)]
    Credits(Credits),
    /// A tenant's webhook.
    #[command(subcommand)]
    Webhook(Webhook),
    /// A tenant's webhook endpoints (the ones the tenant manages).
    Endpoint {
        /// The tenant whose endpoints these are.
        #[arg(long)]
        tenant: String,
        #[command(subcommand)]
        action: EndpointAction,
    },
    /// The Genace account's capacity: the limit, jobs in flight, operations waiting.
    Capacity {
        #[command(subcommand)]
        action: Option<CapacityAction>,
    },
    /// Which kind of operator the token signs in: of one tenant, of every
    /// tenant, or of none (the API refuses it). Read from the token's own
    /// claims, under the deployment's claim names.
    Whoami {
        /// The claim that names the tenant (the deployment's TenantClaim).
        #[arg(long, env = "GENACE_OPS_TENANT_CLAIM", default_value = "tenant_id")]
        tenant_claim: String,
        /// The claim that holds the operator scopes.
        #[arg(long, env = "GENACE_OPS_OPERATOR_CLAIM", default_value = "scope")]
        operator_claim: String,
        /// The scope that marks an operator of every tenant (the
        /// deployment's GlobalOperatorScope).
        #[arg(
            long,
            env = "GENACE_OPS_GLOBAL_OPERATOR_SCOPE",
            default_value = "genace:operator:all"
        )]
        global_scope: String,
    },
    /// An operation's trace as a waterfall: one line per span, its offset,
    /// its time as a bar, the stage or call, and how it ended. Reads the
    /// spans the local stack's receiver wrote (needs no --url or --token).
    Trace {
        /// The operation, `op_…`.
        operation_id: String,
        /// The receiver's span file.
        #[arg(long, env = "GENACE_TRACES_FILE", default_value = ".local/traces.jsonl")]
        file: std::path::PathBuf,
        /// Columns of the bars.
        #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u16).range(8..=200))]
        width: u16,
    },
}

#[derive(Subcommand)]
pub(crate) enum CapacityAction {
    /// Set the whole account's limit of jobs in flight at run time, or
    /// `none` for the deployment's (GENACE_MAX_IN_FLIGHT) again.
    Account {
        /// Jobs in flight at once at most (1 to 10000), or `none`.
        #[arg(value_parser = jobs_limit, value_name = "JOBS|none")]
        limit: JobsLimit,
    },
    /// Set or remove a tenant's own limit of jobs in flight.
    Limit {
        tenant: String,
        /// Jobs in flight at once at most (1 to 10000), or `none`.
        #[arg(value_parser = jobs_limit, value_name = "JOBS|none")]
        limit: JobsLimit,
    },
}

#[derive(Clone, Copy)]
pub(crate) struct JobsLimit(pub Option<u32>);

pub(crate) fn jobs_limit(text: &str) -> Result<JobsLimit, String> {
    if text == "none" {
        return Ok(JobsLimit(None));
    }
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .map(|n| JobsLimit(Some(n)))
        .ok_or_else(|| format!("a number of jobs from 1 to 10000, or none; got {text:?}"))
}

#[derive(Subcommand)]
pub(crate) enum Cases {
    /// Open cases, oldest first.
    List {
        /// Only this tenant's cases.
        #[arg(long)]
        tenant: Option<String>,
        /// Only cases with this reason, such as `unknown_submit_outcome`.
        #[arg(long)]
        reason: Option<String>,
        /// Only cases opened before this RFC 3339 time (open at least so long).
        #[arg(long, value_name = "TIME")]
        opened_before: Option<String>,
        #[command(flatten)]
        page: Page,
    },
    /// How many cases are open per reason, and since when the oldest of each.
    Counts {
        /// Only this tenant's cases.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// A case and its operation's timeline.
    Show {
        /// The operation, `op_…`.
        operation_id: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum Op {
    /// Operations, newest first: one tenant's, or every tenant's in your scope.
    List {
        #[command(flatten)]
        filter: ListFilter,
        #[command(flatten)]
        page: Page,
    },
    /// The operation's timeline.
    Show {
        /// The operation, `op_…`.
        operation_id: String,
    },
    /// Take the operation back before its dispatch claim: no Genace job is
    /// ever created for it. Refused (409) once a job may exist.
    Cancel {
        /// The operation, `op_…`.
        operation_id: String,
    },
    /// Delete every object stored for the operation (delivered, or left by
    /// a delivery that failed, was refused or abandoned); the audit names
    /// you. Refused (409) while a delivery may still run.
    Erase {
        /// The operation, `op_…`.
        operation_id: String,
    },
}

#[derive(Args)]
pub(crate) struct ListFilter {
    /// Only this tenant's operations.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only operations in this phase, such as `prepared` or `uncertain`.
    #[arg(long)]
    pub phase: Option<String>,
    /// Only operations whose delivery is in this state, such as `delivered`.
    #[arg(long, value_name = "STATE")]
    pub delivery_state: Option<String>,
    /// Only operations created after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    pub created_after: Option<String>,
    /// Only operations created before this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    pub created_before: Option<String>,
    /// Only operations whose key starts with this text.
    #[arg(long, value_name = "TEXT")]
    pub key_prefix: Option<String>,
}

#[derive(Args)]
pub(crate) struct Page {
    /// At most this many rows.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[arg(long, value_name = "C")]
    pub cursor: Option<String>,
}

#[derive(Args)]
pub(crate) struct Decision {
    /// Why, in words the audit keeps.
    #[arg(long)]
    pub reason: String,
    /// The version the decision was made on (the one `op show` printed).
    /// Without it, `resolve` reads the operation and prints what it decides on.
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
}

#[derive(Subcommand)]
pub(crate) enum Action {
    /// Save a job id found at Genace.
    Attach {
        /// The Genace job id.
        #[arg(long, value_name = "ID")]
        job_id: String,
        #[command(flatten)]
        decision: Decision,
    },
    /// Genace has no job for this operation: release its hold.
    ConfirmNotCreated(Decision),
    /// Release an account problem's hold, so that dispatch tries again.
    ReleaseHold(Decision),
    /// Genace refunded the failed job.
    MarkSettled(Decision),
    /// Deliver the outputs again.
    RedriveDelivery(Decision),
    /// Give the operation up; what Genace charged stays counted.
    Abandon(Decision),
}

#[derive(Subcommand)]
pub(crate) enum Credits {
    /// Every tenant's credits and limit.
    List {
        #[command(flatten)]
        page: Page,
    },
    /// Set or remove a tenant's spend limit.
    Limit {
        tenant: String,
        /// Credits held at once at most, or `none`.
        #[arg(value_parser = spend_limit, value_name = "CREDITS|none")]
        limit: SpendLimit,
    },
}

#[derive(Subcommand)]
pub(crate) enum Webhook {
    /// The tenant's webhook.
    Show { tenant: String },
    /// Set the tenant's webhook.
    Set {
        tenant: String,
        /// Where events are posted (https, a public host).
        #[arg(long, value_name = "URL")]
        hook_url: String,
        /// The signing secret's name: genace/webhooks/<tenant>/<name>.
        #[arg(long, value_name = "ID")]
        secret_id: String,
        /// Only these event types (all when left out).
        #[arg(long, value_delimiter = ',', value_name = "a,b")]
        events: Vec<String>,
    },
    /// Remove the tenant's webhook.
    Remove { tenant: String },
}

#[derive(Subcommand)]
pub(crate) enum EndpointAction {
    /// Every endpoint of the tenant.
    List,
    /// A new endpoint; its secret is printed once.
    Create {
        /// Where events are posted (https, a public host).
        #[arg(long, value_name = "URL")]
        hook_url: String,
        #[arg(long, default_value = "")]
        description: String,
        /// Only these event types (all when left out).
        #[arg(long, value_delimiter = ',', value_name = "a,b")]
        events: Vec<String>,
    },
    /// Change an endpoint; only what is given changes.
    Update {
        endpoint_id: String,
        #[arg(long, value_name = "URL")]
        hook_url: Option<String>,
        #[arg(long)]
        description: Option<String>,
        #[arg(long, value_delimiter = ',', value_name = "a,b")]
        events: Option<Vec<String>>,
        /// Stop sending to it until enabled again.
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        #[arg(long)]
        enable: bool,
    },
    /// Delete an endpoint and its secret.
    Delete { endpoint_id: String },
    /// A new secret for an endpoint, printed once.
    Rotate { endpoint_id: String },
    /// The endpoint's attempt log, newest first.
    Attempts {
        endpoint_id: String,
        /// succeeded, failed or skipped.
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        page: Page,
    },
}

#[derive(Clone, Copy)]
pub(crate) struct SpendLimit(pub Option<f64>);

pub(crate) fn spend_limit(text: &str) -> Result<SpendLimit, String> {
    if text == "none" {
        return Ok(SpendLimit(None));
    }
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| SpendLimit(Some(v)))
        .ok_or_else(|| format!("a number of credits or none, got {text:?}"))
}
