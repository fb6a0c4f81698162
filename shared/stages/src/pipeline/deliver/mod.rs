//! Deliver: stream each finished output into S3, verify it, then record
//! `delivered`. A failed upload retries delivery of the same outputs; it
//! never renders or POSTs again.

mod transfer;

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use tracing::{info, warn};

use crate::config::Config;
use crate::pipeline::stage::{Stage, StageError, case_opened, commit_failure};
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, commit_with, write_attempts};
use crate::ports::downloads::Downloads;
use crate::ports::metrics::Metrics;
use crate::ports::queue::WorkQueue;
use genace_core::domain::OperationId;
use genace_core::machine::{self, Input, Refusal};
use genace_core::messages::Queue;
use genace_core::messages::WorkMessage;
use genace_core::record::{CaseReason, DeliveryState, Fault, OperationRecord, Phase};

/// Content types stored as they are; anything else is stored as
/// `application/octet-stream`, so an output can never be served as a page.
pub fn stored_content_type(claimed: &str) -> String {
    let essence = claimed.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let plain = |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    let allowed = match essence.split_once('/') {
        Some(("video", rest)) | Some(("image", rest)) => plain(rest) && rest != "svg+xml",
        _ => false,
    };
    if allowed {
        essence
    } else {
        "application/octet-stream".into()
    }
}

// ---------------------------------------------------------------- the stage

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliverResult {
    Missing,
    /// Not rendered, or delivery already ended.
    NotDeliverable(Phase, DeliveryState),
    /// Another deliverer holds a live claim.
    Duplicate,
    Delivered {
        objects: usize,
    },
    /// This attempt failed; the next is enqueued after `next_attempt_seconds`.
    Retrying {
        attempts: u32,
        next_attempt_seconds: u32,
    },
    /// The bound was reached: `delivery_failed` with a case.
    GaveUp {
        attempts: u32,
    },
    /// An output can never be fetched (refused URL, over the byte cap):
    /// `delivery_failed` with a case after this one attempt.
    Refused {
        reason: CaseReason,
    },
}

pub struct Deliverer<P: Ports> {
    pub store: P::Store,
    pub queue: P::Queue,
    pub objects: P::Objects,
    /// Where outputs are fetched, behind the output URL guard.
    pub downloads: P::Downloads,
    pub config: Config,
    pub clock: P::Clock,
    /// Where the stage counts what happened.
    pub metrics: Metrics,
}

/// Why one output could not be delivered. The reason never carries a URL
/// or a query string: it is shown to tenants and operators.
#[derive(Debug, thiserror::Error)]
#[error("output {index}: {reason}")]
pub struct TransferError {
    pub index: usize,
    pub reason: String,
    /// `Some` when retrying cannot help: the case to open at once.
    pub permanent: Option<CaseReason>,
}

/// Delay before the retry that follows attempt number `attempts` (1-based):
/// `base`, then doubling, at most SQS's longest delay.
fn delivery_backoff_seconds(base: u32, attempts: u32) -> u32 {
    base.max(1)
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(crate::ports::queue::MAX_DELAY_SECONDS)
}

/// File extension for a content type, else the URL's own, else `bin`.
fn extension(content_type: &str, url: &str) -> String {
    let known = match content_type.split(';').next().unwrap_or("").trim() {
        "video/mp4" => Some("mp4"),
        "video/webm" => Some("webm"),
        "video/quicktime" => Some("mov"),
        "image/png" => Some("png"),
        "image/jpeg" => Some("jpg"),
        "image/webp" => Some("webp"),
        "image/gif" => Some("gif"),
        _ => None,
    };
    known
        .map(str::to_owned)
        .or_else(|| {
            let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
            let path = after_scheme.split(['?', '#']).next()?;
            let last = path.split_once('/')?.1.rsplit('/').next()?;
            let (_, ext) = last.rsplit_once('.')?;
            (!ext.is_empty() && ext.len() <= 5 && ext.bytes().all(|b| b.is_ascii_alphanumeric()))
                .then(|| ext.to_ascii_lowercase())
        })
        .unwrap_or_else(|| "bin".into())
}

impl<P: Ports> Stage for Deliverer<P>
where
    P::Downloads: Downloads,
{
    type Message = WorkMessage;
    type Outcome = DeliverResult;
    const NAME: &'static str = "deliver";

    async fn handle(&self, message: WorkMessage) -> Result<DeliverResult, StageError> {
        self.deliver(&message.operation_id).await
    }
}

