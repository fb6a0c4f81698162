//! Genace's protocol, as data: what a job-creating POST and a status read
//! can answer, read into [`SubmitOutcome`] and [`StatusOutcome`] by pure
//! functions, and the submission body an operation sends. No HTTP here: the
//! adapter hands over a status code, the `Retry-After` value and the body.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::domain::RemoteJobId;
use crate::record::{OperationRecord, OutputRef};

/// What Genace said when it accepted a job (a 202 with a non-empty `job_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct AcceptedJob {
    pub job_id: String,
    pub state: Option<String>,
    pub model: Option<String>,
    pub created_at: Option<String>,
    pub held_credits: Option<f64>,
}

/// Every way a job-creating POST can end. Exactly one applies.
#[derive(Debug, Clone, PartialEq)]
pub enum SubmitOutcome {
    /// A 202 with a non-empty string `job_id`. The job exists.
    Accepted { job: AcceptedJob, raw: String },
    /// A 502 whose `error.job_id` names a failed remote job.
    FailedWithJob { job_id: String, error: Value, raw: String },
    /// 400, 409 or 422: the request itself is wrong; nothing was created.
    Rejected { status: u16, detail: String },
    /// Any other 4xx (401, 402, 403, a 404/405 from a wrong path, ...): our
    /// account or deployment is wrong, not the intent. Nothing was created.
    AccountProblem { status: u16, detail: String },
    /// A 429: Genace did not process the request.
    RateLimited { retry_after: Option<Duration> },
    /// Anything else: a job may or may not exist.
    Unknown { evidence: String },
}

/// Longest response excerpt kept as evidence.
const EVIDENCE_LIMIT: usize = 2048;
/// Largest response body read from Genace. A longer answer to a POST is an
/// unknown outcome; a longer status answer says nothing about the job.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Most outputs one job may name; more makes the outputs unreadable.
pub const MAX_OUTPUTS: usize = 64;

fn excerpt(body: &str) -> String {
    if body.len() <= EVIDENCE_LIMIT {
        return body.to_owned();
    }
    let mut end = EVIDENCE_LIMIT;
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &body[..end])
}

fn non_empty_str(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

/// A job id as Genace named it: a string that parses as a [`RemoteJobId`].
/// `Err` carries why a present value is not usable; `Ok(None)` means absent.
fn job_id_of(v: Option<&Value>) -> Result<Option<RemoteJobId>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => RemoteJobId::parse(s).map(Some).map_err(|e| e.to_string()),
        Some(_) => Err("job_id is not a string".into()),
    }
}

/// A 202 whose body is JSON but holds a number no `f64` can represent (a
/// `held_credits` of `1e400`, say), read field by field: the job exists
/// whatever its credits say, so its id must not be lost to an unknown
/// outcome. Such credits read as `f64::MAX` (JSON has no infinity), which
/// the ledger refuses like any amount past its bound.
fn out_of_range_202(body: &str) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Loose {
        job_id: Option<Value>,
        state: Option<Value>,
        model: Option<Value>,
        created_at: Option<Value>,
        created: Option<Value>,
        held_credits: Option<serde::de::IgnoredAny>,
        credits_held: Option<serde::de::IgnoredAny>,
    }
    let l: Loose = serde_json::from_str(body).ok()?;
    let held = (l.held_credits.is_some() || l.credits_held.is_some()).then_some(f64::MAX);
    Some(json!({
        "job_id": l.job_id, "state": l.state, "model": l.model,
        "created_at": l.created_at, "created": l.created, "held_credits": held,
    }))
}

/// What precedes the excerpt of a Genace body that evidence quotes: the
/// text after it is Genace's, which may echo the tenant's request.
pub const QUOTED_BODY: &str = "; body: ";

