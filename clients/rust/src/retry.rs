//! When to send a request again and how long to wait first: network
//! errors, 5xx and 429, with exponential backoff and full jitter, never
//! sooner than the answer's `Retry-After`.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How many times a request is sent at most, and the backoff between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Sends in all, the first included (1: no retry).
    pub attempts: u32,
    /// The first backoff's ceiling; each later one doubles, up to `max`.
    pub base: Duration,
    pub max: Duration,
    /// The longest `Retry-After` honoured; a longer one ends the retries
    /// and the answer is returned.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            base: Duration::from_millis(200),
            max: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries: each request is sent once.
    pub fn none() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// The wait before send `attempt + 1` (`attempt` counts from 1):
    /// a random share of the doubled base (full jitter), and never less
    /// than the server's `retry_after`.
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.max);
        let jitter = ceiling.mul_f64(unit_random());
        retry_after.map_or(jitter, |r| r.max(jitter.min(self.base)))
    }
}

/// Whether an answer with `status` may be worth sending again.
pub(crate) fn retryable_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// `Retry-After` as seconds or an HTTP date, from `now`.
pub(crate) fn parse_retry_after(raw: &str, now: DateTime<Utc>) -> Option<Duration> {
    let raw = raw.trim();
    if let Ok(seconds) = raw.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(raw).ok()?.with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// A number in [0, 1) from the operating system's randomness, through a
/// fresh UUID (no extra dependency for a jitter).
fn unit_random() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date() {
        let now = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Mon, 07 Dec 2026 12:00:05 GMT", now),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse_retry_after("Mon, 07 Dec 2026 11:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn the_backoff_grows_to_its_ceiling_and_never_undercuts_retry_after() {
        let p = RetryPolicy::default();
        for attempt in 1..20 {
            let wait = p.backoff(attempt, None);
            assert!(wait <= p.max, "{attempt}: {wait:?}");
        }
        assert!(p.backoff(1, None) <= p.base);
        assert!(p.backoff(1, Some(Duration::from_secs(2))) >= Duration::from_secs(2));
        assert!(retryable_status(503) && retryable_status(429) && !retryable_status(409));
    }
}
