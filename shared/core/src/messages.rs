//! The messages the stages send each other: a work message that carries
//! only an operation id (every consumer re-reads the record before acting),
//! and the recovery message that carries a remote outcome dispatch could not
//! write.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::OperationId;
use crate::record::OperationRecord;
use crate::remote::AcceptedJob;

/// Which work queue a message goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queue {
    Dispatch,
    Poll,
    Deliver,
    Recovery,
    /// Dispatch messages that wake a waiting operation: dispatch consumes
    /// this queue beside its own, so a wake-up never waits behind a burst.
    Wake,
}

/// The body of every dispatch, poll and deliver message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkMessage {
    pub operation_id: OperationId,
    /// A poll message: what the looks at the job saw so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PollHistory>,
    /// A look at a wait the operation began moments ago, once the wait
    /// indexes show it: dispatch reads the account, and claims for the
    /// operation only when a slot is free.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub look: bool,
}

/// What the looks at one accepted job saw so far, carried from each poll
/// message to the next: a look that finds the job still running writes
/// nothing to the record; each look reads its class's plan again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PollHistory {
    /// Looks at the job so far.
    pub looks: u32,
    /// When a look last found it still running (milliseconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_seen_ms: Option<i64>,
    /// When a look first found it `running` (not `queued`), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_running_ms: Option<i64>,
    /// The job's plan, from its class's render times at the last look
    /// (each look reads them again; the carried plan stays when a read
    /// fails); none: not enough data, the age-based schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::render::PollPlan>,
    /// Whether the class's render times were read for the plan (at the
    /// first look, by dispatch; every look reads them again).
    #[serde(default)]
    pub planned: bool,
    /// When each look so far was made (milliseconds since the epoch), the
    /// last [`crate::record::MAX_LOOKS_KEPT`]: the record keeps them with
    /// the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub looked_at_ms: Vec<i64>,
    /// The chain these looks belong to ([`OperationRecord::poll_chain`]);
    /// none in a message from before chains were named: it looks on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<u64>,
    /// When this look is planned (milliseconds since the epoch): a queue
    /// delays a message by whole seconds, so the message is sent with the
    /// whole seconds of its delay and the look waits out the rest
    /// (at most [`LOOK_WAIT_MAX_MS`]). None: look when received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look_at_ms: Option<i64>,
}

/// The longest a look waits for its planned time once received: the part
/// of a second a queue's whole-second delay leaves.
pub const LOOK_WAIT_MAX_MS: i64 = 1_000;

impl PollHistory {
    /// How long a look received at `now_ms` waits for its planned time:
    /// nothing when it is due or late, at most [`LOOK_WAIT_MAX_MS`] (a
    /// plan far ahead is a clock apart, not a reason to hold a handler).
    pub fn wait_before_look_ms(&self, now_ms: i64) -> u64 {
        self.look_at_ms
            .map_or(0, |at| at.saturating_sub(now_ms).clamp(0, LOOK_WAIT_MAX_MS) as u64)
    }
}

impl WorkMessage {
    /// A message for the operation, with nothing else.
    pub fn for_operation(operation_id: OperationId) -> Self {
        Self {
            operation_id,
            poll: None,
            look: false,
        }
    }

    /// The first look of the chain of looks `rec` names
    /// ([`OperationRecord::poll_chain`]).
    pub fn first_look(rec: &OperationRecord) -> Self {
        Self {
            poll: Some(PollHistory {
                chain: rec.poll_chain,
                ..PollHistory::default()
            }),
            ..Self::for_operation(rec.operation_id.clone())
        }
    }

    /// A look at the wait `operation_id` just began ([`Self::look`]).
    pub fn look_at(operation_id: OperationId) -> Self {
        Self {
            look: true,
            ..Self::for_operation(operation_id)
        }
    }
}

impl WorkMessage {
    /// Parses a body: the operation id, and a poll's history if any.
    pub fn parse(body: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(body)
    }
}

/// A remote outcome as dispatch received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RecoveredOutcome {
    Accepted {
        job_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_at: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held_credits: Option<f64>,
    },
    FailedWithJob {
        job_id: String,
        error: serde_json::Value,
    },
}

/// What dispatch puts on the recovery channel when it cannot write an
/// outcome: enough to apply it later, only under the claim it was received in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryMessage {
    pub operation_id: OperationId,
    pub claim_token: String,
    #[serde(flatten)]
    pub outcome: RecoveredOutcome,
    /// The response exactly as received.
    pub raw_response: String,
    pub received_at: DateTime<Utc>,
}

impl RecoveryMessage {
    pub fn accepted(rec: &OperationRecord, token: &str, job: &AcceptedJob, raw: &str, at: DateTime<Utc>) -> Self {
        Self {
            operation_id: rec.operation_id.clone(),
            claim_token: token.to_owned(),
            outcome: RecoveredOutcome::Accepted {
                job_id: job.job_id.clone(),
                state: job.state.clone(),
                model: job.model.clone(),
                created_at: job.created_at.clone(),
                held_credits: job.held_credits,
            },
            raw_response: raw.to_owned(),
            received_at: at,
        }
    }
}