/// Classifies a POST response. Pure, so every branch is unit-testable.
pub fn classify_submit(code: u16, retry_after: Option<&str>, body: &str, now: DateTime<Utc>) -> SubmitOutcome {
    let json: Option<Value> = serde_json::from_str(body)
        .ok()
        .or_else(|| (code == 202).then(|| out_of_range_202(body)).flatten());
    let unknown = |why: &str| SubmitOutcome::Unknown {
        evidence: format!("HTTP {code}: {why}{QUOTED_BODY}{}", excerpt(body)),
    };
    match code {
        202 => match json {
            None => unknown("202 with a body that is not JSON"),
            Some(v) => match job_id_of(v.get("job_id")) {
                Err(why) => unknown(&format!("202 with an unusable job_id ({why})")),
                Ok(None) => unknown("202 without a non-empty string job_id"),
                Ok(Some(job_id)) => SubmitOutcome::Accepted {
                    job: AcceptedJob {
                        job_id: job_id.into_string(),
                        state: non_empty_str(v.get("state")),
                        model: non_empty_str(v.get("model")),
                        created_at: non_empty_str(v.get("created_at")).or_else(|| non_empty_str(v.get("created"))),
                        held_credits: match v.get("held_credits").or_else(|| v.get("credits_held")) {
                            None | Some(Value::Null) => None,
                            // Present but not a number: nothing to believe.
                            Some(h) => Some(h.as_f64().unwrap_or(f64::NAN)),
                        },
                    },
                    raw: body.to_owned(),
                },
            },
        },
        502 => match json
            .as_ref()
            .and_then(|v| v.get("error"))
            .map(|e| (job_id_of(e.get("job_id")), e.clone()))
        {
            Some((Ok(Some(job_id)), error)) => SubmitOutcome::FailedWithJob {
                job_id: job_id.into_string(),
                error,
                raw: body.to_owned(),
            },
            Some((Err(why), _)) => unknown(&format!("502 with an unusable error.job_id ({why})")),
            _ => unknown("502 without error.job_id"),
        },
        429 => SubmitOutcome::RateLimited {
            retry_after: retry_after.and_then(|v| parse_retry_after(v, now)),
        },
        400 | 409 | 422 => SubmitOutcome::Rejected {
            status: code,
            detail: excerpt(body),
        },
        400..=499 => SubmitOutcome::AccountProblem {
            status: code,
            detail: excerpt(body),
        },
        300..=399 => unknown("a redirect is never followed for a job-creating POST"),
        _ => unknown("no job id in an unexpected status"),
    }
}

/// `Retry-After` as seconds or an HTTP date (counted from `now`).
fn parse_retry_after(raw: &str, now: DateTime<Utc>) -> Option<Duration> {
    let raw = raw.trim();
    if let Ok(secs) = raw.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(raw).ok()?;
    let secs = (when.timestamp() - now.timestamp()).max(0);
    Some(Duration::from_secs(secs as u64))
}

/// The submission body for an operation: the reviewed specification, flattened
/// the way Genace takes it, plus our operation id as a client reference that
/// an operator can search for during reconciliation.
pub fn submission_body(rec: &OperationRecord) -> Value {
    let spec = rec.specification_value();
    let mut body = Map::new();
    body.insert("media_type".into(), json!(rec.media_type));
    if let Value::Object(fields) = spec {
        for (k, v) in fields {
            if k == "parameters" {
                if let Value::Object(params) = v {
                    for (pk, pv) in params {
                        body.entry(pk).or_insert(pv);
                    }
                }
            } else {
                body.insert(k, v);
            }
        }
    }
    body.insert("client_reference".into(), json!(rec.operation_id));
    Value::Object(body)
}

/// How a job stands, in our terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderStatus {
    Running,
    Succeeded,
    Failed,
}

/// A status snapshot, normalized: Genace calls the id `id` here (and
/// `job_id` in a 202); both are read. Outputs are null until completion.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSnapshot {
    pub id: Option<String>,
    pub state: String,
    pub status: RenderStatus,
    pub outputs: Option<Vec<OutputRef>>,
    /// Why the `outputs` member could not be read, when it was present but
    /// unusable (not a list, too many entries, or entries without a URL).
    pub outputs_unreadable: Option<String>,
    /// The `client_reference` the job was created with, when Genace returns it.
    pub client_reference: Option<String>,
    pub error: Option<Value>,
}

