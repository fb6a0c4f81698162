//! An operator's resolution of an operation that waits for a person:
//! `{"action", "reason", "job_id"}`.

use serde_json::Value;

use crate::domain::{InvalidInput, RemoteJobId, is_blank, members};
use crate::machine::Resolution;

/// Longest reason an operator may give for a resolution, in characters.
pub const MAX_REASON_CHARS: usize = 512;

/// What an operator decided, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolutionRequest {
    pub resolution: Resolution,
    /// The operator's reason, trimmed; never blank.
    pub reason: String,
}

impl ResolutionRequest {
    /// Parses a resolution. `reason` is required; `job_id` is required to
    /// attach a job, and wherever it is given it must be a job id: a
    /// number or a blank one is refused, never ignored.
    pub fn parse(body: &Value) -> Result<Self, InvalidInput> {
        let obj = members(body, "body", &["action", "reason", "job_id"])?;
        let text = |name: &str| {
            obj.get(name)
                .and_then(Value::as_str)
                .filter(|s| !is_blank(s))
                .map(str::trim)
        };
        let reason = text("reason").ok_or_else(|| InvalidInput::new("reason", "is required"))?;
        if reason.chars().count() > MAX_REASON_CHARS {
            return Err(InvalidInput::new(
                "reason",
                format!("must be at most {MAX_REASON_CHARS} characters"),
            ));
        }
        let job_id = match obj.get("job_id") {
            None => None,
            Some(Value::String(raw)) => Some(RemoteJobId::parse(raw)?),
            Some(_) => return Err(InvalidInput::new("job_id", "must be a string")),
        };
        // The action is one of the names, exactly: the OpenAPI document's enum.
        let resolution = match obj.get("action").and_then(Value::as_str) {
            Some("attach_remote_job") => Resolution::AttachRemoteJob {
                job_id: job_id
                    .ok_or_else(|| InvalidInput::new("job_id", "is required to attach a job"))?
                    .into_string(),
            },
            Some("confirm_not_created") => Resolution::ConfirmNotCreated,
            Some("release_hold") => Resolution::ReleaseHold,
            Some("mark_settled") => Resolution::MarkSettled,
            Some("redrive_delivery") => Resolution::RedriveDelivery,
            Some("abandon") => Resolution::Abandon,
            _ => {
                return Err(InvalidInput::new(
                    "action",
                    "must be attach_remote_job, confirm_not_created, release_hold, mark_settled, redrive_delivery or abandon",
                ));
            }
        };
        Ok(Self {
            resolution,
            reason: reason.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(body: Value) -> String {
        ResolutionRequest::parse(&body).unwrap_err().field
    }

    #[test]
    fn a_resolution_parses_or_names_its_bad_field() {
        let attach = ResolutionRequest::parse(
            &json!({"action": "attach_remote_job", "reason": " found it ", "job_id": "job-1"}),
        )
        .unwrap();
        assert_eq!(
            attach.resolution,
            Resolution::AttachRemoteJob { job_id: "job-1".into() }
        );
        assert_eq!(attach.reason, "found it");
        assert_eq!(field(json!({"action": "abandon"})), "reason");
        assert_eq!(field(json!({"action": "abandon", "reason": "  "})), "reason");
        assert_eq!(field(json!({"action": "abandon", "reason": "x".repeat(513)})), "reason");
        assert_eq!(field(json!({"action": "attach_remote_job", "reason": "r"})), "job_id");
        assert_eq!(
            field(json!({"action": "abandon", "reason": "r", "job_id": 7})),
            "job_id"
        );
        assert_eq!(
            field(json!({"action": "abandon", "reason": "r", "job_id": " "})),
            "job_id"
        );
        assert_eq!(field(json!({"action": "explode", "reason": "r"})), "action");
        assert_eq!(
            field(json!({"action": "abandon", "reason": "r", "actor": "me"})),
            "actor"
        );
        assert_eq!(field(json!(["abandon"])), "body");
        assert_eq!(field(json!({"action": " abandon ", "reason": "r"})), "action");
        assert_eq!(field(json!({"action": 3, "reason": "r"})), "action");
        assert_eq!(
            field(json!({"action": "abandon", "reason": "r", "job_id": null})),
            "job_id"
        );
    }

    #[test]
    fn every_action_names_its_resolution() {
        for (action, resolution) in [
            ("confirm_not_created", Resolution::ConfirmNotCreated),
            ("release_hold", Resolution::ReleaseHold),
            ("mark_settled", Resolution::MarkSettled),
            ("redrive_delivery", Resolution::RedriveDelivery),
            ("abandon", Resolution::Abandon),
        ] {
            let parsed = ResolutionRequest::parse(&json!({"action": action, "reason": "r"})).unwrap();
            assert_eq!(parsed.resolution, resolution);
            assert_eq!(parsed.resolution.name(), action);
        }
    }
}
