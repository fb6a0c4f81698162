//! `genace-ops`: the operator's view of Genace operations, through the admin API.
//!
//! ```text
//! genace-ops cases list [--tenant T] [--reason R] [--limit N] [--cursor C] [--json]
//! genace-ops cases show <operation_id> [--json]
//! genace-ops resolve <operation_id> attach --job-id <ID> --reason <TEXT> [--json]
//! genace-ops resolve <operation_id> confirm-not-created --reason <TEXT>
//! genace-ops resolve <operation_id> release-hold --reason <TEXT>
//! genace-ops resolve <operation_id> mark-settled --reason <TEXT>
//! genace-ops resolve <operation_id> redrive-delivery --reason <TEXT>
//! genace-ops resolve <operation_id> abandon --reason <TEXT>
//! genace-ops op show <operation_id> [--json]
//! genace-ops credits list [--limit N] [--cursor C] [--json]
//! genace-ops credits limit <tenant> <credits|none> [--json]
//! genace-ops webhook show <tenant> [--json]
//! genace-ops webhook set <tenant> --hook-url <URL> --secret-id genace/webhooks/<tenant>/<name> [--events a,b] [--json]
//! genace-ops webhook remove <tenant> [--json]
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

use std::process::ExitCode;

use serde_json::{Value, json};

const USAGE: &str = "usage: genace-ops [--url URL] [--token JWT] (cases list [--tenant T] [--reason R] [--limit N] [--cursor C] | cases show ID | resolve ID (attach --job-id J | confirm-not-created | release-hold | mark-settled | redrive-delivery | abandon) --reason TEXT [--version N] | op show ID | credits list [--limit N] [--cursor C] | credits limit TENANT (CREDITS|none) | webhook (show|remove) TENANT | webhook set TENANT --hook-url URL --secret-id ID [--events a,b]) [--json]";

struct Cli {
    url: String,
    token: String,
    json: bool,
    words: Vec<String>,
    flags: Vec<(String, String)>,
}

enum Failure {
    Usage(String),
    Api(Value),
    Transport(String),
}

fn parse(args: Vec<String>) -> Result<Cli, Failure> {
    let mut url = std::env::var("GENACE_OPS_URL").ok();
    let mut token = std::env::var("GENACE_OPS_TOKEN").ok();
    let (mut json, mut words, mut flags) = (false, Vec::new(), Vec::new());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--url" => url = it.next(),
            "--token" => token = it.next(),
            f if f.starts_with("--") => {
                let v = it.next().ok_or_else(|| Failure::Usage(format!("{f} needs a value")))?;
                flags.push((f.trim_start_matches("--").to_owned(), v));
            }
            _ => words.push(a),
        }
    }
    Ok(Cli {
        url: url.ok_or_else(|| Failure::Usage("set --url or GENACE_OPS_URL".into()))?,
        token: token.ok_or_else(|| Failure::Usage("set --token or GENACE_OPS_TOKEN".into()))?,
        json,
        words,
        flags,
    })
}

