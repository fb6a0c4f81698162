//! The example of docs/clients.md, run by `tests/tests/client_local.rs`
//! against the local stack (and by hand: `GENACE_API_URL=... GENACE_TOKEN=...
//! cargo run -p genace-client --example quickstart`).

// [quickstart]
use genace_client::{Client, Error, Intent, Submitted, WaitFor, webhooks};
use std::time::Duration;

/// Submits one intent, waits for its outputs, and returns its operation.
pub async fn quickstart(api: &str, token: &str, key: &str) -> Result<genace_client::Operation, Error> {
    let genace = Client::new(api, token);
    let spec = serde_json::json!({"model": "genace-image-1", "prompt": "a lighthouse at dusk"});
    let intent = Intent::new(key, "image", spec); // keep it: a retry resends exactly this
    let op = match genace.submit(&intent).await? {
        Submitted::Created(op) | Submitted::Replayed(op) => op, // the same operation either way
        Submitted::KeyReused { operation_id, .. } => {
            return Err(Error::Unreadable(format!("key in use by {operation_id}")));
        }
        Submitted::Refused(problem) => return Err(Error::Api(problem)),
    };
    genace.wait(op.id(), WaitFor::Delivered, Duration::from_secs(600)).await
}

/// In the webhook receiver: the event, if the delivery verifies under either secret.
pub fn on_webhook(headers: &reqwest::header::HeaderMap, body: &[u8], secrets: &[&str]) -> Option<webhooks::Event> {
    webhooks::verify(secrets, headers, body).ok()
}
// [/quickstart]

#[allow(dead_code, reason = "the example is also a module of the end-to-end test")]
#[tokio::main]
async fn main() -> Result<(), Error> {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let op = quickstart(&var("GENACE_API_URL"), &var("GENACE_TOKEN"), "quickstart-1").await?;
    println!("{} {}", op.id(), op.delivery_state());
    let _ = on_webhook;
    Ok(())
}
