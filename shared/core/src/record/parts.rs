//! The parts of a record: a claim, an error, an output, a delivered
//! object, the audit trail, an erasure, a cancellation, a wait.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How the end of the job was seen: after how many looks, when a look
/// last found it still running, and when one found it ended. The end fell
/// between the last two: their gap bounds how late it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detection {
    pub looks: u32,
    /// When a look first found the job `running` (not `queued`): Genace
    /// started it no later than that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_running_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_running_at: Option<DateTime<Utc>>,
    pub ended_seen_at: DateTime<Utc>,
    /// When each look of the chain that saw the end was made, the last
    /// one the end's: the last [`MAX_LOOKS_KEPT`] (none for ends recorded
    /// before looks were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub looked_at: Vec<DateTime<Utc>>,
}

/// Looks whose times a chain of polls carries, and the record keeps: the
/// last ones.
pub const MAX_LOOKS_KEPT: usize = 24;

impl Detection {
    /// At most this many seconds passed between the job's end and the look
    /// that saw it; none when no look saw it running.
    pub fn lag_bound_seconds(&self) -> Option<f64> {
        self.last_running_at
            .map(|r| (self.ended_seen_at - r).num_milliseconds().max(0) as f64 / 1000.0)
    }
}

/// What the looks before this one saw of the job: how many there were,
/// when one first found it `running` and when one last found it not yet
/// ended, and when they were made (the last
/// [`MAX_LOOKS_KEPT`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Looks {
    pub count: u32,
    pub first_running_at: Option<DateTime<Utc>>,
    pub last_running_at: Option<DateTime<Utc>>,
    pub at: Vec<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub token: String,
    pub lease_expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteError {
    /// `http_<status>`, `remote`, `transport`, ...
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRef {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveredObject {
    pub key: String,
    pub bytes: u64,
    pub sha256: String,
    pub content_type: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settlement {
    Pending,
    Settled,
}

/// One operator decision, kept on the record for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Who decided: the operator's `sub` claim.
    pub actor: String,
    pub at: DateTime<Utc>,
    pub action: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}

/// The delivered objects were deleted from the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Erasure {
    pub at: DateTime<Utc>,
    /// The tenant that asked, or the operator's `sub`.
    pub by: String,
    /// The keys deleted, in key order: every object stored under the
    /// operation's prefix, by any delivery attempt, up to
    /// [`MAX_ERASED_KEYS`] (none recorded before this field existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
    /// How many more keys were deleted than `objects` lists, so that an
    /// erasure of many objects keeps the record far inside DynamoDB's
    /// 400 KB item limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_objects: u32,
}

/// Erased keys a record lists at most: about 10 KB of keys.
pub const MAX_ERASED_KEYS: usize = 100;

/// An operation taken back before any job was created for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancellation {
    pub at: DateTime<Utc>,
    /// Who asked: the tenant, an operator's `sub`, or `dispatch_deadline`.
    pub by: String,
    pub reason: CancelReason,
}

/// Why an operation was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// Its tenant or an operator asked.
    Requested,
    /// Its dispatch deadline passed before it was claimed.
    Deadline,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Deadline => "deadline",
        }
    }
}

/// Why a prepared operation waits for its dispatch claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// Every slot of the Genace account (or the tenant's) is taken.
    Capacity,
    /// The tenant's spend limit leaves no room for the estimate.
    SpendLimit,
}

impl WaitReason {
    /// The name views and events give the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Capacity => "capacity",
            Self::SpendLimit => "spend_limit",
        }
    }
}

/// When a bucket rule deleting objects `days` after they were stored
/// removes one stored at `stored`: S3 adds the days and rounds up to the
/// next midnight UTC.
pub fn bucket_rule_deletes(stored: DateTime<Utc>, days: u32) -> Option<DateTime<Utc>> {
    let due = stored + chrono::Duration::days(i64::from(days));
    let midnight = due.date_naive().and_hms_opt(0, 0, 0)?.and_utc();
    Some(if midnight == due {
        due
    } else {
        midnight + chrono::Duration::days(1)
    })
}

pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}
