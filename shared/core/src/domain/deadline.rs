//! An intent's dispatch deadline: a time, or seconds after it was recorded.

use serde_json::Value;

use super::input::InvalidInput;

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
    pub(super) fn parse(obj: &serde_json::Map<String, Value>) -> Result<Option<Self>, InvalidInput> {
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
