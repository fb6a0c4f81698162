//! What a listing of operations selects, and the order the store keeps
//! for it (creation time, then id; docs/decisions/0032-listing-operations.md).

use chrono::{DateTime, Utc};

use genace_core::record::{DeliveryState, OperationRecord, Phase};

/// What a listing selects. Every field is optional; all given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    pub phase: Option<Phase>,
    pub delivery_state: Option<DeliveryState>,
    /// Created strictly after this time.
    pub created_after: Option<DateTime<Utc>>,
    /// Created strictly before this time.
    pub created_before: Option<DateTime<Utc>>,
    /// The operation key starts with this text.
    pub key_prefix: Option<String>,
}

impl ListFilter {
    /// Whether `rec` is selected.
    pub fn matches(&self, rec: &OperationRecord) -> bool {
        self.phase.is_none_or(|p| rec.phase == p)
            && self.delivery_state.is_none_or(|d| rec.delivery_state == d)
            && self.created_after.is_none_or(|t| rec.created_at > t)
            && self.created_before.is_none_or(|t| rec.created_at < t)
            && self
                .key_prefix
                .as_deref()
                .is_none_or(|p| rec.operation_key.starts_with(p))
    }

    /// The lowest and highest list keys the creation bounds allow, both
    /// inclusive and a little wide (whole milliseconds); [`Self::matches`]
    /// is exact.
    pub fn key_range(&self) -> (String, String) {
        let low = self
            .created_after
            .map_or_else(|| "0".to_owned(), |t| format!("{:013}", t.timestamp_millis().max(0)));
        let high = self
            .created_before
            .map_or_else(|| "~".to_owned(), |t| format!("{:013}#~", t.timestamp_millis().max(0)));
        (low, high)
    }
}

/// Where a listing goes on: the operations that sort strictly before this
/// list key come next.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListPosition(pub String);

/// One page as the store returns it: at most the limit asked, newest first.
/// A page may hold fewer, even none, while `next` is set (filters are
/// applied after the index is read); the listing ends when `next` is None.
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage {
    pub records: Vec<OperationRecord>,
    pub next: Option<ListPosition>,
}

/// `<created_at in epoch ms, 13 digits>#<operation id>`: the list orders'
/// sort key. Fixed width, so text order is time order until the year 2286.
pub fn list_sort_key(rec: &OperationRecord) -> String {
    format!("{:013}#{}", rec.created_at.timestamp_millis().max(0), rec.operation_id)
}
