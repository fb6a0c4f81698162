//! Structured logs: JSON lines in Lambda (CloudWatch), readable text locally.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once. `LOG_FORMAT=text` selects plain text;
/// `RUST_LOG` sets the filter (default `info`).
pub fn init() {
    let filter = crate::env_var("RUST_LOG")
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let text = crate::env_var("LOG_FORMAT").is_some_and(|v| v.eq_ignore_ascii_case("text"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let _ = if text {
        builder.try_init()
    } else {
        builder.json().flatten_event(true).without_time().try_init()
    };
}