impl<P: Ports> Deliverer<P>
where
    P::Downloads: Downloads,
{
    pub async fn deliver(&self, id: &OperationId) -> Result<DeliverResult, StageError> {
        let now = self.clock.now();
        let Some(rec) = self.store.get(id, now).await? else {
            return Ok(DeliverResult::Missing);
        };
        let token = uuid::Uuid::new_v4().to_string();
        let policy = self.config.policy;
        let faults = self.config.fault_injection;
        let claimed = commit_with(&self.store, rec, write_attempts(), |r| {
            // The fault directive the claim consumes fires in this attempt.
            let fault = r.fault.filter(|f| faults && f.fires_in_delivery());
            machine::transition(r, Input::ClaimDelivery { token: &token }, now, &policy).map(|next| (next, fault))
        })
        .await;
        let (claimed, fault) = match claimed {
            Ok(claimed) => claimed,
            Err(CommitError::Refused { refusal, current }) => {
                return match refusal {
                    Refusal::LeaseLive { .. } => Ok(DeliverResult::Duplicate),
                    Refusal::AttemptsExhausted(_) => self.give_up(*current).await,
                    _ => Ok(DeliverResult::NotDeliverable(current.phase, current.delivery_state)),
                };
            }
            Err(CommitError::Store(e)) => return Err(e.into()),
        };

        let started = std::time::Instant::now();
        let deadline = tokio::time::Instant::now() + self.config.delivery_attempt_deadline;
        let outputs = claimed.outputs.clone().unwrap_or_default();
        let mut objects = Vec::with_capacity(outputs.len());
        for (index, output) in outputs.iter().enumerate() {
            let inject = fault == Some(Fault::DeliverUploadFails) && index == 0;
            match self.transfer(&claimed, index, output, inject, deadline).await {
                Ok(obj) => objects.push(obj),
                Err(e) => return self.attempt_failed(claimed, &token, &e).await,
            }
        }
        if fault == Some(Fault::DeliverAfterUpload) {
            return Err(StageError::Crashed("deliver.after_upload"));
        }
        let count = objects.len();
        let bytes: u64 = objects.iter().map(|o| o.bytes).sum();
        let done = commit(&self.store, claimed, write_attempts(), |r| {
            machine::transition(
                r,
                Input::Delivered {
                    token: &token,
                    objects: &objects,
                },
                self.clock.now(),
                &policy,
            )
        })
        .await
        .map_err(commit_failure)?;
        self.metrics.emit("DeliveredBytes", bytes as f64, "Bytes", &[]);
        self.metrics.emit(
            "DeliveryDuration",
            started.elapsed().as_millis() as f64,
            "Milliseconds",
            &[],
        );
        info!(operation_id = %id, tenant = %done.tenant_id, remote_job_id = ?done.remote_job_id, phase = done.phase.as_str(), objects = count, bytes, "delivered");
        Ok(DeliverResult::Delivered { objects: count })
    }

    /// Every attempt was used and the last one stopped without reporting.
    async fn give_up(&self, rec: OperationRecord) -> Result<DeliverResult, StageError> {
        let now = self.clock.now();
        let rec = match commit(&self.store, rec, write_attempts(), |r| {
            machine::transition(r, Input::DeliveryLapsed, now, &self.config.policy)
        })
        .await
        {
            Ok(rec) => rec,
            Err(CommitError::Refused { current, .. }) => {
                return Ok(DeliverResult::NotDeliverable(current.phase, current.delivery_state));
            }
            Err(CommitError::Store(e)) => return Err(e.into()),
        };
        case_opened(&self.metrics, &rec);
        Ok(DeliverResult::GaveUp {
            attempts: rec.delivery_attempts,
        })
    }

    async fn attempt_failed(
        &self,
        claimed: OperationRecord,
        token: &str,
        error: &TransferError,
    ) -> Result<DeliverResult, StageError> {
        let now = self.clock.now();
        let policy = self.config.policy;
        let detail = error.to_string();
        warn!(operation_id = %claimed.operation_id, error = %detail, permanent = error.permanent.is_some(), "delivery attempt failed");
        if let Some(reason) = error.permanent {
            let rec = commit(&self.store, claimed, write_attempts(), |r| {
                machine::transition(
                    r,
                    Input::DeliveryRefused(genace_core::machine::RefusedDelivery {
                        token,
                        reason,
                        evidence: &detail,
                    }),
                    now,
                    &policy,
                )
            })
            .await
            .map_err(commit_failure)?;
            case_opened(&self.metrics, &rec);
            return Ok(DeliverResult::Refused { reason });
        }
        let wait = delivery_backoff_seconds(self.config.delivery_backoff_seconds, claimed.delivery_attempts);
        let retry_at = now + chrono::Duration::seconds(wait as i64);
        let rec = commit(&self.store, claimed, write_attempts(), |r| {
            machine::transition(
                r,
                Input::DeliveryFailed {
                    token,
                    error: &detail,
                    retry_at,
                },
                now,
                &policy,
            )
        })
        .await
        .map_err(commit_failure)?;
        if rec.delivery_state == DeliveryState::DeliveryFailed {
            case_opened(&self.metrics, &rec);
            return Ok(DeliverResult::GaveUp {
                attempts: rec.delivery_attempts,
            });
        }
        self.queue.enqueue(Queue::Deliver, &rec.operation_id, wait).await?;
        Ok(DeliverResult::Retrying {
            attempts: rec.delivery_attempts,
            next_attempt_seconds: wait,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_content_types_come_from_an_allow_list() {
        assert_eq!(stored_content_type("video/mp4"), "video/mp4");
        assert_eq!(stored_content_type("Image/PNG; charset=binary"), "image/png");
        for risky in [
            "text/html",
            "image/svg+xml",
            "application/javascript",
            "",
            "video/",
            "video/mp4<script>",
        ] {
            assert_eq!(stored_content_type(risky), "application/octet-stream", "{risky}");
        }
    }

    #[test]
    fn keys_and_extensions_are_deterministic() {
        let url = "https://cdn/x/render.MOV?sig=1.exe";
        assert_eq!(extension("video/mp4", url), "mp4");
        assert_eq!(extension("application/octet-stream", url), "mov");
        assert_eq!(extension("application/octet-stream", "https://cdn/x/blob"), "bin");
        assert_eq!(extension("application/octet-stream", "https://cdn/x.y/blob#a.b"), "bin");
        assert_eq!(extension("application/octet-stream", "https://cdn"), "bin");
        assert_eq!(delivery_backoff_seconds(5, 1), 5);
        assert_eq!(delivery_backoff_seconds(5, 2), 10);
        assert_eq!(delivery_backoff_seconds(5, 20), 900);
        assert_eq!(delivery_backoff_seconds(0, 1), 1);
    }
}
