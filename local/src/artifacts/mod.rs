//! The artifact mode of the local stack: the deployment's own `bootstrap`
//! binaries, each run by the Lambda Runtime Interface Emulator (the program
//! `sam local` runs inside its containers), with this process playing the
//! AWS side the way `sam local start-api`, `sam local start-lambda` and an
//! event source poller would:
//!
//! - every function of `infra/template.yaml` gets the environment the
//!   template gives it, resolved for local (its `!Ref`s to the table, queues
//!   and bucket mapped to the local names and URLs), plus the local-only
//!   overlay: the local AWS endpoint and credentials, the Genace key, and any
//!   `LOCAL_OVERRIDE_<NAME>=value` of this process's environment;
//! - HTTP requests are matched against the template's HTTP API routes,
//!   checked like the JWT authorizer (401, and 403 without a required
//!   scope), and sent to the route's function as API Gateway HTTP API
//!   (payload v2) events;
//! - each SQS event source mapping of the template is a consumer with its
//!   batch size, batching window and `ReportBatchItemFailures`, invoking its
//!   function with real SQS events;
//! - the sweep is invoked with a scheduler event on a timer.
//!
//! The emulator runs one invocation at a time (a second concurrent one
//! crashes it), so each function runs as a pool of emulator instances, one
//! invocation each at a time, as Lambda runs one per execution environment.

mod function;
mod gateway;
mod settings;
mod wiring;

use std::collections::HashMap;

use genace_stages::config::Config;
use tokio::task::JoinSet;

use crate::runner::{RunnerSettings, Running, phase_log};
use crate::template::Template;

pub use gateway::{apigw_event, http_response};
use settings::local_locals;
pub use settings::{ArtifactSettings, local_overlay};
use wiring::{Shared, bind_api, serve_api, spawn_events_pipe, spawn_queue_sources, spawn_schedule, start_function};

/// Starts every function of the template under the emulator and the AWS
/// side around them.
pub async fn start(
    sdk: &aws_config::SdkConfig,
    config: Config,
    runner: RunnerSettings,
    settings: ArtifactSettings,
) -> Result<Running, String> {
    let template = Template::load(&settings.template.to_string_lossy())?;
    let locals = local_locals(&config, &settings.params);
    let mut overlay = local_overlay(std::env::vars());
    // The endpoint this process was given (flag or environment) is the one
    // the functions use.
    if let Some(endpoint) = sdk.endpoint_url() {
        overlay.insert("AWS_ENDPOINT_URL".to_owned(), endpoint.to_owned());
    }
    std::fs::create_dir_all(&settings.logs).map_err(|e| format!("{}: {e}", settings.logs.display()))?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let shared = Shared {
        template: &template,
        locals: &locals,
        overlay: &overlay,
        settings: &settings,
        runner: &runner,
        http: &http,
    };
    let listener = bind_api(&runner).await?;
    let mut tasks = JoinSet::new();
    let mut functions = HashMap::new();
    for name in template.functions() {
        let function = start_function(&shared, name.clone(), &mut tasks).await?;
        functions.insert(name, function);
    }
    serve_api(&shared, &functions, &mut tasks, listener).await?;
    spawn_queue_sources(sdk, &shared, &functions, &mut tasks)?;
    spawn_schedule(&shared, &functions, &mut tasks);
    spawn_events_pipe(sdk, &config, &shared, &functions, &mut tasks);
    if runner.phase_log {
        tasks.spawn(phase_log(genace_aws::clients::dynamodb(sdk), config.table.clone()));
    }
    Ok(Running { tasks })
}

#[cfg(test)]
mod tests;
