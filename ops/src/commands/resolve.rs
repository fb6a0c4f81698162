//! `resolve`: an operator's decision on an operation's case, tied to the
//! version it was decided on.

use genace_client::Client;

use crate::api::Failure;
use crate::cli::Action;
use crate::print::{emit, s};

pub(crate) async fn resolve(api: &Client, json: bool, id: &str, action: Action) -> Result<(), Failure> {
    let (name, job_id, decision) = match action {
        Action::Attach { job_id, decision } => ("attach_remote_job", Some(job_id), decision),
        Action::ConfirmNotCreated(d) => ("confirm_not_created", None, d),
        Action::ReleaseHold(d) => ("release_hold", None, d),
        Action::MarkSettled(d) => ("mark_settled", None, d),
        Action::RedriveDelivery(d) => ("redrive_delivery", None, d),
        Action::Abandon(d) => ("abandon", None, d),
    };
    let version = match decision.version {
        Some(v) => v,
        None => {
            let seen = api.operation(id).await?.view;
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
        .resolve(id, version, name, &decision.reason, job_id.as_deref())
        .await?
        .view;
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
