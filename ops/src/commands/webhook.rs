//! `webhook`: a tenant's single webhook setting.

use serde_json::json;

use crate::api::{Api, Failure, enc};
use crate::cli::Webhook;
use crate::print::{emit, print_webhook};

pub(crate) async fn webhook(api: &Api, json: bool, command: Webhook) -> Result<(), Failure> {
    let path = |tenant: &str| format!("/v1/tenants/{}/webhook", enc(tenant));
    let hook = match command {
        Webhook::Show { tenant } => api.get(&path(&tenant)).await?,
        Webhook::Remove { tenant } => api.call(reqwest::Method::DELETE, &path(&tenant), None).await?,
        Webhook::Set {
            tenant,
            hook_url,
            secret_id,
            events,
        } => {
            let events: Vec<&str> = events.iter().map(|e| e.trim()).filter(|e| !e.is_empty()).collect();
            let body = json!({"url": hook_url, "secret_id": secret_id, "events": events});
            api.call(reqwest::Method::PUT, &path(&tenant), Some(body)).await?
        }
    };
    emit(json, &hook, print_webhook);
    Ok(())
}
