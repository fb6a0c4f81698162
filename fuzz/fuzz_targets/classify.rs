//! Genace responses: (status, Retry-After, body) -> outcome. Never panics;
//! `Accepted` only for a 202 whose body has a usable string `job_id`, and
//! `FailedWithJob` only for a 502 whose `error.job_id` is one.
#![no_main]

use genace_core::domain::RemoteJobId;
use genace_core::remote::{StatusOutcome, SubmitOutcome, classify_status, classify_submit, normalize_snapshot};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let code = 100 + u16::from_le_bytes([data[0], data[1]]) % 500;
    let rest = &data[3..];
    let split = (data[2] as usize).min(rest.len());
    let (retry, body) = rest.split_at(if data[2] % 2 == 0 { split.min(16) } else { 0 });
    // A header value is visible ASCII; anything else never reaches the classifier.
    let retry = std::str::from_utf8(retry).ok().filter(|r| !r.is_empty() && r.bytes().all(|b| (0x20..0x7f).contains(&b)));
    let body = String::from_utf8_lossy(body);
    let parsed: Option<Value> = serde_json::from_str(&body).ok();
    match classify_submit(code, retry, &body, chrono::Utc::now()) {
        SubmitOutcome::Accepted { job, .. } => {
            assert_eq!(code, 202);
            assert!(!job.job_id.is_empty());
            assert!(RemoteJobId::parse(&job.job_id).is_ok());
            let sent = parsed.as_ref().and_then(|v| v.get("job_id")).and_then(Value::as_str);
            assert_eq!(sent, Some(job.job_id.as_str()), "the id is the body's own");
        }
        SubmitOutcome::FailedWithJob { job_id, .. } => {
            assert_eq!(code, 502);
            assert!(RemoteJobId::parse(&job_id).is_ok());
        }
        SubmitOutcome::Rejected { status, .. } => assert!([400, 409, 422].contains(&status)),
        SubmitOutcome::AccountProblem { status, .. } => {
            assert!((400..500).contains(&status) && ![400, 409, 422, 429].contains(&status))
        }
        SubmitOutcome::RateLimited { .. } => assert_eq!(code, 429),
        SubmitOutcome::Unknown { evidence } => assert!(evidence.len() < 4096),
    }
    if let StatusOutcome::Snapshot(snap) = classify_status(code, &body) {
        assert_eq!(code, 200);
        if let Some(outputs) = &snap.outputs {
            assert!(outputs.len() <= genace_core::remote::MAX_OUTPUTS);
            assert!(outputs.iter().all(|o| !o.url.is_empty()));
        }
        assert!(snap.outputs.is_none() || snap.outputs_unreadable.is_none());
    }
    if let Some(v) = &parsed {
        let _ = normalize_snapshot(v);
    }
});
