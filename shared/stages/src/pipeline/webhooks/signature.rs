//! Standard Webhooks signatures: the HMAC-SHA256 of `<id>.<timestamp>.<body>`
//! under each live key of an endpoint's secret.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The HMAC key of a secret: for a Standard Webhooks secret (`whsec_` and
/// base64) the decoded bytes after the prefix; for any other value, its
/// bytes as they are.
pub fn signing_key(secret: &str) -> Vec<u8> {
    use base64::Engine;
    secret
        .strip_prefix("whsec_")
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec())
}

/// The `webhook-signature` header: `v1,<base64 HMAC-SHA256(key,
/// "<id>.<timestamp>.<body>")>` for each secret, separated by spaces.
pub fn signature(secrets: &[String], id: &str, timestamp: i64, body: &str) -> String {
    use base64::Engine;
    secrets
        .iter()
        .map(|secret| {
            let mut mac = Hmac::<Sha256>::new_from_slice(&signing_key(secret)).expect("HMAC takes keys of any length");
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body.as_bytes());
            let digest = mac.finalize().into_bytes();
            format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(digest))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    #[test]
    fn the_hmac_is_the_standard_one() {
        // RFC 4231, test case 2.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    /// The specification's own example: a `whsec_` secret, a message id, a
    /// time and a body, and the signature every library computes for them.
    #[test]
    fn signs_as_the_standard_webhooks_example() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned();
        let signed = signature(
            std::slice::from_ref(&secret),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            r#"{"test": 2432232314}"#,
        );
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    /// During a rotation both keys sign, the current one first.
    #[test]
    fn every_live_secret_signs() {
        let (new, old) = ("whsec_bmV3LXNlY3JldC0wMTIzNDU2Nzg5".to_owned(), "old-raw".to_owned());
        let both = signature(&[new.clone(), old.clone()], "evt", 7, "{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(
            parts,
            [signature(&[new], "evt", 7, "{}"), signature(&[old], "evt", 7, "{}")]
        );
        assert_eq!(signing_key("old-raw"), b"old-raw");
        assert_eq!(signing_key("whsec_bmV3"), b"new");
    }
}
