//! Views: the JSON an application or an operator sees of an operation. Claim
//! tokens, fault directives and internal scheduling never appear.

use genace_core::ledger::TenantLedger;
use genace_core::record::OperationRecord;
use serde_json::{Value, json};

/// The view with presigned links for the delivered objects.
pub fn view_with_links(rec: &OperationRecord, links: &[Option<String>]) -> Value {
    let mut v = view(rec);
    // Erased: the objects are gone, so no links; the keys and digests stay.
    let links = if rec.outputs_erased.is_some() { &[] } else { links };
    if !rec.delivered_objects.is_empty() {
        let objects: Vec<Value> = rec
            .delivered_objects
            .iter()
            .zip(links.iter().chain(std::iter::repeat(&None)))
            .map(|(o, link)| {
                json!({
                    "key": o.key,
                    "bytes": o.bytes,
                    "sha256": o.sha256,
                    "content_type": o.content_type,
                    "url": link,
                })
            })
            .collect();
        v["delivered_objects"] = Value::Array(objects);
    }
    v
}

/// The JSON view of an operation that clients see.
pub fn view(rec: &OperationRecord) -> Value {
    let mut v = json!({
        "operation_id": rec.operation_id,
        "operation_key": rec.operation_key,
        "media_type": rec.media_type,
        "phase": rec.phase,
        "delivery_state": rec.delivery_state,
        "specification_hash": rec.specification_hash,
        "specification": rec.specification_value(),
        "remote_job_id": rec.remote_job_id,
        "trace_id": genace_core::trace::TraceId::of(&rec.operation_id).to_hex(),
        "remote_state": rec.remote_state,
        "observed_at": rec.observed_at,
        "accepted_at": rec.accepted_at,
        "settlement": rec.settlement,
        "delivery_attempts": rec.delivery_attempts,
        "priority": rec.priority,
        "version": rec.version,
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
    });
    let obj = v.as_object_mut().expect("view is an object");
    if let Some(case) = &rec.case {
        let mut shown = json!(case);
        shown["runbook"] = json!(rec.runbook());
        obj.insert("reconciliation_case".into(), shown);
    }
    if let Some(err) = &rec.last_error {
        obj.insert("last_error".into(), json!(err));
    }
    if !rec.audit.is_empty() {
        obj.insert("audit".into(), json!(rec.audit));
    }
    if !rec.unsaved_jobs.is_empty() {
        obj.insert("unsaved_job_ids".into(), json!(rec.unsaved_jobs));
    }
    if rec.held_credits.is_some() {
        obj.insert("held_credits".into(), json!(rec.held_credits));
    }
    if let Some(refused) = &rec.held_credits_refused {
        obj.insert("held_credits_refused".into(), json!(refused));
    }
    marks(rec, obj);
    // An abandoned operation's credits follow its job: the phase they count as.
    if let Some(phase) = rec.ledger_phase {
        obj.insert("ledger_phase".into(), json!(phase));
    }
    if let Some(since) = rec.spend_hold {
        let next_check = rec.retry_at_ms.and_then(chrono::DateTime::from_timestamp_millis);
        obj.insert(
            "hold".into(),
            json!({"reason": "spend_limit", "since": since, "next_check": next_check,
                   "detail": "Dispatch waits until the tenant's spend limit leaves room for this operation."}),
        );
    }
    if let Some(since) = rec.capacity_hold {
        let next_check = rec.retry_at_ms.and_then(chrono::DateTime::from_timestamp_millis);
        obj.insert(
            "hold".into(),
            json!({"reason": "capacity", "since": since, "next_check": next_check,
                   "detail": "Every slot of the Genace account is taken by our jobs; dispatch POSTs once one is free."}),
        );
    }
    if let Some(queue) = queue_view(rec, None) {
        obj.insert("queue".into(), queue);
    }
    v
}

/// When the operation's job was seen to end, and when the operation was
/// delivered, erased, due by, or cancelled, as far as any of it happened.
fn marks(rec: &OperationRecord, obj: &mut serde_json::Map<String, Value>) {
    if let Some(d) = &rec.detection {
        obj.insert(
            "detection".into(),
            json!({
                "looks": d.looks,
                "first_running_at": d.first_running_at,
                "last_running_at": d.last_running_at,
                "ended_seen_at": d.ended_seen_at,
                "lag_bound_seconds": d.lag_bound_seconds(),
                "looked_at": d.looked_at,
            }),
        );
    }
    if let Some(at) = rec.delivered_at {
        obj.insert("delivered_at".into(), json!(at));
    }
    if let Some(erased) = &rec.outputs_erased {
        obj.insert("outputs_erased_at".into(), json!(erased.at));
        obj.insert("erased_objects".into(), json!(erased.objects));
        let count = erased.objects.len() as u64 + u64::from(erased.more_objects);
        obj.insert("erased_object_count".into(), json!(count));
    }
    if let Some(deadline) = rec.dispatch_deadline {
        obj.insert("dispatch_deadline".into(), json!(deadline));
    }
    if let Some(c) = &rec.cancellation {
        obj.insert(
            "cancellation".into(),
            json!({"at": c.at, "by": c.by, "reason": c.reason.as_str()}),
        );
    }
}

