//! Every scenario by name, and the one place that runs a name.

use crate::capacity;
use crate::context::{Context, Outcome};
use crate::scenarios::Scenario;

/// Every scenario, by name, in the order of the docs.
pub const SCENARIOS: [&str; 20] = [
    "concurrent-duplicates",
    "retry-after-acceptance",
    "changed-spec-conflicts",
    "reordered-keys",
    "lost-202",
    "502-with-job-id",
    "connection-reset",
    "crash-after-202",
    "crash-after-commit",
    "running-at-202",
    "failed-job-read",
    "upload-fails-once",
    "tenant-isolation",
    "null-outputs-until-completion",
    "events-happy-path",
    "events-lost-202",
    "cancel-while-held",
    "deadline-while-held",
    "list-pages",
    "capacity-burst",
];

pub async fn run(name: &str, ctx: &Context) -> Outcome {
    let s = Scenario::new(name, ctx);
    match name {
        "concurrent-duplicates" => s.concurrent_duplicates().await,
        "retry-after-acceptance" => s.retry_after_acceptance().await,
        "changed-spec-conflicts" => s.changed_spec_conflicts().await,
        "reordered-keys" => s.reordered_keys().await,
        "lost-202" => s.lost_202().await,
        "502-with-job-id" => s.failed_with_job().await,
        "connection-reset" => s.connection_reset().await,
        "crash-after-202" => s.crash_after_202().await,
        "crash-after-commit" => s.crash_after_commit().await,
        "running-at-202" => s.running_at_202().await,
        "failed-job-read" => s.failed_job_read().await,
        "upload-fails-once" => s.upload_fails_once().await,
        "tenant-isolation" => s.tenant_isolation().await,
        "null-outputs-until-completion" => s.null_outputs().await,
        "events-happy-path" => s.events_happy_path().await,
        "events-lost-202" => s.events_lost_202().await,
        "cancel-while-held" => s.cancel_while_held().await,
        "deadline-while-held" => s.deadline_while_held().await,
        "list-pages" => s.list_pages().await,
        "capacity-burst" => capacity::burst(ctx).await,
        other => Err(format!("unknown scenario {other:?}")),
    }
}
