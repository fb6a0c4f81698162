//! An intent's canonical bytes (RFC 8785) and their fingerprint.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::deadline::DispatchDeadline;
use super::input::hex;
use super::spec::{MediaType, Specification};

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
            #[serde(skip_serializing_if = "Option::is_none")]
            media_type: Option<MediaType>,
            specification: &'a Specification,
            #[serde(skip_serializing_if = "Option::is_none")]
            dispatch_deadline: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            dispatch_within_seconds: Option<u32>,
        }
        let skips_media = crate::planted::on(crate::planted::FINGERPRINT_SKIPS_MEDIA_TYPE);
        let json = serde_jcs::to_string(&Intent {
            media_type: Some(media_type).filter(|_| !skips_media),
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