/// What an operation waits in, if anything: its reason, since when, and its
/// place in its tenant's order (1 is next; null when not counted).
pub fn queue_view(rec: &OperationRecord, position: Option<u32>) -> Option<Value> {
    let (reason, since) = rec.wait()?;
    Some(json!({"reason": reason.as_str(), "since": since, "position": position, "priority": rec.priority}))
}

/// What a UI shows of an unfinished operation's progress (none once it is
/// finished): when to look again, its place and expected start while it
/// waits, its expected end while it renders.
/// How many renders an estimate draws on is the account's business, not
/// a tenant's: an operator's view alone shows `samples`.
pub fn progress_view(p: &genace_stages::api::progress::Progress, operator: bool) -> Option<Value> {
    let next_look_at = p.next_look_at?;
    let queue = p.queue.as_ref().map(|q| {
        json!({
            "place": q.place,
            "ahead_in_account": q.ahead.map(|a| json!({"min": a.min, "max": a.max})),
            "expected_start": q.expected_start.map(|s| json!({"earliest": s.earliest, "latest": s.latest})),
        })
    });
    let end = p.expected_end.as_ref().map(|e| {
        let mut end = json!({"basis": e.basis.as_str(), "p50_at": e.p50_at, "p90_at": e.p90_at});
        if operator {
            end["samples"] = json!(e.samples);
        }
        end
    });
    Some(json!({"next_look_at": next_look_at, "queue": queue, "expected_end": end}))
}

/// Whole seconds from `now` until `at`, at least 1: the `Next-Look-In`
/// header.
pub fn seconds_until(at: chrono::DateTime<chrono::Utc>, now: chrono::DateTime<chrono::Utc>) -> i64 {
    let ms = (at - now).num_milliseconds();
    ((ms + 999) / 1000).max(1)
}

/// The hold a new intent's view announces when the tenant's spend limit
/// leaves no room for it now: dispatch has not waited yet.
pub fn expected_spend_hold() -> Value {
    json!({"reason": "spend_limit", "since": null, "next_check": null,
           "detail": "The tenant's spend limit leaves no room for this operation now; it is recorded and dispatch waits until credits are free."})
}

/// A tenant's webhook, or that it has none. The secret's value never
/// appears: only the name of the secret that signs.
pub fn webhook_view(tenant: &str, config: Option<&genace_core::webhook::WebhookConfig>) -> Value {
    match config {
        Some(c) => json!({
            "tenant_id": tenant,
            "configured": true,
            "url": c.url,
            "events": c.events,
            "secret_id": c.secret_id,
            "updated_at": c.updated_at,
            "updated_by": c.updated_by,
        }),
        None => json!({"tenant_id": tenant, "configured": false}),
    }
}

/// A tenant's credits, in credits (not thousandths).
pub fn credits_view(ledger: &TenantLedger) -> Value {
    json!({
        "tenant_id": ledger.tenant_id,
        "held": ledger.totals.held.credits(),
        "spent": ledger.totals.spent.credits(),
        "pending_refund": ledger.totals.pending_refund.credits(),
        "settled": ledger.totals.settled.credits(),
        "spend_limit": ledger.spend_limit.map(genace_core::ledger::Millicredits::credits),
        "available": ledger.headroom().map(|h| h.max(genace_core::ledger::Millicredits::ZERO).credits()),
    })
}

/// The Genace account's capacity, as an operator sees it.
pub fn capacity_view(report: &genace_stages::api::capacity::CapacityReport) -> Value {
    let tenants: Vec<Value> = report
        .tenants
        .iter()
        .map(|t| {
            json!({"tenant_id": t.tenant_id, "max_in_flight": t.max_in_flight, "in_flight": t.in_flight,
                   "waiting": t.waiting, "oldest_wait_since": t.oldest_wait_since})
        })
        .collect();
    let oldest = report.tenants.iter().filter_map(|t| t.oldest_wait_since).min();
    json!({
        "max_in_flight": report.max_in_flight,
        "configured_max_in_flight": report.configured_max_in_flight,
        "set_at_run_time": report.set_at_run_time,
        "effective_max_in_flight": report.effective_max_in_flight,
        "in_flight": report.in_flight,
        "waiting": report.waiting,
        "oldest_wait_since": oldest,
        "tenants": tenants,
        "tenants_complete": report.tenants_complete,
    })
}

