//! `resolve`: an operator's decision on an operation's case, tied to the
//! version it was decided on.

use serde_json::json;

use crate::api::{Api, Failure, enc};
use crate::cli::Action;
use crate::print::{emit, s};

pub(crate) async fn resolve(api: &Api, json: bool, id: &str, action: Action) -> Result<(), Failure> {
    let (name, job_id, decision) = match action {
        Action::Attach { job_id, decision } => ("attach_remote_job", Some(job_id), decision),
        Action::ConfirmNotCreated(d) => ("confirm_not_created", None, d),
        Action::ReleaseHold(d) => ("release_hold", None, d),
        Action::MarkSettled(d) => ("mark_settled", None, d),
        Action::RedriveDelivery(d) => ("redrive_delivery", None, d),
        Action::Abandon(d) => ("abandon", None, d),
    };
    let mut body = json!({"action": name, "reason": decision.reason});
    if let Some(job) = job_id {
        body["job_id"] = json!(job);
    }
    let view = format!("/v1/operations/{}", enc(id));
    let version = match decision.version {
        Some(v) => v,
        None => {
            let seen = api.get(&view).await?;
            let v = seen["version"]
                .as_u64()
                .ok_or_else(|| Failure::Transport("the operation view has no version".into()))?;
            eprintln!(
                "deciding on {id} at version {v}: {} ({}), case {}",
                s(&seen["phase"]),
                s(&seen["delivery_state"]),
                s(&seen["reconciliation_case"]["reason"])
            );
            v
        }
    };
    let op = api
        .call_if_match(
            reqwest::Method::POST,
            &format!("{view}/resolution"),
            Some(body),
            Some(version),
        )
        .await?;
    emit(json, &op, |op| {
        println!(
            "resolved: {} is now {} ({})",
            s(&op["operation_id"]),
            s(&op["phase"]),
            s(&op["delivery_state"])
        );
    });
    Ok(())
}
