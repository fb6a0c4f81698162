//! `genace-ops`: the operator's view of Genace operations, through the admin API.
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

use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, error::ErrorKind};
use serde_json::{Value, json};

/// The operator's view of Genace operations, through the admin API.
#[derive(Parser)]
#[command(
    name = "genace-ops",
    version,
    about,
    after_help = "Exit codes: 0 done, 1 the API refused (its problem detail is printed), 2 bad usage or no connection."
)]
struct Cli {
    /// The API's base URL.
    #[arg(
        long,
        env = "GENACE_OPS_URL",
        global = true,
        value_name = "URL",
        hide_env_values = true
    )]
    url: Option<String>,
    /// An operator's bearer token.
    #[arg(
        long,
        env = "GENACE_OPS_TOKEN",
        global = true,
        value_name = "JWT",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
}

#[derive(Subcommand)]
enum CapacityAction {
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
struct JobsLimit(Option<u32>);

fn jobs_limit(text: &str) -> Result<JobsLimit, String> {
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
enum Cases {
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
enum Op {
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
struct ListFilter {
    /// Only this tenant's operations.
    #[arg(long)]
    tenant: Option<String>,
    /// Only operations in this phase, such as `prepared` or `uncertain`.
    #[arg(long)]
    phase: Option<String>,
    /// Only operations whose delivery is in this state, such as `delivered`.
    #[arg(long, value_name = "STATE")]
    delivery_state: Option<String>,
    /// Only operations created after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    created_after: Option<String>,
    /// Only operations created before this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    created_before: Option<String>,
    /// Only operations whose key starts with this text.
    #[arg(long, value_name = "TEXT")]
    key_prefix: Option<String>,
}

#[derive(Args)]
struct Page {
    /// At most this many rows.
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[arg(long, value_name = "C")]
    cursor: Option<String>,
}

#[derive(Args)]
struct Decision {
    /// Why, in words the audit keeps.
    #[arg(long)]
    reason: String,
    /// The version the decision was made on (the one `op show` printed).
    /// Without it, `resolve` reads the operation and prints what it decides on.
    #[arg(long, value_name = "N")]
    version: Option<u64>,
}

#[derive(Subcommand)]
enum Action {
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
enum Credits {
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
enum Webhook {
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
enum EndpointAction {
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
    /// The endpoint's delivery log, newest first.
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
struct SpendLimit(Option<f64>);

fn spend_limit(text: &str) -> Result<SpendLimit, String> {
    if text == "none" {
        return Ok(SpendLimit(None));
    }
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| SpendLimit(Some(v)))
        .ok_or_else(|| format!("a number of credits or none, got {text:?}"))
}

enum Failure {
    Api(Value),
    Transport(String),
}

/// The admin API, with the operator's token.
struct Api {
    url: String,
    token: String,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, Failure> {
        self.call_if_match(method, path, body, None).await
    }

    async fn call_if_match(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        version: Option<u64>,
    ) -> Result<Value, Failure> {
        let client = reqwest::Client::new();
        let mut req = client
            .request(method, format!("{}{path}", self.url.trim_end_matches('/')))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        if let Some(v) = version {
            req = req.header("if-match", format!("\"{v}\""));
        }
        let resp = req.send().await.map_err(|e| Failure::Transport(e.to_string()))?;
        let ok = resp.status().is_success();
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| Failure::Transport(e.to_string()))?;
        let value = serde_json::from_str(&text).unwrap_or_else(|_| json!({"status": status, "detail": text}));
        if ok { Ok(value) } else { Err(Failure::Api(value)) }
    }

    async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call(reqwest::Method::GET, path, None).await
    }
}

/// Everything but RFC 3986's unreserved characters is percent-encoded.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes everything but the unreserved characters.
fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k}={}", enc(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_credits(tenants: &[Value]) {
    println!(
        "{:<24} {:>12} {:>12} {:>14} {:>12} {:>12} {:>12}",
        "TENANT", "HELD", "SPENT", "PENDING_REFUND", "SETTLED", "LIMIT", "AVAILABLE"
    );
    for t in tenants {
        println!(
            "{:<24} {:>12} {:>12} {:>14} {:>12} {:>12} {:>12}",
            s(&t["tenant_id"]),
            s(&t["held"]),
            s(&t["spent"]),
            s(&t["pending_refund"]),
            s(&t["settled"]),
            s(&t["spend_limit"]),
            s(&t["available"])
        );
    }
}

fn print_cases(page: &Value) {
    let cases = page["cases"].as_array().cloned().unwrap_or_default();
    println!(
        "{:<35} {:<16} {:<13} {:<24} {:<24} EVIDENCE",
        "OPERATION", "TENANT", "PHASE", "REASON", "OPENED"
    );
    for c in &cases {
        let mut evidence = s(&c["evidence"]);
        if evidence.len() > 60 {
            let mut end = 60;
            while !evidence.is_char_boundary(end) {
                end -= 1;
            }
            evidence.truncate(end);
            evidence.push('…');
        }
        println!(
            "{:<35} {:<16} {:<13} {:<24} {:<24} {}",
            s(&c["operation_id"]),
            s(&c["tenant_id"]),
            s(&c["phase"]),
            s(&c["reason"]),
            s(&c["opened_at"]),
            evidence
        );
    }
    println!("{} open case(s)", cases.len());
    print_next(page);
}

fn print_counts(counts: &Value) {
    println!("{:<24} {:>6}  OLDEST", "REASON", "OPEN");
    for r in counts["reasons"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:>6}  {}",
            s(&r["reason"]),
            s(&r["open"]),
            s(&r["oldest_opened_at"])
        );
    }
    println!("{} open case(s)", s(&counts["open"]));
}

fn print_operations(page: &Value) {
    let ops = page["operations"].as_array().cloned().unwrap_or_default();
    println!(
        "{:<35} {:<13} {:<15} {:<32} KEY",
        "OPERATION", "PHASE", "DELIVERY", "CREATED"
    );
    for op in &ops {
        println!(
            "{:<35} {:<13} {:<15} {:<32} {}",
            s(&op["operation_id"]),
            s(&op["phase"]),
            s(&op["delivery_state"]),
            s(&op["created_at"]),
            s(&op["operation_key"])
        );
    }
    println!("{} operation(s)", ops.len());
    print_next(page);
}

/// How many objects the erasure deleted: the count, or for a view from
/// before counts the keys listed.
fn erased_count(op: &Value) -> u64 {
    op["erased_object_count"]
        .as_u64()
        .unwrap_or_else(|| op["erased_objects"].as_array().map_or(0, |a| a.len() as u64))
}

fn print_timeline(op: &Value) {
    println!("operation   {}", s(&op["operation_id"]));
    println!("key         {}", s(&op["operation_key"]));
    println!(
        "phase       {}  (delivery: {})",
        s(&op["phase"]),
        s(&op["delivery_state"])
    );
    println!(
        "remote job  {}  (state: {})",
        s(&op["remote_job_id"]),
        s(&op["remote_state"])
    );
    let mut events: Vec<(String, String)> = vec![(s(&op["created_at"]), "intent recorded".into())];
    if !op["accepted_at"].is_null() {
        events.push((
            s(&op["accepted_at"]),
            format!("accepted by Genace as {}", s(&op["remote_job_id"])),
        ));
    }
    if !op["observed_at"].is_null() {
        events.push((
            s(&op["observed_at"]),
            format!("last observed: {}", s(&op["remote_state"])),
        ));
    }
    if !op["outputs_erased_at"].is_null() {
        let deleted = erased_count(op);
        events.push((
            s(&op["outputs_erased_at"]),
            format!("outputs erased from the bucket ({deleted} objects deleted)"),
        ));
    }
    if let Some(c) = op["cancellation"].as_object() {
        events.push((
            s(&c["at"]),
            format!(
                "cancelled ({}) by {}: no Genace job was created",
                s(&c["reason"]),
                s(&c["by"])
            ),
        ));
    }
    if let Some(case) = op["reconciliation_case"].as_object() {
        events.push((
            s(&case["opened_at"]),
            format!("case opened: {} — {}", s(&case["reason"]), s(&case["evidence"])),
        ));
    }
    for a in op["audit"].as_array().into_iter().flatten() {
        let job = a["job_id"].as_str().map(|j| format!(" (job {j})")).unwrap_or_default();
        events.push((
            s(&a["at"]),
            format!("{} by {}{job}: {}", s(&a["action"]), s(&a["actor"]), s(&a["reason"])),
        ));
    }
    for o in op["delivered_objects"].as_array().into_iter().flatten() {
        events.push((
            s(&op["updated_at"]),
            format!("delivered {} ({} bytes)", s(&o["key"]), s(&o["bytes"])),
        ));
    }
    if let Some(e) = op["last_error"].as_object() {
        events.push((s(&op["updated_at"]), format!("last error: {}", s(&e["detail"]))));
    }
    events.sort();
    println!("timeline:");
    for (at, what) in events {
        println!("  {at}  {what}");
    }
    print_advice(op);
}

/// The open case's runbook advice and the decisions the version takes.
fn print_advice(op: &Value) {
    if let Some(runbook) = op["reconciliation_case"]["runbook"].as_object() {
        let actions: Vec<String> = runbook["actions"].as_array().into_iter().flatten().map(s).collect();
        println!("runbook:    {}", actions.join(" or "));
        println!("            {}", s(&runbook["advice"]));
    }
    if let Some(allowed) = op["resolutions"].as_array() {
        let allowed: Vec<String> = allowed.iter().map(s).collect();
        println!(
            "decisions:  {}",
            if allowed.is_empty() {
                "none".to_owned()
            } else {
                allowed.join(", ")
            }
        );
    }
}

/// An answer, printed as JSON with `--json` and as text otherwise.
fn emit(json: bool, value: &Value, text: impl FnOnce(&Value)) {
    if json {
        println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
    } else {
        text(value);
    }
}

fn print_next(page: &Value) {
    if let Some(next) = page["next_cursor"].as_str() {
        println!("more: --cursor {next}");
    }
}

fn print_capacity(report: &Value) {
    let source = if report["set_at_run_time"] == true {
        "set at run time"
    } else {
        "deployed"
    };
    println!(
        "limit {} ({source}, deployed {})  effective {}  in flight {}  waiting {}  oldest wait since {}",
        s(&report["max_in_flight"]),
        s(&report["configured_max_in_flight"]),
        s(&report["effective_max_in_flight"]),
        s(&report["in_flight"]),
        s(&report["waiting"]),
        s(&report["oldest_wait_since"])
    );
    println!(
        "{:<24} {:>10} {:>10} OLDEST WAIT SINCE",
        "TENANT", "IN FLIGHT", "WAITING"
    );
    for t in report["tenants"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:>10} {:>10} {}",
            s(&t["tenant_id"]),
            s(&t["in_flight"]),
            s(&t["waiting"]),
            s(&t["oldest_wait_since"])
        );
    }
}

