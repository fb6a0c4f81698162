//! Domain types that can only exist in a valid form.
//!
//! Everything an application sends us is parsed here, once. After parsing, the
//! rest of the library never re-checks a key, a tenant or a specification.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Why an input could not be parsed. `field` names the offending member the
/// way a client wrote it, so the problem document can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: String,
    pub reason: String,
}

impl InvalidInput {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

fn visible_ascii(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// A job id Genace gave us: 1-256 visible ASCII characters. Anything longer
/// or stranger is not stored as an id (it is kept as evidence instead).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteJobId(String);

impl RemoteJobId {
    pub const MAX_LEN: usize = 256;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !visible_ascii(raw) {
            return Err(InvalidInput::new(
                "job_id",
                format!("must be 1-{} visible ASCII characters", Self::MAX_LEN),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// The owner of an operation, taken from the authenticated principal only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    pub const MAX_LEN: usize = 128;

    /// The character a tenant id may not hold: `#` joins the parts of the
    /// table's composite keys (`WHEVENT#<tenant>#<event id>` and the like).
    /// Without it, a key that starts with a tenant id names one tenant
    /// only, and no tenant can reach another's items through an id of its
    /// own choosing. (`/`, which joins secret names, stays allowed: a
    /// secret's owner is read from its whole folder.)
    pub const SEPARATOR: char = '#';

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !visible_ascii(raw) || raw.contains(Self::SEPARATOR) {
            return Err(InvalidInput::new(
                "tenant",
                format!("must be 1-{} visible ASCII characters, without '#'", Self::MAX_LEN),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The application's name for one business intent, unique per tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperationKey(String);

impl OperationKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !visible_ascii(raw) {
            return Err(InvalidInput::new(
                "operation_key",
                format!("must be 1-{} visible ASCII characters", Self::MAX_LEN),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for OperationKey {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<OperationKey> for String {
    fn from(value: OperationKey) -> Self {
        value.0
    }
}

/// Our identifier of an operation. It is derived from the tenant and the
/// operation key, so the uniqueness constraint *is* the table's primary key.
/// It is never sent to Genace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperationId(String);

impl OperationId {
    const PREFIX: &'static str = "op_";
    const HEX_LEN: usize = 32;

    pub fn derive(tenant: &TenantId, key: &OperationKey) -> Self {
        let mut h = Sha256::new();
        h.update(b"genace-operation-id/v1\0");
        h.update(tenant.as_str().as_bytes());
        h.update(b"\0");
        h.update(key.as_str().as_bytes());
        let digest = h.finalize();
        Self(format!("{}{}", Self::PREFIX, &hex(&digest)[..Self::HEX_LEN]))
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        let ok = raw
            .strip_prefix(Self::PREFIX)
            .is_some_and(|h| h.len() == Self::HEX_LEN && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        if !ok {
            return Err(InvalidInput::new("operation_id", "is not an operation id"));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A stable small number derived from the id, used to spread the sweep's
    /// due-time index over several partitions.
    pub fn shard(&self, shards: u32) -> u32 {
        let tail = &self.0[self.0.len() - 8..];
        u32::from_str_radix(tail, 16).unwrap_or(0) % shards.max(1)
    }
}

impl TryFrom<String> for OperationId {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<OperationId> for String {
    fn from(value: OperationId) -> Self {
        value.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaType {
    Video,
    Image,
}

impl MediaType {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        match raw {
            "video" => Ok(Self::Video),
            "image" => Ok(Self::Image),
            _ => Err(InvalidInput::new("media_type", "must be \"video\" or \"image\"")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Video => "video",
            Self::Image => "image",
        }
    }
}

/// How soon an intent should take a free slot of Genace's capacity, against
/// its tenant's other waiting intents. `batch` yields to `interactive` for
/// a bounded time ([`Priority::BATCH_YIELDS_SECONDS`]), so it is never
/// starved. Not part of the fingerprint: the same intent sent again with
/// another priority is a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    #[default]
    Interactive,
    Batch,
}

impl Priority {
    /// How long a waiting batch intent lets later interactive intents of its
    /// tenant go first. After that it sorts before them, so its wait is
    /// bounded by this plus the drain of what waited before it.
    pub const BATCH_YIELDS_SECONDS: i64 = 300;

    pub fn parse(value: &Value) -> Result<Self, InvalidInput> {
        match value {
            Value::Null => Ok(Self::Interactive),
            Value::String(s) if s == "interactive" => Ok(Self::Interactive),
            Value::String(s) if s == "batch" => Ok(Self::Batch),
            _ => Err(InvalidInput::new("priority", "must be \"interactive\" or \"batch\"")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Batch => "batch",
        }
    }

    pub fn is_interactive(&self) -> bool {
        *self == Self::Interactive
    }
}

/// A prompt revision is whatever the application uses to name a reviewed
/// prompt: a counter or a label. The two spellings are kept apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PromptRevision {
    Number(u64),
    Label(String),
}

/// What the application asks Genace to generate. Only parsed values exist:
/// absent and `null` members are the same, unknown members are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Specification {
    pub model: String,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_revision: Option<PromptRevision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aspect_ratio: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// Other parameters Genace supports, as an object with `null` members removed.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub parameters: Map<String, Value>,
}

const SPEC_FIELDS: [&str; 7] = [
    "model",
    "prompt",
    "prompt_revision",
    "aspect_ratio",
    "duration",
    "resolution",
    "parameters",
];

impl Specification {
    pub fn parse(value: &Value, media_type: MediaType) -> Result<Self, InvalidInput> {
        let obj = value
            .as_object()
            .ok_or_else(|| InvalidInput::new("specification", "must be an object"))?;
        if let Some(unknown) = obj.keys().find(|k| !SPEC_FIELDS.contains(&k.as_str())) {
            return Err(InvalidInput::new(
                format!("specification.{unknown}"),
                "is not a known member; put other Genace parameters under specification.parameters",
            ));
        }
        let present = |name: &str| obj.get(name).filter(|v| !v.is_null());
        let text = |name: &str, required: bool, max: usize| -> Result<Option<String>, InvalidInput> {
            let field = format!("specification.{name}");
            match present(name) {
                None if required => Err(InvalidInput::new(field, "is required")),
                None => Ok(None),
                Some(Value::String(s)) if is_blank(s) => Err(InvalidInput::new(field, "must not be blank")),
                Some(Value::String(s)) if s.chars().count() > max => {
                    Err(InvalidInput::new(field, format!("must be at most {max} characters")))
                }
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(InvalidInput::new(field, "must be a string")),
            }
        };

        let model = text("model", true, 128)?.unwrap_or_default();
        let prompt = text("prompt", true, 32 * 1024)?.unwrap_or_default();
        let resolution = text("resolution", false, 32)?;
        let aspect_ratio = text("aspect_ratio", false, 16)?;
        if aspect_ratio.as_deref().is_some_and(|r| !is_ratio(r)) {
            return Err(InvalidInput::new(
                "specification.aspect_ratio",
                "must look like W:H with positive integers, for example 16:9",
            ));
        }
        let prompt_revision = present("prompt_revision").map(prompt_revision).transpose()?;
        let duration = present("duration").map(|v| duration(v, media_type)).transpose()?;
        let parameters = match present("parameters") {
            None => Map::new(),
            Some(Value::Object(m)) => strip_nulls(m),
            Some(_) => {
                return Err(InvalidInput::new("specification.parameters", "must be an object"));
            }
        };
        Ok(Self {
            model,
            prompt,
            prompt_revision,
            aspect_ratio,
            duration,
            resolution,
            parameters,
        })
    }
}

/// A prompt revision: a non-negative integer up to [`MAX_SAFE_INTEGER`], or
/// a non-blank label of at most 128 characters.
fn prompt_revision(v: &Value) -> Result<PromptRevision, InvalidInput> {
    match v {
        Value::String(s) if !is_blank(s) && s.chars().count() <= 128 => Ok(PromptRevision::Label(s.clone())),
        Value::Number(n) if n.as_u64().is_some_and(|v| v <= MAX_SAFE_INTEGER) => {
            Ok(PromptRevision::Number(n.as_u64().unwrap_or_default()))
        }
        v if v
            .as_f64()
            .is_some_and(|f| f >= 0.0 && f.fract() == 0.0 && f <= MAX_SAFE_INTEGER as f64) =>
        {
            Ok(PromptRevision::Number(v.as_f64().unwrap_or_default() as u64))
        }
        _ => Err(InvalidInput::new(
            "specification.prompt_revision",
            "must be a non-negative integer or a non-blank label",
        )),
    }
}

/// A duration in seconds: positive and finite, and for videos only.
fn duration(v: &Value, media_type: MediaType) -> Result<f64, InvalidInput> {
    if media_type == MediaType::Image {
        return Err(InvalidInput::new("specification.duration", "applies to video only"));
    }
    match v.as_f64() {
        Some(d) if d > 0.0 && d.is_finite() => Ok(d),
        _ => Err(InvalidInput::new(
            "specification.duration",
            "must be a positive number of seconds",
        )),
    }
}

/// `W:H` with positive integers (leading zeros allowed): the OpenAPI
/// document's `^0*[1-9][0-9]*:0*[1-9][0-9]*$`, within 16 characters.
fn is_ratio(s: &str) -> bool {
    let Some((w, h)) = s.split_once(':') else {
        return false;
    };
    let positive = |p: &str| p.bytes().all(|b| b.is_ascii_digit()) && p.bytes().any(|b| b != b'0');
    positive(w) && positive(h)
}

/// True when every character is Unicode white space: a value the OpenAPI
/// document's `\S` pattern refuses (ECMA-262 `\s`, which, unlike Python's,
/// does not count the separators U+001C to U+001F).
pub fn is_blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

/// The largest integer a JSON number holds exactly (2^53 - 1): the bound
/// of integer members such as `prompt_revision`.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Object members whose value is `null` mean "not given": drop them, at every depth.
/// Array elements keep their positions, so a `null` inside an array stays.
fn strip_nulls(obj: &Map<String, Value>) -> Map<String, Value> {
    obj.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

fn strip_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(strip_nulls(m)),
        Value::Array(a) => Value::Array(a.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

/// The canonical bytes of an intent (media type plus specification) in
/// RFC 8785 form, and their fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalSpec {
    json: String,
    hash: SpecHash,
}

/// `sha256(version tag || canonical bytes)`, lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SpecHash(String);

impl SpecHash {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl CanonicalSpec {
    /// Bumping this tag changes every fingerprint; do it only with a migration.
    pub const VERSION_TAG: &'static [u8] = b"genace-spec/v1\n";

    pub fn new(media_type: MediaType, spec: &Specification) -> Self {
        Self::with_deadline(media_type, spec, None)
    }

    /// The fingerprint of an intent with its dispatch deadline as it was
    /// sent (a time, normalized to UTC, or seconds after recording). An
    /// intent without one fingerprints as before deadlines existed.
    pub fn with_deadline(media_type: MediaType, spec: &Specification, deadline: Option<DispatchDeadline>) -> Self {
        #[derive(Serialize)]
        struct Intent<'a> {
            media_type: MediaType,
            specification: &'a Specification,
            #[serde(skip_serializing_if = "Option::is_none")]
            dispatch_deadline: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            dispatch_within_seconds: Option<u32>,
        }
        let json = serde_jcs::to_string(&Intent {
            media_type,
            specification: spec,
            dispatch_deadline: match deadline {
                Some(DispatchDeadline::At(at)) => Some(at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
                _ => None,
            },
            dispatch_within_seconds: match deadline {
                Some(DispatchDeadline::Within(n)) => Some(n),
                _ => None,
            },
        })
        .expect("a parsed specification always serializes");
        let mut h = Sha256::new();
        h.update(Self::VERSION_TAG);
        h.update(json.as_bytes());
        Self {
            hash: SpecHash(hex(&h.finalize())),
            json,
        }
    }

    pub fn json(&self) -> &str {
        &self.json
    }

    pub fn hash(&self) -> &SpecHash {
        &self.hash
    }
}

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

/// The latest an operation may be claimed for dispatch, as the intent
/// said it: a time, or seconds after the operation was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchDeadline {
    At(chrono::DateTime<chrono::Utc>),
    Within(u32),
}

impl DispatchDeadline {
    /// The furthest a deadline may lie ahead: 30 days.
    pub const MAX_SECONDS: u32 = 30 * 24 * 3600;

    /// Reads `dispatch_deadline` (RFC 3339) or `dispatch_within_seconds`
    /// (1 to [`Self::MAX_SECONDS`]); at most one of them.
    fn parse(obj: &serde_json::Map<String, Value>) -> Result<Option<Self>, InvalidInput> {
        if obj.contains_key("dispatch_deadline") && obj.contains_key("dispatch_within_seconds") {
            return Err(InvalidInput::new(
                "dispatch_within_seconds",
                "cannot be sent with dispatch_deadline; send one of them",
            ));
        }
        let present = |name: &str| obj.get(name).filter(|v| !v.is_null());
        match (present("dispatch_deadline"), present("dispatch_within_seconds")) {
            (Some(_), Some(_)) => unreachable!("both members were refused above"),
            (Some(at), None) => at
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .map(|t| Some(Self::At(t.with_timezone(&chrono::Utc))))
                .ok_or_else(|| InvalidInput::new("dispatch_deadline", "must be an RFC 3339 date-time")),
            (None, Some(within)) => within
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=Self::MAX_SECONDS).contains(n))
                .map(|n| Some(Self::Within(n)))
                .ok_or_else(|| {
                    InvalidInput::new(
                        "dispatch_within_seconds",
                        format!("must be a whole number of seconds from 1 to {}", Self::MAX_SECONDS),
                    )
                }),
            (None, None) => Ok(None),
        }
    }

    /// The deadline for an operation recorded at `created_at`.
    pub fn resolve(self, created_at: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
        match self {
            Self::At(at) => at,
            Self::Within(seconds) => created_at + chrono::Duration::seconds(i64::from(seconds)),
        }
    }

    /// Why a deadline cannot be accepted for an intent recorded `now`: in
    /// the past, or further ahead than [`Self::MAX_SECONDS`].
    pub fn check(self, now: chrono::DateTime<chrono::Utc>) -> Result<(), InvalidInput> {
        let at = self.resolve(now);
        if at <= now {
            return Err(InvalidInput::new("dispatch_deadline", "is in the past"));
        }
        if at > now + chrono::Duration::seconds(i64::from(Self::MAX_SECONDS)) {
            return Err(InvalidInput::new("dispatch_deadline", "is more than 30 days ahead"));
        }
        Ok(())
    }
}

impl Intent {
    /// Parses an intake body. `header_key` is the `Idempotency-Key` header, if any.
    pub fn parse(body: &Value, header_key: Option<&str>) -> Result<Self, InvalidInput> {
        let obj = body
            .as_object()
            .ok_or_else(|| InvalidInput::new("body", "must be a JSON object"))?;
        if obj.contains_key("tenant_id") || obj.contains_key("tenant") {
            return Err(InvalidInput::new(
                "tenant_id",
                "must not be sent; the tenant comes from the authenticated principal",
            ));
        }
        if let Some(unknown) = obj.keys().find(|k| !INTENT_FIELDS.contains(&k.as_str())) {
            return Err(InvalidInput::new(unknown.clone(), "is not a known member"));
        }
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

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn intent(v: Value) -> Result<Intent, InvalidInput> {
        Intent::parse(&v, None)
    }

    fn base() -> Value {
        json!({
            "operation_key": "frame-12/rev-3",
            "media_type": "video",
            "specification": {
                "model": "genace-video-2",
                "prompt": "a lighthouse at dusk",
                "prompt_revision": 3,
                "aspect_ratio": "16:9",
                "duration": 5,
                "resolution": "1080p",
                "parameters": {"seed": 42, "style": {"grain": 0.2, "palette": ["warm", "teal"]}}
            }
        })
    }

    fn hash_of(v: Value) -> String {
        intent(v).unwrap().canonical.hash().as_str().to_owned()
    }

    #[test]
    fn key_order_and_number_spelling_do_not_change_the_hash() {
        let reordered = json!({
            "specification": {
                "parameters": {"style": {"palette": ["warm", "teal"], "grain": 0.20}, "seed": 42.0},
                "resolution": "1080p",
                "duration": 5.0,
                "aspect_ratio": "16:9",
                "prompt_revision": 3,
                "prompt": "a lighthouse at dusk",
                "model": "genace-video-2"
            },
            "media_type": "video",
            "operation_key": "frame-12/rev-3"
        });
        assert_eq!(hash_of(base()), hash_of(reordered));
    }

    #[test]
    fn omitted_and_null_are_the_same() {
        let mut with_nulls = base();
        let spec = with_nulls["specification"].as_object_mut().unwrap();
        spec.insert("resolution".into(), Value::Null);
        spec["parameters"]["negative_prompt"] = Value::Null;
        spec["parameters"]["style"]["extra"] = Value::Null;
        let mut omitted = base();
        omitted["specification"].as_object_mut().unwrap().remove("resolution");
        assert_eq!(hash_of(with_nulls), hash_of(omitted));

        let mut empty_params = base();
        empty_params["specification"]["parameters"] = json!({});
        let mut null_params = base();
        null_params["specification"]["parameters"] = Value::Null;
        assert_eq!(hash_of(empty_params), hash_of(null_params));
    }

    #[test]
    fn every_meaningful_change_changes_the_hash() {
        let original = hash_of(base());
        let changes: Vec<(&str, Value)> = vec![
            ("/specification/model", json!("genace-video-3")),
            ("/specification/prompt", json!("a lighthouse at dawn")),
            ("/specification/prompt_revision", json!(4)),
            ("/specification/prompt_revision", json!("3")),
            ("/specification/aspect_ratio", json!("9:16")),
            ("/specification/duration", json!(6)),
            ("/specification/resolution", json!("720p")),
            ("/specification/parameters/seed", json!(43)),
            ("/specification/parameters/style/grain", json!(0.25)),
            ("/specification/parameters/style/palette", json!(["teal", "warm"])),
            ("/media_type", json!("image")),
        ];
        for (pointer, value) in changes {
            let mut changed = base();
            if pointer == "/media_type" {
                changed["specification"].as_object_mut().unwrap().remove("duration");
            }
            *changed.pointer_mut(pointer).unwrap() = value;
            assert_ne!(original, hash_of(changed), "changing {pointer} must change the hash");
        }
    }

    #[test]
    fn canonical_form_is_rfc8785() {
        let i = intent(json!({
            "operation_key": "k",
            "media_type": "image",
            "specification": {"prompt": "p", "model": "m", "parameters": {"b": 5.0, "a": [1, {"d": 1, "c": 2}]}}
        }))
        .unwrap();
        assert_eq!(
            i.canonical.json(),
            r#"{"media_type":"image","specification":{"model":"m","parameters":{"a":[1,{"c":2,"d":1}],"b":5},"prompt":"p"}}"#
        );
    }

    #[test]
    fn hash_is_tagged_sha256_of_canonical_bytes() {
        let i = intent(base()).unwrap();
        let mut h = Sha256::new();
        h.update(b"genace-spec/v1\n");
        h.update(i.canonical.json().as_bytes());
        assert_eq!(i.canonical.hash().as_str(), hex(&h.finalize()));
    }

    #[test]
    fn operation_keys_must_be_visible_ascii_up_to_255() {
        assert!(OperationKey::parse("a").is_ok());
        assert!(OperationKey::parse(&"k".repeat(255)).is_ok());
        for bad in ["", " lead", "tab\tkey", "caf\u{e9}", "new\nline"] {
            assert!(OperationKey::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(OperationKey::parse(&"k".repeat(256)).is_err());
    }

    #[test]
    fn key_may_come_from_header_but_both_must_agree() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("operation_key");
        assert_eq!(Intent::parse(&v, Some("hdr")).unwrap().operation_key.as_str(), "hdr");
        assert!(Intent::parse(&v, None).is_err());
        let e = Intent::parse(&base(), Some("other")).unwrap_err();
        assert_eq!(e.field, "operation_key");
        assert!(Intent::parse(&base(), Some("frame-12/rev-3")).is_ok());
    }

    #[test]
    fn refuses_bad_intents() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([1]), "body"),
            (
                json!({"operation_key": "k", "media_type": "audio", "specification": {"model": "m", "prompt": "p"}}),
                "media_type",
            ),
            (json!({"operation_key": "k", "media_type": "video"}), "specification"),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"prompt": "p"}}),
                "specification.model",
            ),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": " "}}),
                "specification.prompt",
            ),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "duration": -1}}),
                "specification.duration",
            ),
            (
                json!({"operation_key": "k", "media_type": "image", "specification": {"model": "m", "prompt": "p", "duration": 4}}),
                "specification.duration",
            ),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "aspect_ratio": "wide"}}),
                "specification.aspect_ratio",
            ),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "colour": "red"}}),
                "specification.colour",
            ),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p", "parameters": [1]}}),
                "specification.parameters",
            ),
            (
                json!({"operation_key": 7, "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
                "operation_key",
            ),
            (
                json!({"tenant_id": "t", "operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}}),
                "tenant_id",
            ),
            (
                json!({"operation_key": "k", "media_type": "video", "specification": {"model": "m", "prompt": "p"}, "extra": 1}),
                "extra",
            ),
        ];
        for (body, field) in cases {
            let err = intent(body.clone()).expect_err(&body.to_string());
            assert_eq!(err.field, field, "{body}");
        }
    }

    /// The table's composite keys join a tenant id to what follows with
    /// `#`: a tenant id holding one could name another tenant's items, so
    /// none is accepted, from a token, a path or a stored record.
    #[test]
    fn tenant_ids_hold_no_key_separator() {
        for bad in ["a#b", "#", "a#", "", "a b", "é"] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "tenant-a", "org:team.1", "user@example.com", "a%23b", "a/b"] {
            assert_eq!(TenantId::parse(good).unwrap().as_str(), good);
        }
        assert!(serde_json::from_value::<TenantId>(json!("a#b")).is_err());
    }

    #[test]
    fn operation_id_is_per_tenant_and_stable() {
        let k = OperationKey::parse("same-key").unwrap();
        let a = OperationId::derive(&TenantId::parse("tenant-a").unwrap(), &k);
        let b = OperationId::derive(&TenantId::parse("tenant-b").unwrap(), &k);
        assert_ne!(a, b);
        assert_eq!(a, OperationId::derive(&TenantId::parse("tenant-a").unwrap(), &k));
        assert_eq!(OperationId::parse(a.as_str()).unwrap(), a);
        assert!(OperationId::parse("op_xyz").is_err());
        assert!(a.shard(8) < 8);
    }

    /// A deadline is read as sent and is part of the fingerprint: the same
    /// instant in another offset is the same intent, another deadline (or
    /// none) is not, and an intent without one fingerprints as before.
    #[test]
    fn a_dispatch_deadline_is_parsed_and_fingerprinted_as_sent() {
        let plain = intent(base()).unwrap();
        assert_eq!(plain.deadline, None);
        assert_eq!(
            plain.canonical,
            CanonicalSpec::new(plain.media_type, &plain.specification),
            "no deadline: the fingerprint deadlines did not exist for"
        );
        let with = |member: &str, value: Value| {
            let mut v = base();
            v[member] = value;
            intent(v)
        };
        let utc = with("dispatch_deadline", json!("2026-12-02T16:00:00Z")).unwrap();
        let offset = with("dispatch_deadline", json!("2026-12-02T17:00:00+01:00")).unwrap();
        let later = with("dispatch_deadline", json!("2026-12-02T16:00:01Z")).unwrap();
        let within = with("dispatch_within_seconds", json!(600)).unwrap();
        assert_eq!(utc.canonical.hash(), offset.canonical.hash());
        for other in [&plain, &later, &within] {
            assert_ne!(utc.canonical.hash(), other.canonical.hash());
        }
        let recorded = chrono::DateTime::parse_from_rfc3339("2026-12-02T15:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(
            within.deadline.unwrap().resolve(recorded),
            recorded + chrono::Duration::seconds(600)
        );
        assert!(utc.deadline.unwrap().check(recorded).is_ok());
        assert_eq!(
            utc.deadline
                .unwrap()
                .check(recorded + chrono::Duration::hours(2))
                .unwrap_err()
                .field,
            "dispatch_deadline",
            "in the past"
        );
        assert!(within.deadline.unwrap().check(recorded).is_ok());
        for (member, bad) in [
            ("dispatch_deadline", json!("tomorrow")),
            ("dispatch_deadline", json!(5)),
            ("dispatch_within_seconds", json!(0)),
            ("dispatch_within_seconds", json!(2_592_001)),
            ("dispatch_within_seconds", json!(1.5)),
        ] {
            assert_eq!(with(member, bad).unwrap_err().field, member);
        }
        let mut both = base();
        both["dispatch_deadline"] = json!("2026-12-02T16:00:00Z");
        both["dispatch_within_seconds"] = Value::Null;
        assert_eq!(intent(both).unwrap_err().field, "dispatch_within_seconds");
    }
}
