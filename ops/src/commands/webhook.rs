//! `webhook`: a tenant's single webhook setting.

use genace_client::Client;
use serde_json::json;

use crate::api::Failure;
use crate::cli::Webhook;
use crate::print::{emit, print_webhook};

pub(crate) async fn webhook(api: &Client, json: bool, command: Webhook) -> Result<(), Failure> {
    let hook = match command {
        Webhook::Show { tenant } => api.webhook(&tenant).await?,
        Webhook::Remove { tenant } => api.remove_webhook(&tenant).await?,
        Webhook::Set {
            tenant,
            hook_url,
            secret_id,
            events,
        } => {
            let events: Vec<&str> = events.iter().map(|e| e.trim()).filter(|e| !e.is_empty()).collect();
            let body = json!({"url": hook_url, "secret_id": secret_id, "events": events});
            api.set_webhook(&tenant, &body).await?
        }
    };
    emit(json, &hook, print_webhook);
    Ok(())
}
