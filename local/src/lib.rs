//! Genace operations on one machine: local resource provisioning, the
//! development JWT authorizer, the intake HTTP server and the runner that
//! hosts every stage's handler.

use genace_stages::config::{QueueUrls, ResourceNames};

pub mod artifacts;
#[cfg(feature = "browser")]
pub mod browser;
pub mod console;
pub mod devauth;
pub mod events;
pub mod faults;
pub mod meter;
pub mod runner;
pub mod serve;
pub mod standin;
pub mod template;
pub mod traces;

/// The local stack's account id (moto's fixed account).
pub const LOCAL_ACCOUNT: &str = "123456789012";

/// The local stack's settings: the environment, and where it does not
/// name a queue, the URL moto gives the default queue of that name.
pub fn local_config(endpoint: &str) -> Result<genace_stages::config::Config, String> {
    let queues = local_queue_urls(endpoint, &ResourceNames::with_prefix(""));
    let vars = |name: &str| {
        genace_app::env_var(name).or_else(|| {
            let url = match name {
                "DISPATCH_QUEUE_URL" => &queues.dispatch,
                "POLL_QUEUE_URL" => &queues.poll,
                "DELIVER_QUEUE_URL" => &queues.deliver,
                "RECOVERY_QUEUE_URL" => &queues.recovery,
                "WEBHOOK_QUEUE_URL" => &queues.webhooks,
                "WEBHOOK_DLQ_URL" => &queues.webhook_dead_letters,
                "WAKE_QUEUE_URL" => &queues.wake,
                _ => return None,
            };
            Some(url.clone())
        })
    };
    genace_stages::config::Config::from_vars(&vars).map_err(|e| e.to_string())
}

/// The queue URLs moto forms under `endpoint` for `names`.
pub fn local_queue_urls(endpoint: &str, names: &ResourceNames) -> QueueUrls {
    QueueUrls::under(&format!("{}/{LOCAL_ACCOUNT}", endpoint.trim_end_matches('/')), names)
}
