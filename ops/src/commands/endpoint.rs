//! `endpoint`: the webhook endpoints a tenant manages, their secrets and
//! their attempt logs.

use serde_json::{Value, json};

use crate::api::{Api, Failure, enc, query};
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

pub(crate) async fn endpoint(api: &Api, json: bool, tenant: &str, action: EndpointAction) -> Result<(), Failure> {
    let base = "/v1/webhooks/endpoints";
    let t = query(&[("tenant", Some(tenant))]);
    let one = |id: &str| format!("{base}/{}", enc(id));
    let answer = match action {
        EndpointAction::List => {
            let all = api.get(&format!("{base}{t}")).await?;
            emit(json, &all, print_endpoints);
            return Ok(());
        }
        EndpointAction::Create {
            hook_url,
            description,
            events,
        } => {
            let body = json!({"url": hook_url, "description": description, "events": events_of(&events)});
            api.call(reqwest::Method::POST, &format!("{base}{t}"), Some(body))
                .await?
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
            let path = format!("{}{t}", one(&endpoint_id));
            api.call(reqwest::Method::PATCH, &path, Some(body)).await?
        }
        EndpointAction::Delete { endpoint_id } => {
            api.call(reqwest::Method::DELETE, &format!("{}{t}", one(&endpoint_id)), None)
                .await?;
            emit(json, &json!({"deleted": endpoint_id}), |v| {
                println!("deleted {}", s(&v["deleted"]))
            });
            return Ok(());
        }
        EndpointAction::Rotate { endpoint_id } => {
            let path = format!("{}/rotate{t}", one(&endpoint_id));
            api.call(reqwest::Method::POST, &path, None).await?
        }
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
                ("cursor", page.cursor.as_deref()),
            ]);
            let log = api.get(&format!("{}/attempts{q}", one(&endpoint_id))).await?;
            emit(json, &log, print_attempts);
            return Ok(());
        }
    };
    emit(json, &answer, print_endpoint);
    Ok(())
}
