//! Where an operation is in its lifecycle, and where its delivery is.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Recorded, not yet claimed for dispatch.
    Prepared,
    /// One dispatcher holds the claim and may POST once.
    Submitting,
    /// Genace accepted the job and its id is saved.
    Accepted,
    /// Genace reported the job completed.
    Rendered,
    /// Genace reported the job failed.
    RenderFailed,
    /// Genace answered 502 with a job id: a failed job whose refund needs settling.
    SubmitFailed,
    /// Genace refused the request definitively; nothing was created.
    Rejected,
    /// The outcome of a POST is unknown; a reconciliation case is open.
    Uncertain,
    /// An operator closed the operation without further work.
    Abandoned,
    /// Taken back before the dispatch claim (by its tenant, an operator, or
    /// its dispatch deadline): no job was ever created for it.
    Cancelled,
}

impl Phase {
    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 10] = [
        Phase::Prepared,
        Phase::Submitting,
        Phase::Uncertain,
        Phase::Accepted,
        Phase::Rendered,
        Phase::RenderFailed,
        Phase::SubmitFailed,
        Phase::Rejected,
        Phase::Abandoned,
        Phase::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Prepared => "prepared",
            Phase::Submitting => "submitting",
            Phase::Accepted => "accepted",
            Phase::Rendered => "rendered",
            Phase::RenderFailed => "render_failed",
            Phase::SubmitFailed => "submit_failed",
            Phase::Rejected => "rejected",
            Phase::Uncertain => "uncertain",
            Phase::Abandoned => "abandoned",
            Phase::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    NotCollected,
    Collecting,
    Delivered,
    DeliveryFailed,
}

impl DeliveryState {
    /// Every delivery state, in order.
    pub const ALL: [DeliveryState; 4] = [
        DeliveryState::NotCollected,
        DeliveryState::Collecting,
        DeliveryState::Delivered,
        DeliveryState::DeliveryFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::NotCollected => "not_collected",
            DeliveryState::Collecting => "collecting",
            DeliveryState::Delivered => "delivered",
            DeliveryState::DeliveryFailed => "delivery_failed",
        }
    }
}
