//! Lifecycle events: what a committed change of an operation record tells
//! applications. [`derive`] compares the record before and after one write
//! (a stream record's old and new image) and names what happened; it is the
//! only place events are made, so an event exists iff its change was
//! committed.
//!
//! Consumers deduplicate on [`LifecycleEvent::id`]: the operation id, its
//! incarnation (the record's creation time: a key re-used after its record
//! expired gets the same operation id and versions again), the version the
//! change wrote, and the type (one write can announce two things, a case
//! resolved and a job accepted).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::record::{CaseReason, DeliveryState, OperationRecord, Phase, ReconciliationCase, WaitReason};

/// The `source` of every event on the bus.
pub const SOURCE: &str = "genace.operations";

/// The most events one committed change announces (for example a case
/// resolved, another opened and the hold it means). The pipe's batch size
/// is chosen so a batch's events fit one `PutEvents` (ten entries); the
/// in-memory store asserts this bound on every write the simulator makes.
pub const MAX_EVENTS_PER_CHANGE: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    #[serde(rename = "operation.accepted")]
    Accepted,
    #[serde(rename = "operation.rendered")]
    Rendered,
    #[serde(rename = "operation.delivered")]
    Delivered,
    #[serde(rename = "operation.render_failed")]
    RenderFailed,
    #[serde(rename = "operation.rejected")]
    Rejected,
    #[serde(rename = "operation.case_opened")]
    CaseOpened,
    #[serde(rename = "operation.case_resolved")]
    CaseResolved,
    #[serde(rename = "operation.held")]
    Held,
    #[serde(rename = "operation.job_attached")]
    JobAttached,
    #[serde(rename = "operation.queued")]
    Queued,
    #[serde(rename = "operation.cancelled")]
    Cancelled,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::Accepted,
        Kind::Rendered,
        Kind::Delivered,
        Kind::RenderFailed,
        Kind::Rejected,
        Kind::CaseOpened,
        Kind::CaseResolved,
        Kind::Held,
        Kind::JobAttached,
        Kind::Queued,
        Kind::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Accepted => "operation.accepted",
            Kind::Rendered => "operation.rendered",
            Kind::Delivered => "operation.delivered",
            Kind::RenderFailed => "operation.render_failed",
            Kind::Rejected => "operation.rejected",
            Kind::CaseOpened => "operation.case_opened",
            Kind::CaseResolved => "operation.case_resolved",
            Kind::Held => "operation.held",
            Kind::JobAttached => "operation.job_attached",
            Kind::Queued => "operation.queued",
            Kind::Cancelled => "operation.cancelled",
        }
    }
}

/// One event, as put on the bus (its `detail`) and as the local stack
/// writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleEvent {
    /// `<operation_id>:<incarnation>:<version>:<type>`: the deduplication
    /// key. The incarnation is the record's creation time in epoch
    /// milliseconds, so a key re-used after retention gets new ids.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// When the change was committed (the record's `updated_at`).
    pub time: DateTime<Utc>,
    pub tenant_id: String,
    pub operation_id: String,
    pub operation_key: String,
    pub phase: Phase,
    pub delivery_state: DeliveryState,
    /// The record version the change wrote.
    pub version: u64,
    /// What is particular to the type; see docs/events.md.
    pub data: Map<String, Value>,
    /// While the operation is unfinished: when its client should read it
    /// again ([`crate::progress::next_look`] at the commit time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_look_at: Option<DateTime<Utc>>,
    /// Set by the events pipe when the tenant has a receiver that takes
    /// the event: the bus's webhook rule queues only these. Receivers'
    /// POSTs never carry it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub webhooks: bool,
    /// The operation's trace (W3C trace id, hex), for the stages that
    /// take the event from the bus: the stream, the pipe and the bus carry
    /// no trace context of their own. On the bus only; receivers' POSTs
    /// never carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The operation has or had a reconciliation case (or an operator's
    /// decision), so its trace is kept whatever the sampling rate: the
    /// webhook stage keeps its spans too. On the bus only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trace_kept: bool,
    /// The events pipe's seal over the event ([`SEAL_MEMBER`]), which the
    /// webhook stage checks: on the bus and the webhook queue only;
    /// receivers' POSTs never carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// The member of a bus event's `detail` holding [`LifecycleEvent::mac`].