fn print_webhook(hook: &Value) {
    if hook["configured"] != true {
        println!("{}: no webhook", s(&hook["tenant_id"]));
        return;
    }
    let events = match hook["events"].as_array() {
        Some(e) if !e.is_empty() => e.iter().map(s).collect::<Vec<_>>().join(", "),
        _ => "all".into(),
    };
    println!(
        "{}: {} (events: {events}; signed with {}; set by {} at {})",
        s(&hook["tenant_id"]),
        s(&hook["url"]),
        s(&hook["secret_id"]),
        s(&hook["updated_by"]),
        s(&hook["updated_at"])
    );
}

async fn resolve(api: &Api, json: bool, id: &str, action: Action) -> Result<(), Failure> {
    let (name, job_id, decision) = match action {
        Action::Attach { job_id, decision } => ("attach_remote_job", Some(job_id), decision),
        Action::ConfirmNotCreated(d) => ("confirm_not_created", None, d),
        Action::ReleaseHold(d) => ("release_hold", None, d),
        Action::MarkSettled(d) => ("mark_settled", None, d),
        Action::RedriveDelivery(d) => ("redrive_delivery", None, d),
        Action::Abandon(d) => ("abandon", None, d),
    };
    let mut body = json!({"action": name, "reason": decision.reason});
    if let Some(job) = job_id {
        body["job_id"] = json!(job);
    }
    let view = format!("/v1/operations/{}", enc(id));
    let version = match decision.version {
        Some(v) => v,
        None => {
            let seen = api.get(&view).await?;
            let v = seen["version"]
                .as_u64()
                .ok_or_else(|| Failure::Transport("the operation view has no version".into()))?;
            eprintln!(
                "deciding on {id} at version {v}: {} ({}), case {}",
                s(&seen["phase"]),
                s(&seen["delivery_state"]),
                s(&seen["reconciliation_case"]["reason"])
            );
            v
        }
    };
    let op = api
        .call_if_match(
            reqwest::Method::POST,
            &format!("{view}/resolution"),
            Some(body),
            Some(version),
        )
        .await?;
    emit(json, &op, |op| {
        println!(
            "resolved: {} is now {} ({})",
            s(&op["operation_id"]),
            s(&op["phase"]),
            s(&op["delivery_state"])
        );
    });
    Ok(())
}

