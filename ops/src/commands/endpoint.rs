//! `endpoint`: the webhook endpoints a tenant manages, their secrets and
//! their attempt logs.

use genace_client::Client;
use serde_json::{Value, json};

use crate::api::{Failure, page_json, query};
use crate::cli::EndpointAction;
use crate::print::{emit, print_attempts, print_endpoint, print_endpoints, s};

/// Event types as given on the command line, blanks dropped.
fn events_of(events: &[String]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty())
        .collect()
}

/// A PATCH body naming only what is given.
fn update_body(
    url: Option<String>,
    description: Option<String>,
    events: Option<Vec<String>>,
    disable: bool,
    enable: bool,
) -> Value {
    let mut body = serde_json::Map::new();
    if let Some(u) = url {
        body.insert("url".into(), json!(u));
    }
    if let Some(d) = description {
        body.insert("description".into(), json!(d));
    }
    if let Some(e) = events {
        body.insert("events".into(), json!(e));
    }
    if disable || enable {
        body.insert("enabled".into(), json!(enable));
    }
    Value::Object(body)
}

pub(crate) async fn endpoint(api: &Client, json: bool, tenant: &str, action: EndpointAction) -> Result<(), Failure> {
    let t = Some(tenant);
    let answer = match action {
        EndpointAction::List => {
            let all = api.endpoints(t).await?;
            emit(json, &all, print_endpoints);
            return Ok(());
        }
        EndpointAction::Create {
            hook_url,
            description,
            events,
        } => {
            let body = json!({"url": hook_url, "description": description, "events": events_of(&events)});
            api.create_endpoint(t, &body).await?
        }
        EndpointAction::Update {
            endpoint_id,
            hook_url,
            description,
            events,
            disable,
            enable,
        } => {
            let body = update_body(hook_url, description, events.as_deref().map(events_of), disable, enable);
            api.update_endpoint(t, &endpoint_id, &body).await?
        }
        EndpointAction::Delete { endpoint_id } => {
            api.delete_endpoint(t, &endpoint_id).await?;
            emit(json, &json!({"deleted": endpoint_id}), |v| {
                println!("deleted {}", s(&v["deleted"]))
            });
            return Ok(());
        }
        EndpointAction::Rotate { endpoint_id } => api.rotate_endpoint(t, &endpoint_id).await?,
        EndpointAction::Attempts {
            endpoint_id,
            status,
            page,
        } => {
            let limit = page.limit.map(|l| l.to_string());
            let q = query(&[
                ("tenant", Some(tenant)),
                ("status", status.as_deref()),
                ("limit", limit.as_deref()),
            ]);
            let log = api
                .endpoint_attempts_page(&endpoint_id, &q, page.cursor.as_deref())
                .await?;
            let log = page_json("attempts", log);
            emit(json, &log, print_attempts);
            return Ok(());
        }
    };
    emit(json, &answer, print_endpoint);
    Ok(())
}
