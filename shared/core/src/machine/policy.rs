//! The timing and credit rules the transitions take from configuration.

use chrono::Duration;

/// Timing rules the transitions need. Values come from configuration.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How long a dispatcher may hold a claim. Longer than the Genace client timeout.
    pub dispatch_lease: Duration,
    /// After acceptance, when the sweep should check that observation happened.
    pub observe_grace: Duration,
    /// How long a finished operation is kept before its TTL removes it, at
    /// least: never less than the outputs it stored ([`Self::output_days`]).
    pub retention: Duration,
    /// Days after which the bucket's rule deletes an output it stored:
    /// `OUTPUT_EXPIRY_DAYS`, or `RETENTION_DAYS` when that is 0.
    pub output_days: u32,
    /// How long a delivery claim lasts (the deliver function's timeout and some).
    pub delivery_lease: Duration,
    /// Delivery attempts before `delivery_failed` and a case.
    pub delivery_max_attempts: u32,
    /// How long an account problem holds an operation before one new try.
    pub account_hold: Duration,
    /// 429 answers in a row before the operation is held with a case.
    pub rate_limit_max: u32,
    /// Credits a dispatch claim reserves against the tenant's spend limit,
    /// by media type, until Genace's 202 says what it holds.
    pub credit_estimate: CreditEstimate,
    /// The shards the account's counters are split into: a wait is counted
    /// on the operation's home among them ([`crate::shard::AccountShards::home`]).
    pub account_shards: crate::shard::AccountShards,
}

/// Credits reserved per claim, by media type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreditEstimate {
    pub image: f64,
    pub video: f64,
}

impl CreditEstimate {
    pub fn for_media(&self, media: crate::domain::MediaType) -> f64 {
        match media {
            crate::domain::MediaType::Image => self.image,
            crate::domain::MediaType::Video => self.video,
        }
    }
}

impl Default for CreditEstimate {
    fn default() -> Self {
        Self {
            image: 1.0,
            video: 10.0,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            dispatch_lease: Duration::seconds(120),
            observe_grace: Duration::seconds(300),
            retention: Duration::days(30),
            output_days: 30,
            delivery_lease: Duration::minutes(16),
            delivery_max_attempts: 8,
            account_hold: Duration::minutes(10),
            rate_limit_max: 10,
            credit_estimate: CreditEstimate::default(),
            account_shards: crate::shard::AccountShards::ONE,
        }
    }
}