async fn webhook(api: &Api, json: bool, command: Webhook) -> Result<(), Failure> {
    let path = |tenant: &str| format!("/v1/tenants/{}/webhook", enc(tenant));
    let hook = match command {
        Webhook::Show { tenant } => api.get(&path(&tenant)).await?,
        Webhook::Remove { tenant } => api.call(reqwest::Method::DELETE, &path(&tenant), None).await?,
        Webhook::Set {
            tenant,
            hook_url,
            secret_id,
            events,
        } => {
            let events: Vec<&str> = events.iter().map(|e| e.trim()).filter(|e| !e.is_empty()).collect();
            let body = json!({"url": hook_url, "secret_id": secret_id, "events": events});
            api.call(reqwest::Method::PUT, &path(&tenant), Some(body)).await?
        }
    };
    emit(json, &hook, print_webhook);
    Ok(())
}

fn print_endpoint(e: &Value) {
    let events = match e["events"].as_array() {
        Some(ev) if !ev.is_empty() => ev.iter().map(s).collect::<Vec<_>>().join(", "),
        _ => "all".into(),
    };
    let state = if e["enabled"] == true { "enabled" } else { "disabled" };
    println!(
        "{} {} ({state}; events: {events}) {}",
        s(&e["id"]),
        s(&e["url"]),
        s(&e["description"])
    );
    if let Some(secret) = e["secret"].as_str() {
        println!("secret (shown once, keep it): {secret}");
    }
}