pub const SEAL_MEMBER: &str = "mac";

/// The member of a bus event's `detail` that [`LifecycleEvent::webhooks`]
/// sets, which the webhook rule matches.
pub const WEBHOOKS_MEMBER: &str = "webhooks";

/// The member of a bus event's `detail` holding [`LifecycleEvent::trace_id`].
pub const TRACE_MEMBER: &str = "trace_id";

/// The member of a bus event's `detail` holding [`LifecycleEvent::trace_kept`].
pub const TRACE_KEPT_MEMBER: &str = "trace_kept";

/// The members of a bus event's `detail` that are the bus's, not the
/// event's: taken out before the event is sent to a receiver or kept.
pub const BUS_MEMBERS: [&str; 3] = [WEBHOOKS_MEMBER, TRACE_MEMBER, TRACE_KEPT_MEMBER];

/// Where delivered objects live, for `operation.delivered`.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub bucket: Option<String>,
}

fn event(rec: &OperationRecord, kind: Kind, data: Value) -> LifecycleEvent {
    LifecycleEvent {
        id: format!(
            "{}:{}:{}:{}",
            rec.operation_id,
            rec.created_at.timestamp_millis(),
            rec.version,
            kind.as_str()
        ),
        kind,
        time: rec.updated_at,
        tenant_id: rec.tenant_id.as_str().to_owned(),
        operation_id: rec.operation_id.as_str().to_owned(),
        operation_key: rec.operation_key.clone(),
        phase: rec.phase,
        delivery_state: rec.delivery_state,
        version: rec.version,
        data: match data {
            Value::Object(m) => m,
            _ => Map::new(),
        },
        next_look_at: crate::progress::next_look(rec, crate::progress::LookHints::default(), rec.updated_at),
        webhooks: false,
        trace_id: Some(crate::trace::TraceId::of(&rec.operation_id).to_hex()),
        trace_kept: false,
        mac: None,
    }
}

fn same_case(a: Option<&ReconciliationCase>, b: Option<&ReconciliationCase>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.reason == b.reason && a.opened_at == b.opened_at,
        (None, None) => true,
        _ => false,
    }
}

fn retry_until(rec: &OperationRecord) -> Value {
    rec.retry_at_ms
        .and_then(DateTime::from_timestamp_millis)
        .map_or(Value::Null, |t| json!(t))
}

/// The events one committed write announces, in the order they happened:
/// a case closing before what closing it led to, the phase change, the
/// delivery, a job id saved without a phase change, a case opening and the
/// hold it means, a spend-limit wait.
pub fn derive(old: Option<&OperationRecord>, new: &OperationRecord, ctx: &Context) -> Vec<LifecycleEvent> {
    let Some(old) = old else {
        return Vec::new();
    };
    if old.version == new.version {
        return Vec::new();
    }
    // Events reach the tenant: its view of both records.
    let (old, new) = (&old.for_tenant(), &new.for_tenant());
    let case_changed = !same_case(old.case.as_ref(), new.case.as_ref());
    let mut out = Vec::new();
    if let (true, Some(closed)) = (case_changed, &old.case) {
        out.push(case_resolved(old, new, closed));
    }
    out.extend(phase_event(old, new));
    if old.delivery_state != DeliveryState::Delivered && new.delivery_state == DeliveryState::Delivered {
        out.push(delivered(new, ctx));
    }
    out.extend(job_attached(old, new));
    if let (true, Some(opened)) = (case_changed, &new.case) {
        out.push(event(
            new,
            Kind::CaseOpened,
            json!({"reason": opened.reason.as_str(), "opened_at": opened.opened_at, "evidence": opened.evidence}),
        ));
        if matches!(opened.reason, CaseReason::AccountProblem | CaseReason::RateLimited) {
            out.push(event(
                new,
                Kind::Held,
                json!({"reason": opened.reason.as_str(), "until": retry_until(new)}),
            ));
        }
    }
    // Waiting, not held: the operation is queued and dispatch goes on by itself.
    let queued = |reason: &str, since| {
        event(
            new,
            Kind::Queued,
            json!({"reason": reason, "since": since, "priority": new.priority, "until": retry_until(new)}),
        )
    };
    if let (None, Some(since)) = (old.spend_hold, new.spend_hold) {
        out.push(queued(WaitReason::SpendLimit.as_str(), since));
    }
    if let (None, Some(since)) = (old.capacity_hold, new.capacity_hold) {
        out.push(queued(WaitReason::Capacity.as_str(), since));
    }
    // A case, now or before (an operator's decision closed one), keeps the
    // operation's trace: the events say so to the stage that takes them.
    let kept = old.case.is_some() || new.case.is_some() || !new.audit.is_empty();
    for e in &mut out {
        e.trace_kept = kept;
    }
    out
}

