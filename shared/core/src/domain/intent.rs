//! A request to record an intent, parsed whole: its key, specification,
//! priority, deadline and fault directive.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::canonical::CanonicalSpec;
use super::deadline::DispatchDeadline;
use super::ids::OperationKey;
use super::input::{InvalidInput, members};
use super::spec::{MediaType, Priority, Specification};

/// A parsed request to record an intent. The tenant is not part of it: it
/// comes from the authenticated principal.
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    pub operation_key: OperationKey,
    pub media_type: MediaType,
    pub specification: Specification,
    pub canonical: CanonicalSpec,
    /// A fault to fire once, for conformance runs. Not part of the fingerprint.
    pub fault: Option<Fault>,
    /// Not part of the fingerprint.
    pub priority: Priority,
    /// When dispatch must have claimed the operation by; past it, the
    /// operation is cancelled with no POST. Part of the fingerprint, as sent.
    pub deadline: Option<DispatchDeadline>,
}

const INTENT_FIELDS: [&str; 7] = [
    "operation_key",
    "media_type",
    "specification",
    "fault",
    "priority",
    "dispatch_deadline",
    "dispatch_within_seconds",
];

impl Intent {
    /// Parses an intake body. `header_key` is the `Idempotency-Key` header, if any.
    pub fn parse(body: &Value, header_key: Option<&str>) -> Result<Self, InvalidInput> {
        if body.get("tenant_id").is_some() || body.get("tenant").is_some() {
            return Err(InvalidInput::new(
                "tenant_id",
                "must not be sent; the tenant comes from the authenticated principal",
            ));
        }
        let obj = members(body, "body", &INTENT_FIELDS)?;
        let body_key = match obj.get("operation_key") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(InvalidInput::new("operation_key", "must be a string")),
        };
        let raw_key = match (body_key, header_key) {
            (Some(b), Some(h)) if b != h => {
                return Err(InvalidInput::new(
                    "operation_key",
                    "differs from the Idempotency-Key header",
                ));
            }
            (Some(k), _) | (None, Some(k)) => k,
            (None, None) => {
                return Err(InvalidInput::new(
                    "operation_key",
                    "is required, in the body or the Idempotency-Key header",
                ));
            }
        };
        let operation_key = OperationKey::parse(raw_key)?;
        let media_type = match obj.get("media_type") {
            Some(Value::String(s)) => MediaType::parse(s)?,
            None | Some(Value::Null) => return Err(InvalidInput::new("media_type", "is required")),
            Some(_) => return Err(InvalidInput::new("media_type", "must be a string")),
        };
        let specification = match obj.get("specification") {
            None | Some(Value::Null) => {
                return Err(InvalidInput::new("specification", "is required"));
            }
            Some(v) => Specification::parse(v, media_type)?,
        };
        let deadline = DispatchDeadline::parse(obj)?;
        let canonical = CanonicalSpec::with_deadline(media_type, &specification, deadline);
        let fault = match obj.get("fault") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|_| InvalidInput::new("fault", "is not a known fault directive"))?,
            ),
        };
        let priority = obj.get("priority").map_or(Ok(Priority::Interactive), Priority::parse)?;
        Ok(Self {
            operation_key,
            media_type,
            specification,
            canonical,
            fault,
            priority,
            deadline,
        })
    }
}

/// A fault to fire once, for conformance runs of deployments that allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    #[serde(rename = "dispatch.before_post")]
    DispatchBeforePost,
    #[serde(rename = "dispatch.after_response")]
    DispatchAfterResponse,
    #[serde(rename = "dispatch.after_commit")]
    DispatchAfterCommit,
    #[serde(rename = "dispatch.persist_fails")]
    DispatchPersistFails,
    #[serde(rename = "poll.after_observe")]
    PollAfterObserve,
    #[serde(rename = "deliver.upload_fails")]
    DeliverUploadFails,
    #[serde(rename = "deliver.after_upload")]
    DeliverAfterUpload,
}

impl Fault {
    /// Fired by dispatch (consumed by its claim).
    pub fn fires_in_dispatch(self) -> bool {
        matches!(
            self,
            Fault::DispatchBeforePost
                | Fault::DispatchAfterResponse
                | Fault::DispatchAfterCommit
                | Fault::DispatchPersistFails
        )
    }

    /// Fired by deliver (consumed by its claim).
    pub fn fires_in_delivery(self) -> bool {
        matches!(self, Fault::DeliverUploadFails | Fault::DeliverAfterUpload)
    }
}