/// Event types as given on the command line, blanks dropped.
fn events_of(events: &[String]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect()
}

/// A PATCH body naming only what is given.
fn update_body(
    url: Option<String>,
    description: Option<String>,
    events: Option<Vec<String>>,
    disable: bool,
    enable: bool,
) -> Value {
    let mut body = serde_json::Map::new();
    if let Some(u) = url {
        body.insert("url".into(), json!(u));
    }
    if let Some(d) = description {
        body.insert("description".into(), json!(d));
    }
    if let Some(e) = events {
        body.insert("events".into(), json!(e));
    }
    if disable || enable {
        body.insert("enabled".into(), json!(enable));
    }
    Value::Object(body)
}

fn print_endpoints(all: &Value) {
    all["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .for_each(print_endpoint);
}

fn print_attempts(log: &Value) {
    for a in log["attempts"].as_array().into_iter().flatten() {
        println!(
            "{} #{} {} {} {} {}ms {}",
            s(&a["at"]),
            s(&a["attempt"]),
            s(&a["status"]),
            s(&a["http_status"]),
            s(&a["error"]),
            s(&a["latency_ms"]),
            s(&a["event_id"])
        );
    }
    if let Some(next) = log["next_cursor"].as_str() {
        println!("more: --cursor {next}");
    }
}

async fn endpoint(api: &Api, json: bool, tenant: &str, action: EndpointAction) -> Result<(), Failure> {
    let base = "/v1/webhooks/endpoints";
    let t = query(&[("tenant", Some(tenant))]);
    let one = |id: &str| format!("{base}/{}", enc(id));
    let answer = match action {
        EndpointAction::List => {
            let all = api.get(&format!("{base}{t}")).await?;
            emit(json, &all, print_endpoints);
            return Ok(());
        }
        EndpointAction::Create {
            hook_url,
            description,
            events,
        } => {
            let body = json!({"url": hook_url, "description": description, "events": events_of(&events)});
            api.call(reqwest::Method::POST, &format!("{base}{t}"), Some(body))
                .await?
        }
        EndpointAction::Update {
            endpoint_id,
            hook_url,
            description,
            events,
            disable,
            enable,
        } => {
            let body = update_body(hook_url, description, events.as_deref().map(events_of), disable, enable);
            let path = format!("{}{t}", one(&endpoint_id));
            api.call(reqwest::Method::PATCH, &path, Some(body)).await?
        }
        EndpointAction::Delete { endpoint_id } => {
            api.call(reqwest::Method::DELETE, &format!("{}{t}", one(&endpoint_id)), None)
                .await?;
            emit(json, &json!({"deleted": endpoint_id}), |v| {
                println!("deleted {}", s(&v["deleted"]))
            });
            return Ok(());
        }
        EndpointAction::Rotate { endpoint_id } => {
            let path = format!("{}/rotate{t}", one(&endpoint_id));
            api.call(reqwest::Method::POST, &path, None).await?
        }
        EndpointAction::Attempts {
            endpoint_id,
            status,
            page,
        } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[
                ("tenant", Some(tenant)),
                ("status", status.as_deref()),
                ("limit", limit.as_deref()),
                ("cursor", page.cursor.as_deref()),
            ]);
            let log = api.get(&format!("{}/attempts{q}", one(&endpoint_id))).await?;
            emit(json, &log, print_attempts);
            return Ok(());
        }
    };
    emit(json, &answer, print_endpoint);
    Ok(())
}