/// A case closed, with the operator's decision when one closed it.
fn case_resolved(old: &OperationRecord, new: &OperationRecord, closed: &ReconciliationCase) -> LifecycleEvent {
    let decision = (new.audit.len() > old.audit.len())
        .then(|| new.audit.last())
        .flatten()
        .map_or(
            Value::Null,
            |a| json!({"action": a.action, "actor": a.actor, "reason": a.reason, "at": a.at}),
        );
    event(
        new,
        Kind::CaseResolved,
        json!({"reason": closed.reason.as_str(), "opened_at": closed.opened_at, "decision": decision}),
    )
}

/// The event a phase change announces, if any.
fn phase_event(old: &OperationRecord, new: &OperationRecord) -> Option<LifecycleEvent> {
    if old.phase == new.phase {
        return None;
    }
    Some(match new.phase {
        Phase::Accepted => event(
            new,
            Kind::Accepted,
            json!({"remote_job_id": new.remote_job_id, "held_credits": new.held_credits}),
        ),
        Phase::Rendered => event(new, Kind::Rendered, json!({"remote_job_id": new.remote_job_id})),
        Phase::RenderFailed => event(
            new,
            Kind::RenderFailed,
            json!({"remote_job_id": new.remote_job_id, "error": new.last_error}),
        ),
        Phase::Rejected => event(new, Kind::Rejected, json!({"error": new.last_error})),
        Phase::Cancelled => {
            let c = new.cancellation.as_ref();
            event(
                new,
                Kind::Cancelled,
                json!({"reason": c.map(|c| c.reason.as_str()), "by": c.map(|c| &c.by), "at": c.map(|c| c.at)}),
            )
        }
        _ => return None,
    })
}

/// Every output stored and verified: the objects and their digests.
fn delivered(new: &OperationRecord, ctx: &Context) -> LifecycleEvent {
    let objects: Vec<Value> = new
        .delivered_objects
        .iter()
        .map(|o| json!({"key": o.key, "bytes": o.bytes, "sha256": o.sha256, "content_type": o.content_type}))
        .collect();
    event(new, Kind::Delivered, json!({"bucket": ctx.bucket, "objects": objects}))
}

