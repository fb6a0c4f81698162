//! What an application asks Genace to generate: the media type, the
//! specification and the priority, parsed once.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::input::{InvalidInput, MAX_SAFE_INTEGER, is_blank, members, strip_nulls};

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
        let obj = members(value, "specification", &SPEC_FIELDS).map_err(|mut e| {
            if e.field != "specification" {
                e.reason = format!(
                    "{}; put other Genace parameters under specification.parameters",
                    e.reason
                );
            }
            e
        })?;
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