async fn credits(api: &Api, json: bool, command: Credits) -> Result<(), Failure> {
    match command {
        Credits::List { page } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[("limit", limit.as_deref()), ("cursor", page.cursor.as_deref())]);
            let answer = api.get(&format!("/v1/credits{q}")).await?;
            emit(json, &answer, |page| {
                print_credits(page["tenants"].as_array().map(Vec::as_slice).unwrap_or_default());
                print_next(page);
            });
        }
        Credits::Limit { tenant, limit } => {
            let path = format!("/v1/tenants/{}/spend-limit", enc(&tenant));
            let ledger = api
                .call(reqwest::Method::PUT, &path, Some(json!({"spend_limit": limit.0})))
                .await?;
            emit(json, &ledger, |l| print_credits(std::slice::from_ref(l)));
        }
    }
    Ok(())
}

async fn op(api: &Api, json: bool, command: Op) -> Result<(), Failure> {
    match command {
        Op::List { filter, page } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[
                ("tenant", filter.tenant.as_deref()),
                ("phase", filter.phase.as_deref()),
                ("delivery_state", filter.delivery_state.as_deref()),
                ("created_after", filter.created_after.as_deref()),
                ("created_before", filter.created_before.as_deref()),
                ("key_prefix", filter.key_prefix.as_deref()),
                ("limit", limit.as_deref()),
                ("cursor", page.cursor.as_deref()),
            ]);
            let page = api.get(&format!("/v1/operations{q}")).await?;
            emit(json, &page, print_operations);
        }
        Op::Cancel { operation_id } => {
            let path = format!("/v1/operations/{}/cancel", enc(&operation_id));
            let op = api.call(reqwest::Method::POST, &path, None).await?;
            emit(json, &op, print_timeline);
        }
        Op::Erase { operation_id } => {
            let path = format!("/v1/operations/{}/outputs", enc(&operation_id));
            let op = api.call(reqwest::Method::DELETE, &path, None).await?;
            emit(json, &op, print_timeline);
        }
        Op::Show { operation_id } => {
            let op = api.get(&format!("/v1/operations/{}", enc(&operation_id))).await?;
            emit(json, &op, print_timeline);
        }
    }
    Ok(())
}