/// The strong validator of an operation view: its version.
pub fn etag(rec: &OperationRecord) -> String {
    format!("\"{}\"", rec.version)
}

/// One open case as the case list shows it.
pub fn case_view(rec: &OperationRecord) -> Value {
    json!({
        "operation_id": rec.operation_id,
        "tenant_id": rec.tenant_id,
        "operation_key": rec.operation_key,
        "phase": rec.phase,
        "delivery_state": rec.delivery_state,
        "remote_job_id": rec.remote_job_id,
        "unsaved_job_ids": rec.unsaved_jobs,
        "trace_id": genace_core::trace::TraceId::of(&rec.operation_id).to_hex(),
        "reason": rec.case.as_ref().map(|c| c.reason),
        "opened_at": rec.case.as_ref().map(|c| c.opened_at),
        "evidence": rec.case.as_ref().map(|c| c.evidence.clone()),
        "runbook": rec.runbook(),
        "version": rec.version,
    })
}

/// An operation's trace for operators: its id, then either its spans in
/// causal order (each with its depth, its offset from the trace's first
/// start and its duration, in milliseconds, and its outcome or status) or
/// the link to where the trace is shown.
pub fn trace_view(
    operation_id: &str,
    trace_id: &genace_core::trace::TraceId,
    found: &genace_stages::ports::traces::Trace,
) -> Value {
    use genace_stages::ports::traces::Trace;
    let (source, link, spans) = match found {
        Trace::Spans(spans) => ("receiver", None, spans_view(spans)),
        Trace::Link(link) => ("xray", Some(link.clone()), Vec::new()),
        Trace::Unkept => ("none", None, Vec::new()),
    };
    serde_json::json!({
        "operation_id": operation_id,
        "trace_id": trace_id.to_hex(),
        "source": source,
        "link": link,
        "spans": spans,
    })
}

fn spans_view(spans: &[genace_trace::lines::SpanLine]) -> Vec<Value> {
    let first = spans.iter().map(|s| s.start_ns).min().unwrap_or_default();
    let ms = |ns: u128| (ns / 1_000) as f64 / 1_000.0;
    genace_trace::lines::in_order(spans)
        .into_iter()
        .map(|(depth, s)| {
            serde_json::json!({
                "span_id": s.span_id,
                "parent_span_id": s.parent_span_id,
                "name": s.name,
                "service": s.service,
                "depth": depth,
                "offset_ms": ms(s.start_ns - first),
                "duration_ms": ms(s.end_ns.saturating_sub(s.start_ns)),
                "outcome": s.attribute("outcome"),
                "status_code": s
                    .attribute("http.response.status_code")
                    .and_then(|code| code.parse::<u16>().ok()),
                "attributes": s.attributes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use genace_core::machine::{self, AcceptedJob, Input, Policy};

    fn prepared() -> OperationRecord {
        let intent = genace_core::domain::Intent::parse(
            &json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
            None,
        )
        .unwrap();
        let tenant = genace_core::domain::TenantId::parse("tenant-a").unwrap();
        OperationRecord::new_intent(
            &tenant,
            &intent,
            None,
            chrono::Utc::now(),
            chrono::Duration::seconds(60),
        )
    }

    #[test]
    fn the_view_shows_the_remote_job_and_the_open_case() {
        let now = chrono::Utc::now();
        let claimed = machine::transition(
            &prepared(),
            Input::ClaimDispatch { token: "tok", shard: 0 },
            now,
            &Policy::default(),
        )
        .unwrap();
        let uncertain = machine::transition(
            &claimed,
            Input::OutcomeUnknown {
                token: "tok",
                evidence: "timed out",
            },
            now,
            &Policy::default(),
        )
        .unwrap();
        let v = view(&uncertain);
        assert_eq!(v["phase"], "uncertain");
        assert_eq!(v["reconciliation_case"]["reason"], "unknown_submit_outcome");
        assert_eq!(v["reconciliation_case"]["evidence"], "timed out");
        assert!(v.get("claim").is_none(), "claim tokens stay private");

        let job = AcceptedJob {
            job_id: "J1".into(),
            state: Some("running".into()),
            model: None,
            created_at: None,
            held_credits: None,
        };
        let accepted = machine::transition(
            &claimed,
            Input::Accepted {
                token: "tok",
                job: &job,
            },
            now,
            &Policy::default(),
        )
        .unwrap();
        let v = view(&accepted);
        assert_eq!(v["phase"], "accepted");
        assert_eq!(v["remote_job_id"], "J1");
        assert_eq!(v["remote_state"], "running");
        assert!(v.get("reconciliation_case").is_none());
    }
}