impl Cli {
    fn flag(&self, name: &str) -> Option<&str> {
        self.flags.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

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
    if let Some(next) = page["next_cursor"].as_str() {
        println!("more: --cursor {next}");
    }
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
}

#[allow(
    clippy::too_many_lines,
    reason = "one arm per subcommand; it goes when the CLI moves to clap (issue 23, item 9)"
)]
async fn run(cli: &Cli) -> Result<(), Failure> {
    let words: Vec<&str> = cli.words.iter().map(String::as_str).collect();
    let out = match words.as_slice() {
        ["cases", "list"] => {
            let q = query(&[
                ("tenant", cli.flag("tenant")),
                ("reason", cli.flag("reason")),
                ("limit", cli.flag("limit")),
                ("cursor", cli.flag("cursor")),
            ]);
            let page = cli
                .call(reqwest::Method::GET, &format!("/v1/reconciliation-cases{q}"), None)
                .await?;
            if !cli.json {
                print_cases(&page);
                return Ok(());
            }
            page
        }
        ["cases", "show", id] | ["op", "show", id] => {
            let op = cli
                .call(reqwest::Method::GET, &format!("/v1/operations/{id}"), None)
                .await?;
            if !cli.json {
                print_timeline(&op);
                return Ok(());
            }
            op
        }
        ["resolve", id, action] => {
            let reason = cli
                .flag("reason")
                .ok_or_else(|| Failure::Usage("--reason is required".into()))?;
            let mut body = json!({"reason": reason});
            body["action"] = json!(match *action {
                "attach" => {
                    let job = cli
                        .flag("job-id")
                        .ok_or_else(|| Failure::Usage("attach needs --job-id".into()))?;
                    body["job_id"] = json!(job);
                    "attach_remote_job"
                }
                "confirm-not-created" => "confirm_not_created",
                "release-hold" => "release_hold",
                "mark-settled" => "mark_settled",
                "redrive-delivery" => "redrive_delivery",
                "abandon" => "abandon",
                other => return Err(Failure::Usage(format!("unknown action {other:?}"))),
            });
            let version = match cli.flag("version") {
                Some(v) => v
                    .parse::<u64>()
                    .map_err(|_| Failure::Usage("--version must be a number".into()))?,
                None => {
                    let seen = cli
                        .call(reqwest::Method::GET, &format!("/v1/operations/{id}"), None)
                        .await?;
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
            let op = cli
                .call_if_match(
                    reqwest::Method::POST,
                    &format!("/v1/operations/{id}/resolution"),
                    Some(body),
                    Some(version),
                )
                .await?;
            if !cli.json {
                println!(
                    "resolved: {} is now {} ({})",
                    s(&op["operation_id"]),
                    s(&op["phase"]),
                    s(&op["delivery_state"])
                );
                return Ok(());
            }
            op
        }
        ["credits", "list"] => {
            let q = query(&[("limit", cli.flag("limit")), ("cursor", cli.flag("cursor"))]);
            let page = cli.call(reqwest::Method::GET, &format!("/v1/credits{q}"), None).await?;
            if !cli.json {
                print_credits(page["tenants"].as_array().map(Vec::as_slice).unwrap_or_default());
                if let Some(next) = page["next_cursor"].as_str() {
                    println!("more: --cursor {next}");
                }
                return Ok(());
            }
            page
        }
        ["credits", "limit", tenant, amount] => {
            let limit = match *amount {
                "none" => Value::Null,
                n => json!(
                    n.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite() && *v >= 0.0)
                        .ok_or_else(|| Failure::Usage(format!(
                            "the limit must be a number of credits or none, got {n:?}"
                        )))?
                ),
            };
            let path = format!("/v1/tenants/{}/spend-limit", enc(tenant));
            let ledger = cli
                .call(reqwest::Method::PUT, &path, Some(json!({"spend_limit": limit})))
                .await?;
            if !cli.json {
                print_credits(std::slice::from_ref(&ledger));
                return Ok(());
            }
            ledger
        }
        ["webhook", verb @ ("show" | "set" | "remove"), tenant] => {
            let path = format!("/v1/tenants/{}/webhook", enc(tenant));
            let hook = match *verb {
                "show" => cli.call(reqwest::Method::GET, &path, None).await?,
                "remove" => cli.call(reqwest::Method::DELETE, &path, None).await?,
                _ => {
                    let url = cli
                        .flag("hook-url")
                        .ok_or_else(|| Failure::Usage("webhook set needs --hook-url".into()))?;
                    let secret = cli
                        .flag("secret-id")
                        .ok_or_else(|| Failure::Usage("webhook set needs --secret-id".into()))?;
                    let events: Vec<&str> = cli
                        .flag("events")
                        .map(|e| e.split(',').map(str::trim).filter(|e| !e.is_empty()).collect())
                        .unwrap_or_default();
                    let body = json!({"url": url, "secret_id": secret, "events": events});
                    cli.call(reqwest::Method::PUT, &path, Some(body)).await?
                }
            };
            if !cli.json {
                if hook["configured"] == true {
                    println!(
                        "{}: {} (events: {}; signed with {}; set by {} at {})",
                        s(&hook["tenant_id"]),
                        s(&hook["url"]),
                        match hook["events"].as_array() {
                            Some(e) if !e.is_empty() => e.iter().map(s).collect::<Vec<_>>().join(", "),
                            _ => "all".into(),
                        },
                        s(&hook["secret_id"]),
                        s(&hook["updated_by"]),
                        s(&hook["updated_at"])
                    );
                } else {
                    println!("{}: no webhook", s(&hook["tenant_id"]));
                }
                return Ok(());
            }
            hook
        }
        _ => return Err(Failure::Usage(USAGE.into())),
    };
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match parse(std::env::args().skip(1).collect()) {
        Ok(cli) => run(&cli).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(u)) => {
            eprintln!("genace-ops: {u}");
            ExitCode::from(2)
        }
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