async fn run(api: &Api, json: bool, command: Command) -> Result<(), Failure> {
    match command {
        Command::Cases(Cases::List {
            tenant,
            reason,
            opened_before,
            page,
        }) => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[
                ("tenant", tenant.as_deref()),
                ("reason", reason.as_deref()),
                ("opened_before", opened_before.as_deref()),
                ("limit", limit.as_deref()),
                ("cursor", page.cursor.as_deref()),
            ]);
            let page = api.get(&format!("/v1/reconciliation-cases{q}")).await?;
            emit(json, &page, print_cases);
        }
        Command::Cases(Cases::Counts { tenant }) => {
            let q = query(&[("tenant", tenant.as_deref())]);
            let counts = api.get(&format!("/v1/reconciliation-cases/counts{q}")).await?;
            emit(json, &counts, print_counts);
        }
        Command::Cases(Cases::Show { operation_id }) => {
            let op = api.get(&format!("/v1/operations/{}", enc(&operation_id))).await?;
            emit(json, &op, print_timeline);
        }
        Command::Op(o) => op(api, json, o).await?,
        Command::Resolve { operation_id, action } => resolve(api, json, &operation_id, action).await?,
        Command::Credits(c) => credits(api, json, c).await?,
        Command::Webhook(w) => webhook(api, json, w).await?,
        Command::Endpoint { tenant, action } => endpoint(api, json, &tenant, action).await?,
        Command::Capacity { action: None } => {
            let report = api.get("/v1/capacity").await?;
            emit(json, &report, print_capacity);
        }
        Command::Capacity {
            action: Some(CapacityAction::Account { limit }),
        } => {
            let answer = api
                .call(
                    reqwest::Method::PUT,
                    "/v1/capacity",
                    Some(json!({"max_in_flight": limit.0})),
                )
                .await?;
            emit(json, &answer, print_capacity);
        }
        Command::Capacity {
            action: Some(CapacityAction::Limit { tenant, limit }),
        } => {
            let path = format!("/v1/tenants/{}/max-in-flight", enc(&tenant));
            let answer = api
                .call(reqwest::Method::PUT, &path, Some(json!({"max_in_flight": limit.0})))
                .await?;
            emit(json, &answer, |a| {
                println!(
                    "{}: at most {} in flight ({} now, {} waiting)",
                    s(&a["tenant_id"]),
                    s(&a["max_in_flight"]),
                    s(&a["in_flight"]),
                    s(&a["waiting"])
                );
            });
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let missing = |what: &str| -> ! {
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, format!("set {what}"))
            .exit()
    };
    let api = Api {
        url: cli.url.unwrap_or_else(|| missing("--url or GENACE_OPS_URL")),
        token: cli.token.unwrap_or_else(|| missing("--token or GENACE_OPS_TOKEN")),
    };
    match run(&api, cli.json, cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Transport(e)) => {
            eprintln!("genace-ops: cannot reach the API: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Api(problem)) => {
            eprintln!(
                "genace-ops: {} {}: {}",
                s(&problem["status"]),
                s(&problem["title"]),
                s(&problem["detail"])
            );
            ExitCode::from(1)
        }
    }
}
