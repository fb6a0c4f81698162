//! Receiving the service's webhooks: Standard Webhooks verification of a
//! delivery against every secret an endpoint signs with (two during a
//! rotation), and the lifecycle event it carries, typed.

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use standardwebhooks::Webhook;

/// A lifecycle event as a receiver gets it (docs/events.md). Deduplicate
/// on `id`: delivery is at least once.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Event {
    /// `<operation_id>:<incarnation>:<version>:<type>`.
    pub id: String,
    /// `operation.accepted`, `operation.delivered`, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub time: String,
    pub tenant_id: String,
    pub operation_id: String,
    pub operation_key: String,
    pub phase: String,
    pub delivery_state: String,
    pub version: u64,
    /// What is particular to the type.
    #[serde(default)]
    pub data: Value,
    /// While the operation is unfinished: when to read it again (RFC 3339).
    #[serde(default)]
    pub next_look_at: Option<String>,
}

/// Why a delivery was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// No secret verifies the signature, or the headers are missing, or
    /// the timestamp is more than five minutes off.
    #[error("the webhook does not verify: {0}")]
    Unverified(String),
    /// Verified, but not an event this client knows how to read.
    #[error("the webhook's body is not a lifecycle event: {0}")]
    Unreadable(String),
}

/// The shortest key a secret may give: 16 bytes (a Standard Webhooks
/// secret gives 24 to 64).
pub const MIN_KEY_BYTES: usize = 16;

/// The HMAC key of a secret, as the service signs with it: for `whsec_`
/// and base64, the decoded bytes; for any other value, its bytes.
fn signing_key(secret: &str) -> Vec<u8> {
    use base64::Engine;
    secret
        .strip_prefix("whsec_")
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec())
}

/// Verifies a delivery (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature` in `headers`, `body` as received, byte for byte)
/// against each of `secrets` (`whsec_...`), and reads its event. Any one
/// secret that verifies is enough, so a receiver keeps working through a
/// rotation by passing both the new and the old secret.
pub fn verify(secrets: &[&str], headers: &HeaderMap, body: &[u8]) -> Result<Event, VerifyError> {
    let mut last = String::from("no secret given");
    for secret in secrets {
        // An empty or short key (an unset variable, a cut value) would
        // let anyone sign: such a secret verifies nothing.
        let key = signing_key(secret);
        if key.len() < MIN_KEY_BYTES {
            last = format!("a secret of {} bytes is too short to verify with", key.len());
            continue;
        }
        let hook = Webhook::from_bytes(key);
        match hook.and_then(|h| h.verify(body, headers)) {
            Ok(()) => {
                return serde_json::from_slice(body).map_err(|e| VerifyError::Unreadable(e.to_string()));
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(VerifyError::Unverified(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers of a delivery of `body` signed now under `key`'s bytes.
    fn signed_with(key: Vec<u8>, body: &str) -> HeaderMap {
        let now = chrono::Utc::now().timestamp();
        let sig = Webhook::from_bytes(key)
            .unwrap()
            .sign("msg_1", now, body.as_bytes())
            .unwrap();
        let mut h = HeaderMap::new();
        h.insert("webhook-id", "msg_1".parse().unwrap());
        h.insert("webhook-timestamp", now.to_string().parse().unwrap());
        h.insert("webhook-signature", sig.parse().unwrap());
        h
    }

    fn signed(secret: &str, body: &str) -> HeaderMap {
        signed_with(signing_key(secret), body)
    }

    #[test]
    fn either_secret_of_a_rotation_verifies_and_a_changed_body_does_not() {
        let (old, new) = (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_bmV3LXNlY3JldC0wMTIzNDU2Nzg5",
        );
        let body = r#"{"id":"op:1:2:operation.accepted","type":"operation.accepted","time":"t","tenant_id":"a","operation_id":"op","operation_key":"k","phase":"accepted","delivery_state":"not_collected","version":2,"data":{}}"#;
        let headers = signed(old, body);
        let event = verify(&[new, old], &headers, body.as_bytes()).unwrap();
        assert_eq!(event.kind, "operation.accepted");
        assert_eq!(event.version, 2);
        assert!(matches!(
            verify(&[new], &headers, body.as_bytes()),
            Err(VerifyError::Unverified(_))
        ));
        let tampered = body.replace("\"version\":2", "\"version\":3");
        assert!(verify(&[old, new], &headers, tampered.as_bytes()).is_err());
        assert!(verify(&[old], &HeaderMap::new(), body.as_bytes()).is_err());
    }

    #[test]
    fn an_empty_or_short_secret_verifies_nothing() {
        let body = r#"{"id":"x"}"#;
        // Signed under the empty key: what anyone could make.
        let h = signed_with(Vec::new(), body);
        assert!(verify(&[""], &h, body.as_bytes()).is_err());
        assert!(verify(&["short"], &signed("short", body), body.as_bytes()).is_err());
        // A secret the service signs with its bytes verifies as it signs.
        let raw = "a-raw-secret-of-enough-bytes";
        // (It verifies; the body is no event, so it is unreadable, not unverified.)
        assert!(matches!(
            verify(&[raw], &signed(raw, body), body.as_bytes()),
            Err(VerifyError::Unreadable(_))
        ));
    }
}