/// Every way a status read can end.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusOutcome {
    Snapshot(JobSnapshot),
    /// Genace does not know this job id.
    NotFound,
    /// 429: too many reads; the next waits at least `retry_after` (when
    /// Genace said it) and says nothing about the job.
    RateLimited {
        retry_after: Option<Duration>,
    },
    /// Timeouts, 5xx and other answers that say nothing about the job.
    Transient {
        evidence: String,
    },
}

const SUCCESS_STATES: [&str; 2] = ["completed", "succeeded"];
const FAILURE_STATES: [&str; 3] = ["failed", "canceled", "cancelled"];

/// Longest output URL accepted.
const MAX_URL_LEN: usize = 8192;

/// Reads the `outputs` member: `Ok(None)` when absent or null, `Err` when it
/// is present but cannot be used as a whole. An entry without a URL makes the
/// list unreadable rather than silently shorter.
fn parse_outputs(v: Option<&Value>) -> Result<Option<Vec<OutputRef>>, String> {
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("outputs is not a list".into()),
    };
    if items.len() > MAX_OUTPUTS {
        return Err(format!("{} outputs, more than the {MAX_OUTPUTS} accepted", items.len()));
    }
    let url_ok = |u: &str| !u.is_empty() && u.len() <= MAX_URL_LEN;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(url) if url_ok(url) => Ok(OutputRef {
                url: url.clone(),
                content_type: None,
            }),
            Value::Object(o) => match o.get("url").and_then(Value::as_str).filter(|u| url_ok(u)) {
                Some(url) => Ok(OutputRef {
                    url: url.to_owned(),
                    content_type: non_empty_str(o.get("content_type"))
                        .or_else(|| non_empty_str(o.get("mime_type")))
                        .or_else(|| non_empty_str(o.get("contentType"))),
                }),
                None => Err(format!("output {i} has no usable url")),
            },
            _ => Err(format!("output {i} is neither a URL nor an object with a url")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Normalizes a status body. The one place that knows Genace's snapshot shape.
pub fn normalize_snapshot(v: &Value) -> Option<JobSnapshot> {
    let obj = v.as_object()?;
    let id = non_empty_str(obj.get("id")).or_else(|| non_empty_str(obj.get("job_id")));
    let error = obj.get("error").filter(|e| !e.is_null()).cloned();
    let state = non_empty_str(obj.get("state")).map(|s| s.to_ascii_lowercase());
    let status = match state.as_deref() {
        Some(s) if SUCCESS_STATES.contains(&s) => RenderStatus::Succeeded,
        Some(s) if FAILURE_STATES.contains(&s) => RenderStatus::Failed,
        None if error.is_some() => RenderStatus::Failed,
        _ => RenderStatus::Running,
    };
    let (outputs, outputs_unreadable) = match parse_outputs(obj.get("outputs")) {
        Ok(outputs) => (outputs, None),
        Err(why) => (None, Some(why)),
    };
    Some(JobSnapshot {
        id,
        state: state.unwrap_or_else(|| "unknown".into()),
        status,
        outputs,
        outputs_unreadable,
        client_reference: non_empty_str(obj.get("client_reference")),
        error,
    })
}

/// Classifies a status response.
pub fn classify_status(code: u16, body: &str) -> StatusOutcome {
    classify_status_with(code, None, body, Utc::now())
}

/// [`classify_status`] with the answer's `Retry-After` header, read at
/// `now` (seconds, or an HTTP date).
pub fn classify_status_with(code: u16, retry_after: Option<&str>, body: &str, now: DateTime<Utc>) -> StatusOutcome {
    match code {
        429 => StatusOutcome::RateLimited {
            retry_after: retry_after.and_then(|v| parse_retry_after(v, now)),
        },
        200 => match serde_json::from_str::<Value>(body)
            .ok()
            .as_ref()
            .and_then(normalize_snapshot)
        {
            Some(snapshot) => StatusOutcome::Snapshot(snapshot),
            None => StatusOutcome::Transient {
                evidence: format!("HTTP 200 with a body that is not a job snapshot: {}", excerpt(body)),
            },
        },
        404 => StatusOutcome::NotFound,
        _ => StatusOutcome::Transient {
            evidence: format!("HTTP {code}: {}", excerpt(body)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(code: u16, body: &str) -> SubmitOutcome {
        classify_submit(code, None, body, Utc::now())
    }

    #[test]
    fn a_202_needs_a_non_empty_string_job_id() {
        let ok = classify(
            202,
            r#"{"job_id":"J1","state":"running","model":"m","created_at":"t","held_credits":3,"extra":{}}"#,
        );
        match ok {
            SubmitOutcome::Accepted { job, .. } => {
                assert_eq!(job.job_id, "J1");
                assert_eq!(job.state.as_deref(), Some("running"));
                assert_eq!(job.held_credits, Some(3.0));
            }
            other => panic!("{other:?}"),
        }
        // Credits nobody can mean do not cost the job its id.
        for (body, held) in [
            (r#"{"job_id":"J2","held_credits":1e400,"extra":[1e999]}"#, f64::MAX),
            (r#"{"job_id":"J2","held_credits":-1e400}"#, f64::MAX),
            (r#"{"job_id":"J2","held_credits":-4}"#, -4.0),
            (r#"{"job_id":"J2","held_credits":"lots"}"#, f64::NAN),
        ] {
            match classify(202, body) {
                SubmitOutcome::Accepted { job, .. } => {
                    assert_eq!(job.job_id, "J2", "{body}");
                    let h = job.held_credits.unwrap();
                    assert!(h == held || (h.is_nan() && held.is_nan()), "{body}: {h}");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(matches!(
            classify(202, r#"{"job_id":"J3","held_credits":1e400"#),
            SubmitOutcome::Unknown { .. }
        ));
        for body in [
            r#"{"state":"queued"}"#,
            r#"{"job_id":""}"#,
            r#"{"job_id":42}"#,
            "accepted",
            "",
        ] {
            assert!(matches!(classify(202, body), SubmitOutcome::Unknown { .. }), "{body}");
        }
    }

    #[test]
    fn a_502_with_a_job_id_is_a_failed_job_and_without_one_is_unknown() {
        assert!(matches!(
            classify(502, r#"{"error":{"code":"provider_failed","job_id":"J2"}}"#),
            SubmitOutcome::FailedWithJob { ref job_id, .. } if job_id == "J2"
        ));
        for body in [
            r#"{"error":{"code":"x"}}"#,
            "<html>bad gateway</html>",
            r#"{"job_id":"J2"}"#,
        ] {
            assert!(matches!(classify(502, body), SubmitOutcome::Unknown { .. }), "{body}");
        }
    }

    #[test]
    fn only_400_409_422_are_rejections_and_account_refusals_are_held() {
        for code in [400, 409, 422] {
            assert!(matches!(classify(code, "{}"), SubmitOutcome::Rejected { status, .. } if status == code));
        }
        for code in [401, 402, 403, 404, 405] {
            assert!(
                matches!(classify(code, "{}"), SubmitOutcome::AccountProblem { status, .. } if status == code),
                "{code}"
            );
        }
        assert_eq!(
            classify_submit(429, Some("7"), "", Utc::now()),
            SubmitOutcome::RateLimited {
                retry_after: Some(Duration::from_secs(7))
            }
        );
        assert_eq!(classify(429, ""), SubmitOutcome::RateLimited { retry_after: None });
    }

    #[test]
    fn server_errors_and_oddities_are_unknown() {
        for code in [500, 503, 504, 200, 201, 301] {
            assert!(matches!(classify(code, "{}"), SubmitOutcome::Unknown { .. }), "{code}");
        }
    }

    #[test]
    fn snapshots_are_normalized() {
        let running =
            normalize_snapshot(&json!({"id": "J", "state": "Running", "outputs": null, "error": null})).unwrap();
        assert_eq!(running.status, RenderStatus::Running);
        assert_eq!(running.state, "running");
        assert_eq!(running.outputs, None);
        assert_eq!(running.id.as_deref(), Some("J"));
        let by_job_id = normalize_snapshot(&json!({"job_id": "K", "state": "queued"})).unwrap();
        assert_eq!(by_job_id.id.as_deref(), Some("K"));
        let done = normalize_snapshot(&json!({"id": "J", "state": "succeeded", "outputs": [
            {"url": "https://cdn/a.mp4", "content_type": "video/mp4"}, "https://cdn/b.png"
        ]}))
        .unwrap();
        assert_eq!(done.status, RenderStatus::Succeeded);
        let outputs = done.outputs.unwrap();
        assert_eq!(outputs.len(), 2);
        assert_eq!(outputs[0].content_type.as_deref(), Some("video/mp4"));
        assert_eq!(outputs[1].url, "https://cdn/b.png");
        for failed in [
            json!({"id": "J", "state": "failed"}),
            json!({"id": "J", "state": "cancelled"}),
            json!({"id": "J", "error": {"code": "x"}}),
        ] {
            assert_eq!(
                normalize_snapshot(&failed).unwrap().status,
                RenderStatus::Failed,
                "{failed}"
            );
        }
        assert_eq!(
            normalize_snapshot(&json!({"id": "J", "state": "mystery"}))
                .unwrap()
                .status,
            RenderStatus::Running
        );
    }

    #[test]
    fn unusable_outputs_are_reported_not_dropped() {
        let read =
            |outputs: Value| normalize_snapshot(&json!({"id": "J", "state": "completed", "outputs": outputs})).unwrap();
        for bad in [
            json!(["https://cdn/a.mp4", 7]),
            json!([{"name": "no url"}]),
            json!("https://cdn/a.mp4"),
            json!([""]),
            Value::Array(
                (0..=MAX_OUTPUTS)
                    .map(|i| json!(format!("https://cdn/{i}.png")))
                    .collect(),
            ),
        ] {
            let snap = read(bad.clone());
            assert_eq!(snap.outputs, None, "{bad}");
            assert!(snap.outputs_unreadable.is_some(), "{bad}");
        }
        let ok = read(Value::Array(
            (0..MAX_OUTPUTS)
                .map(|i| json!(format!("https://cdn/{i}.png")))
                .collect(),
        ));
        assert_eq!(ok.outputs.map(|o| o.len()), Some(MAX_OUTPUTS));
        assert_eq!(read(Value::Null).outputs_unreadable, None);
    }

    #[test]
    fn job_ids_are_bounded_and_redirects_are_unknown() {
        let long = "j".repeat(RemoteJobId::MAX_LEN + 1);
        for body in [
            format!(r#"{{"job_id":"{long}"}}"#),
            r#"{"job_id":"has space"}"#.to_owned(),
            r#"{"job_id":"tab	inside"}"#.to_owned(),
        ] {
            assert!(matches!(classify(202, &body), SubmitOutcome::Unknown { .. }), "{body}");
        }
        assert!(matches!(
            classify(502, &format!(r#"{{"error":{{"job_id":"{long}"}}}}"#)),
            SubmitOutcome::Unknown { .. }
        ));
        let fits = "j".repeat(RemoteJobId::MAX_LEN);
        assert!(matches!(
            classify(202, &format!(r#"{{"job_id":"{fits}"}}"#)),
            SubmitOutcome::Accepted { .. }
        ));
        for code in [301, 302, 303, 307, 308] {
            assert!(
                matches!(classify(code, r#"{"job_id":"J"}"#), SubmitOutcome::Unknown { .. }),
                "{code}"
            );
        }
    }

    #[test]
    fn status_reads_are_classified() {
        assert!(matches!(
            classify_status(200, r#"{"id":"J","state":"queued"}"#),
            StatusOutcome::Snapshot(_)
        ));
        assert_eq!(classify_status(404, ""), StatusOutcome::NotFound);
        for (code, body) in [(500, "x"), (503, ""), (200, "not json"), (401, "no")] {
            assert!(matches!(classify_status(code, body), StatusOutcome::Transient { .. }));
        }
        for (header, wait) in [(Some("7"), Some(Duration::from_secs(7))), (None, None)] {
            assert_eq!(
                classify_status_with(429, header, "slow down", Utc::now()),
                StatusOutcome::RateLimited { retry_after: wait }
            );
        }
    }

    #[test]
    fn evidence_is_bounded() {
        let SubmitOutcome::Unknown { evidence } = classify(500, &"é".repeat(5000)) else {
            panic!()
        };
        assert!(evidence.len() < EVIDENCE_LIMIT + 100);
    }
}
