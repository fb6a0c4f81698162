//! An operator's limits: a tenant's or the account's jobs in flight
//! (`{"max_in_flight": N}`) and a tenant's spend (`{"spend_limit": N}`).
//! `null` removes a limit; the member itself is required.

use serde_json::Value;

use crate::capacity::MAX_IN_FLIGHT_LIMIT;
use crate::domain::{InvalidInput, members};
use crate::ledger::{Millicredits, millis};

/// Largest spend limit accepted, in credits.
pub const MAX_SPEND_LIMIT: f64 = 1e12;

/// A limit of jobs in flight: a whole number from 1 to
/// [`MAX_IN_FLIGHT_LIMIT`], or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightLimit(pub Option<u32>);

impl InFlightLimit {
    pub fn parse(body: &Value) -> Result<Self, InvalidInput> {
        let obj = members(body, "body", &["max_in_flight"])?;
        match obj.get("max_in_flight") {
            Some(Value::Null) => Ok(Self(None)),
            // A whole number, as JSON Schema counts one: `3` and `3.0` alike.
            Some(Value::Number(n)) => match n
                .as_f64()
                .filter(|v| v.fract() == 0.0 && *v >= 1.0 && *v <= f64::from(MAX_IN_FLIGHT_LIMIT))
            {
                Some(v) => Ok(Self(Some(v as u32))),
                _ => Err(InvalidInput::new(
                    "max_in_flight",
                    format!("must be a whole number from 1 to {MAX_IN_FLIGHT_LIMIT}"),
                )),
            },
            _ => Err(InvalidInput::new(
                "max_in_flight",
                "is required: a number of jobs, or null for none",
            )),
        }
    }
}

/// A tenant's spend limit, from 0 to [`MAX_SPEND_LIMIT`] credits, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendLimit(pub Option<Millicredits>);

impl SpendLimit {
    pub fn parse(body: &Value) -> Result<Self, InvalidInput> {
        let obj = members(body, "body", &["spend_limit"])?;
        match obj.get("spend_limit") {
            Some(Value::Null) => Ok(Self(None)),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(v) if (0.0..=MAX_SPEND_LIMIT).contains(&v) => Ok(Self(Some(millis(v)))),
                _ => Err(InvalidInput::new("spend_limit", "must be between 0 and 1e12 credits")),
            },
            _ => Err(InvalidInput::new(
                "spend_limit",
                "is required: a number of credits, or null for none",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_parse_or_name_their_bad_field() {
        assert_eq!(
            InFlightLimit::parse(&json!({"max_in_flight": 3.0})),
            Ok(InFlightLimit(Some(3)))
        );
        assert_eq!(
            InFlightLimit::parse(&json!({"max_in_flight": null})),
            Ok(InFlightLimit(None))
        );
        for bad in [
            json!({}),
            json!({"max_in_flight": 0}),
            json!({"max_in_flight": 10_001}),
            json!({"max_in_flight": 2.5}),
        ] {
            assert_eq!(InFlightLimit::parse(&bad).unwrap_err().field, "max_in_flight", "{bad}");
        }
        assert_eq!(
            InFlightLimit::parse(&json!({"max_in_flight": 2, "x": 1}))
                .unwrap_err()
                .field,
            "x"
        );
        for edge in [1, 10_000] {
            assert_eq!(
                InFlightLimit::parse(&json!({"max_in_flight": edge})),
                Ok(InFlightLimit(Some(edge)))
            );
        }
        for bad in [json!({"max_in_flight": "3"}), json!({"max_in_flight": true})] {
            assert_eq!(InFlightLimit::parse(&bad).unwrap_err().field, "max_in_flight", "{bad}");
        }
        assert_eq!(InFlightLimit::parse(&json!(3)).unwrap_err().field, "body");
        for edge in [0.0, 1e12] {
            assert_eq!(
                SpendLimit::parse(&json!({"spend_limit": edge})),
                Ok(SpendLimit(Some(millis(edge))))
            );
        }
        assert_eq!(
            SpendLimit::parse(&json!({"spend_limit": 1.5})),
            Ok(SpendLimit(Some(millis(1.5))))
        );
        assert_eq!(SpendLimit::parse(&json!({"spend_limit": null})), Ok(SpendLimit(None)));
        for bad in [
            json!({}),
            json!({"spend_limit": -1}),
            json!({"spend_limit": 2e12}),
            json!({"spend_limit": "5"}),
        ] {
            assert_eq!(SpendLimit::parse(&bad).unwrap_err().field, "spend_limit", "{bad}");
        }
    }
}
