//! Small things every part of a run shares: the clock's start and the
//! digest the stand-ins name bodies by.

use chrono::{DateTime, TimeZone, Utc};

/// The SHA-256 of `data`, in hex.
pub(crate) fn hex_sha256(data: &[u8]) -> String {
    use sha2::Digest;
    genace_core::domain::hex(&sha2::Sha256::digest(data))
}

/// Where every run's clock starts.
pub(crate) fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
}

/// Where a calm run serves job `id`'s one output.
pub(crate) fn output_url(id: &str) -> String {
    format!("https://cdn.genace.example/{id}/0.png")
}
