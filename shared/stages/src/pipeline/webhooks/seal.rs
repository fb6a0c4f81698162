//! The seal the events pipe puts on each lifecycle event, and the webhook
//! stage checks before it keeps, copies or signs one: an HMAC-SHA256, under
//! a key only those two functions read, of everything the event says (its
//! type and data among it). A message put on the webhook queue by anyone
//! else, with a real operation's ids and any type and data, does not hold
//! it.
//!
//! The seal is over a canonical text of the event: object members sorted
//! by name at every depth, and each number written as an integer when it
//! is one (so `10.0` and `10`, as a JSON round trip through the bus may
//! write it, seal alike). The bus's own members and the seal itself are
//! left out.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use genace_core::events::{BUS_MEMBERS, LifecycleEvent, SEAL_MEMBER};

/// The key events are sealed with.
#[derive(Clone)]
pub struct EventSeal(Arc<[u8]>);

impl std::fmt::Debug for EventSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSeal(..)")
    }
}

/// Shortest key accepted, in bytes.
pub const MIN_KEY_BYTES: usize = 32;

impl EventSeal {
    /// A seal under `key`; none when it is shorter than [`MIN_KEY_BYTES`].
    pub fn new(key: &[u8]) -> Option<Self> {
        (key.len() >= MIN_KEY_BYTES).then(|| Self(key.into()))
    }

    /// A seal under a fresh random key: for a stack whose events pipe and
    /// webhook stage run in one process (the local stack).
    pub fn random() -> Result<Self, String> {
        let mut key = [0u8; MIN_KEY_BYTES];
        getrandom::fill(&mut key).map_err(|e| format!("drawing the events seal: {e}"))?;
        Ok(Self(key.as_slice().into()))
    }

    /// The seal of `event` (base64).
    pub fn seal(&self, event: &LifecycleEvent) -> String {
        let value = serde_json::to_value(event).unwrap_or(Value::Null);
        self.seal_value(&value)
    }

    /// Seals each of `events`.
    pub fn seal_all(&self, events: &mut [LifecycleEvent]) {
        for e in events {
            e.mac = Some(self.seal(e));
        }
    }

    /// Whether `detail` (a lifecycle event as the bus carried it) holds
    /// its seal.
    pub fn holds(&self, detail: &Value) -> bool {
        let Some(told) = detail.get(SEAL_MEMBER).and_then(Value::as_str) else {
            return false;
        };
        let Ok(told) = BASE64.decode(told) else {
            return false;
        };
        self.mac(detail).verify_slice(&told).is_ok()
    }

    /// The seal of `detail`, a lifecycle event as JSON (bus members and a
    /// seal already there are left out).
    pub fn seal_value(&self, detail: &Value) -> String {
        BASE64.encode(self.mac(detail).finalize().into_bytes())
    }

    fn mac(&self, detail: &Value) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        let mut text = String::new();
        if let Value::Object(members) = detail {
            let event: serde_json::Map<String, Value> = members
                .iter()
                .filter(|(k, _)| k.as_str() != SEAL_MEMBER && !BUS_MEMBERS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            canonical(&Value::Object(event), &mut text);
        }
        mac.update(text.as_bytes());
        mac
    }
}

/// `v` as canonical text: members sorted, integral numbers as integers.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(members) => {
            let mut keys: Vec<&String> = members.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&members[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => out.push_str(&format!("{}", f as i64)),
            _ => out.push_str(&n.to_string()),
        },
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn detail() -> Value {
        json!({"id": "op_1:1:3:operation.accepted", "type": "operation.accepted", "tenant_id": "acme",
               "operation_id": "op_1", "version": 3, "data": {"remote_job_id": "J1", "held_credits": 10.0}})
    }

    #[test]
    fn a_sealed_event_holds_through_the_bus_and_a_changed_one_does_not() {
        let seal = EventSeal::new(&[7; 32]).unwrap();
        let mut sealed = detail();
        sealed[SEAL_MEMBER] = json!(seal.seal_value(&detail()));
        assert!(seal.holds(&sealed));
        // The bus's members, another order, and 10 for 10.0: still holds.
        let mut carried: Value = serde_json::from_str(&sealed.to_string().replace("10.0", "10").replacen(
            '{',
            r#"{"webhooks": true, "trace_id": "ab", "#,
            1,
        ))
        .unwrap();
        assert!(seal.holds(&carried), "{carried}");
        for (member, forged) in [
            ("type", json!("operation.rendered")),
            ("data", json!({"remote_job_id": "J2"})),
            ("tenant_id", json!("globex")),
            ("version", json!(4)),
        ] {
            let was = carried[member].clone();
            carried[member] = forged;
            assert!(!seal.holds(&carried), "{member}");
            carried[member] = was;
        }
        assert!(seal.holds(&carried));
        let other = EventSeal::new(&[8; 32]).unwrap();
        assert!(!other.holds(&carried), "another key");
        assert!(!seal.holds(&detail()), "no seal");
        assert!(EventSeal::new(&[1; 16]).is_none(), "a short key");
    }
}
