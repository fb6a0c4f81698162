//! How a run's trace shows records and ids.

#[allow(
    unused_imports,
    reason = "the crate root's imports, shared by every file of the simulator"
)]
use std::collections::BTreeMap;

use genace_core::record::OperationRecord;

/// A record's state as the trace shows it.
pub(crate) fn state_line(rec: &OperationRecord) -> String {
    let mut state = format!(
        "v{} {} {:?} job={} case={}",
        rec.version,
        rec.phase.as_str(),
        rec.delivery_state,
        rec.remote_job_id.as_deref().unwrap_or("-"),
        rec.case.as_ref().map_or("-", |c| c.reason.as_str()),
    );
    if rec.spend_hold.is_some() {
        state.push_str(" hold=spend_limit");
    }
    if rec.capacity_hold.is_some() {
        state.push_str(" hold=capacity");
    }
    if let Some(p) = rec.ledger_phase {
        state.push_str(&format!(" counts_as={}", p.as_str()));
    }
    if let Some(r) = rec.reserved_credits {
        state.push_str(&format!(" {}={r}", rec.media_type.as_str()));
    }
    state
}

pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(11)]
}
