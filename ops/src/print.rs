//! What each answer looks like in the terminal; `--json` prints it as it came.

use serde_json::Value;

pub(crate) fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) fn print_credits(tenants: &[Value]) {
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

pub(crate) fn print_cases(page: &Value) {
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

pub(crate) fn print_counts(counts: &Value) {
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

pub(crate) fn print_operations(page: &Value) {
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
pub(crate) fn erased_count(op: &Value) -> u64 {
    op["erased_object_count"]
        .as_u64()
        .unwrap_or_else(|| op["erased_objects"].as_array().map_or(0, |a| a.len() as u64))
}

pub(crate) fn print_timeline(op: &Value) {
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
pub(crate) fn print_advice(op: &Value) {
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
pub(crate) fn emit(json: bool, value: &Value, text: impl FnOnce(&Value)) {
    if json {
        println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
    } else {
        text(value);
    }
}

pub(crate) fn print_next(page: &Value) {
    if let Some(next) = page["next_cursor"].as_str() {
        println!("more: --cursor {next}");
    }
}

pub(crate) fn print_capacity(report: &Value) {
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
    if report["tenants_complete"] == false {
        println!("(more tenants than one report reads: the longest waiting are listed; others may be missing)");
    }
}

pub(crate) fn print_webhook(hook: &Value) {
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

pub(crate) fn print_endpoint(e: &Value) {
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

pub(crate) fn print_endpoints(all: &Value) {
    all["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .for_each(print_endpoint);
}

pub(crate) fn print_attempts(log: &Value) {
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