/// A job id saved without a phase change (an operator attached another job
/// to an accepted operation, or a job to an abandoned one): the only way
/// applications learn the new id.
fn job_attached(old: &OperationRecord, new: &OperationRecord) -> Option<LifecycleEvent> {
    let accepted_now = old.phase != new.phase && new.phase == Phase::Accepted;
    let observable = matches!(new.phase, Phase::Accepted | Phase::Abandoned);
    (!accepted_now && observable && new.remote_job_id.is_some() && old.remote_job_id != new.remote_job_id).then(|| {
        event(
            new,
            Kind::JobAttached,
            json!({"remote_job_id": new.remote_job_id, "previous_remote_job_id": old.remote_job_id}),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{DeliveredObject, sample_prepared};

    fn step(rec: &OperationRecord, f: impl FnOnce(&mut OperationRecord)) -> OperationRecord {
        let mut next = rec.clone();
        f(&mut next);
        next.version = rec.version + 1;
        next
    }

    fn kinds(events: &[LifecycleEvent]) -> Vec<Kind> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn a_new_intent_and_an_unchanged_version_announce_nothing() {
        let r = sample_prepared(Utc::now());
        assert!(derive(None, &r, &Context::default()).is_empty());
        assert!(derive(Some(&r), &r, &Context::default()).is_empty());
    }

    #[test]
    fn phase_changes_name_their_event_and_carry_the_envelope() {
        let r = sample_prepared(Utc::now());
        let accepted = step(&r, |n| {
            n.phase = Phase::Accepted;
            n.remote_job_id = Some("J1".into());
            n.held_credits = Some(3.0);
        });
        let events = derive(Some(&r), &accepted, &Context::default());
        assert_eq!(kinds(&events), [Kind::Accepted]);
        let e = &events[0];
        assert_eq!(
            e.id,
            format!(
                "{}:{}:{}:operation.accepted",
                r.operation_id,
                r.created_at.timestamp_millis(),
                r.version + 1
            )
        );
        assert_eq!((e.tenant_id.as_str(), e.operation_key.as_str()), ("t", "k"));
        let trace = crate::trace::TraceId::of(&r.operation_id).to_hex();
        assert_eq!(e.trace_id.as_deref(), Some(trace.as_str()), "the bus carries the trace");
        assert_eq!(serde_json::to_value(e).unwrap()[TRACE_MEMBER], trace);
        assert!(!e.trace_kept, "no case: the sampling decides");
        assert_eq!(e.data["remote_job_id"], "J1");
        assert_eq!(e.data["held_credits"], 3.0);
        let rendered = step(&accepted, |n| n.phase = Phase::Rendered);
        assert_eq!(
            kinds(&derive(Some(&accepted), &rendered, &Context::default())),
            [Kind::Rendered]
        );
        let failed = step(&accepted, |n| n.phase = Phase::RenderFailed);
        assert_eq!(
            kinds(&derive(Some(&accepted), &failed, &Context::default())),
            [Kind::RenderFailed]
        );
        let rejected = step(&r, |n| n.phase = Phase::Rejected);
        assert_eq!(
            kinds(&derive(Some(&r), &rejected, &Context::default())),
            [Kind::Rejected]
        );
    }

    #[test]
    fn delivery_names_the_objects_and_their_digests() {
        let mut r = sample_prepared(Utc::now());
        r.phase = Phase::Rendered;
        let done = step(&r, |n| {
            n.delivery_state = DeliveryState::Delivered;
            n.delivered_objects = vec![DeliveredObject {
                key: "outputs/t/x/0".into(),
                bytes: 5,
                sha256: "ab".into(),
                content_type: "video/mp4".into(),
            }];
        });
        let ctx = Context {
            bucket: Some("b".into()),
        };
        let events = derive(Some(&r), &done, &ctx);
        assert_eq!(kinds(&events), [Kind::Delivered]);
        assert_eq!(events[0].data["bucket"], "b");
        assert_eq!(events[0].data["objects"][0]["sha256"], "ab");
        assert_eq!(events[0].data["objects"][0]["key"], "outputs/t/x/0");
    }

    #[test]
    fn cases_open_and_resolve_with_their_reasons() {
        let now = Utc::now();
        let r = sample_prepared(now);
        let case = ReconciliationCase {
            reason: CaseReason::UnknownSubmitOutcome,
            opened_at: now,
            evidence: "timeout".into(),
        };
        let uncertain = step(&r, |n| {
            n.phase = Phase::Uncertain;
            n.case = Some(case.clone());
        });
        let opened = derive(Some(&r), &uncertain, &Context::default());
        assert_eq!(kinds(&opened), [Kind::CaseOpened]);
        assert_eq!(opened[0].data["reason"], "unknown_submit_outcome");
        assert!(opened[0].trace_kept, "a case keeps the trace, on the bus too");
        let attached = step(&uncertain, |n| {
            n.phase = Phase::Accepted;
            n.case = None;
            n.audit.push(crate::record::AuditEntry {
                actor: "ops".into(),
                at: now,
                action: "attach_remote_job".into(),
                reason: "found it".into(),
                job_id: Some("J".into()),
            });
        });
        let events = derive(Some(&uncertain), &attached, &Context::default());
        assert_eq!(kinds(&events), [Kind::CaseResolved, Kind::Accepted]);
        assert_eq!(events[0].data["reason"], "unknown_submit_outcome");
        assert_eq!(events[0].data["decision"]["action"], "attach_remote_job");
        assert_eq!(events[0].data["decision"]["reason"], "found it");
        // Events reach the tenant: the operator under a pseudonym.
        assert_eq!(events[0].data["decision"]["actor"], "operator-1");
    }

    #[test]
    fn account_problems_and_the_spend_limit_hold_the_operation() {
        let now = Utc::now();
        let r = sample_prepared(now);
        let held = step(&r, |n| {
            n.case = Some(ReconciliationCase {
                reason: CaseReason::AccountProblem,
                opened_at: now,
                evidence: "402".into(),
            })
        });
        let events = derive(Some(&r), &held, &Context::default());
        assert_eq!(kinds(&events), [Kind::CaseOpened, Kind::Held]);
        assert_eq!(events[1].data["reason"], "account_problem");
        let waiting = step(&r, |n| {
            n.spend_hold = Some(now);
            n.retry_at_ms = Some(now.timestamp_millis() + 30_000);
        });
        let events = derive(Some(&r), &waiting, &Context::default());
        assert_eq!(kinds(&events), [Kind::Queued]);
        assert_eq!(events[0].data["reason"], "spend_limit");
        assert_eq!(events[0].data["since"], json!(now));
        assert_eq!(events[0].data["priority"], "interactive");
        // Waiting for a slot instead: queued again, with that reason.
        let for_a_slot = step(&waiting, |n| {
            n.spend_hold = None;
            n.capacity_hold = Some(now);
            n.retry_at_ms = None;
        });
        let events = derive(Some(&waiting), &for_a_slot, &Context::default());
        assert_eq!(kinds(&events), [Kind::Queued]);
        assert_eq!(
            (&events[0].data["reason"], &events[0].data["until"]),
            (&json!("capacity"), &Value::Null)
        );
        // A second look that still finds no room announces nothing new.
        let again = step(&waiting, |n| n.retry_at_ms = Some(now.timestamp_millis() + 60_000));
        assert!(derive(Some(&waiting), &again, &Context::default()).is_empty());
    }

    #[test]
    fn the_type_names_round_trip() {
        for k in Kind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }

    /// Found by review: a key re-used after its record expired gets the
    /// same operation id and versions, and its events were dropped as
    /// duplicates by receivers.
    #[test]
    fn a_new_incarnation_of_an_operation_gets_new_event_ids() {
        let first = sample_prepared(Utc::now());
        let later = sample_prepared(first.created_at + chrono::Duration::days(31));
        assert_eq!(first.operation_id, later.operation_id);
        let accept = |r: &OperationRecord| {
            let next = step(r, |n| {
                n.phase = Phase::Accepted;
                n.remote_job_id = Some("J".into());
            });
            derive(Some(r), &next, &Context::default())[0].id.clone()
        };
        assert_ne!(accept(&first), accept(&later));
    }

    #[test]
    fn attaching_another_job_to_an_accepted_operation_announces_the_new_id() {
        let now = Utc::now();
        let mut accepted = sample_prepared(now);
        accepted.phase = Phase::Accepted;
        accepted.remote_job_id = Some("J1".into());
        accepted.case = Some(ReconciliationCase {
            reason: CaseReason::RemoteJobMissing,
            opened_at: now,
            evidence: "404".into(),
        });
        let attached = step(&accepted, |n| {
            n.remote_job_id = Some("J2".into());
            n.case = None;
        });
        let events = derive(Some(&accepted), &attached, &Context::default());
        assert_eq!(kinds(&events), [Kind::CaseResolved, Kind::JobAttached]);
        assert_eq!(events[1].data["remote_job_id"], "J2");
        assert_eq!(events[1].data["previous_remote_job_id"], "J1");
        // The first job id comes with operation.accepted, not twice.
        let prepared = sample_prepared(now);
        let first = step(&prepared, |n| {
            n.phase = Phase::Accepted;
            n.remote_job_id = Some("J1".into());
        });
        assert_eq!(
            kinds(&derive(Some(&prepared), &first, &Context::default())),
            [Kind::Accepted]
        );
    }
}
