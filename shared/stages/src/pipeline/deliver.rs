//! Deliver: stream each finished output into S3, verify it, then record
//! `delivered`. A failed upload retries delivery of the same outputs; it
//! never renders or POSTs again.

use crate::ports::Ports;
use crate::ports::table::prelude::*;
use base64::Engine;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::config::Config;
use crate::pipeline::stage::{Stage, StageError, case_opened, commit_failure};
use crate::ports::clock::Clock;
use crate::ports::commit::{CommitError, commit, commit_with, write_attempts};
use crate::ports::downloads::{DownloadBody, DownloadError, Downloads};
use crate::ports::metrics::Metrics;
use crate::ports::outputs::{ObjectStore, PartReceipt, composite_sha256, object_key};
use crate::ports::queue::WorkQueue;
use genace_core::domain::{OperationId, hex};
use genace_core::machine::{self, Event, Refusal};
use genace_core::messages::Queue;
use genace_core::messages::WorkMessage;
use genace_core::record::{CaseReason, DeliveredObject, DeliveryState, Fault, OperationRecord, OutputRef, Phase};

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
            machine::transition(r, Event::ClaimDelivery { token: &token }, now, &policy).map(|next| (next, fault))
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
                Event::Delivered {
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
            machine::transition(r, Event::DeliveryLapsed, now, &self.config.policy)
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
                    Event::DeliveryRefused {
                        token,
                        reason,
                        evidence: &detail,
                    },
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
                Event::DeliveryFailed {
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

    /// Streams one output into storage and verifies it, within `deadline`:
    /// open the download, store it (one put, or a multipart upload), check
    /// what was stored.
    async fn transfer(
        &self,
        rec: &OperationRecord,
        index: usize,
        output: &OutputRef,
        inject_failure: bool,
        deadline: tokio::time::Instant,
    ) -> Result<DeliveredObject, TransferError> {
        let errors = Errors {
            index,
            cap: self.config.max_output_bytes,
        };
        let mut download = self.open(output, &errors, deadline).await?;
        let content_type = stored_content_type(
            &output
                .content_type
                .clone()
                .or_else(|| download.content_type.clone())
                .unwrap_or_default(),
        );
        let key = object_key(
            &self.config.output_prefix,
            rec,
            index,
            &extension(&content_type, &output.url),
        );
        let reading = Reading::new(&mut download.body, errors.cap, deadline);
        let stored = self
            .store_body(&key, &content_type, reading, inject_failure, &errors)
            .await?;
        self.verify(&key, &stored, &errors).await?;
        Ok(DeliveredObject {
            key,
            bytes: stored.bytes,
            sha256: stored.sha256,
            content_type,
        })
    }

    /// Opens the output's download: a refused URL or a declared size over
    /// the cap is permanent, anything else worth another attempt.
    async fn open(
        &self,
        output: &OutputRef,
        errors: &Errors,
        deadline: tokio::time::Instant,
    ) -> Result<crate::ports::downloads::Download<<P::Downloads as Downloads>::Body>, TransferError> {
        let opened = tokio::time::timeout_at(deadline, self.downloads.open(&output.url)).await;
        let download = match opened {
            Err(_) => {
                return Err(errors.fail("the attempt's deadline passed before the download answered".into()));
            }
            Ok(Err(DownloadError::Refused(why))) => return Err(errors.refuse(CaseReason::OutputUrlRefused, why)),
            Ok(Err(DownloadError::Failed(why))) => return Err(errors.fail(format!("download failed: {why}"))),
            Ok(Ok(d)) => d,
        };
        if !(200..300).contains(&download.status) {
            return Err(errors.fail(format!("download answered HTTP {}", download.status)));
        }
        if let Some(len) = download.content_length.filter(|len| *len > errors.cap) {
            return Err(errors.refuse(
                CaseReason::OutputTooLarge,
                format!("the output is {len} bytes, over the {}-byte limit", errors.cap),
            ));
        }
        Ok(download)
    }

    /// Stores the body under `key`: an output that fits in one part is one
    /// PutObject; larger ones stream as a multipart upload, aborted if it fails.
    async fn store_body(
        &self,
        key: &str,
        content_type: &str,
        mut reading: Reading<'_, <P::Downloads as Downloads>::Body>,
        inject_failure: bool,
        errors: &Errors,
    ) -> Result<Stored, TransferError> {
        let part_size = self.config.part_size.max(1);
        let (first, finished) = reading
            .fill(Vec::with_capacity(part_size), part_size)
            .await
            .map_err(|f| errors.stream(f))?;
        if finished && first.len() <= part_size {
            if inject_failure {
                return Err(errors.fail("injected: deliver.upload_fails".into()));
            }
            let (bytes, digest) = reading.finish();
            let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
            self.objects
                .put(key, content_type, first, &b64)
                .await
                .map_err(|e| errors.fail(e.to_string()))?;
            return Ok(Stored {
                bytes,
                sha256: hex(&digest),
                checksum: b64,
            });
        }
        let upload_id = self
            .objects
            .begin(key, content_type)
            .await
            .map_err(|e| errors.fail(e.to_string()))?;
        match self
            .stream_parts(key, &upload_id, reading, first, finished, inject_failure)
            .await
        {
            Ok((bytes, digest, parts)) => Ok(Stored {
                bytes,
                sha256: hex(&digest),
                checksum: composite_sha256(&parts),
            }),
            Err(failure) => {
                if let Err(e) = self.objects.abort(key, &upload_id).await {
                    warn!(key, error = %e, "aborting the multipart upload failed; the bucket lifecycle rule will remove it");
                }
                Err(errors.stream(failure))
            }
        }
    }

    /// Checks the stored object against what was read: its size, and its
    /// checksum (whole-object, or a composite `<b64>-<parts>`) when the
    /// store returns one in the form we expect.
    async fn verify(&self, key: &str, stored: &Stored, errors: &Errors) -> Result<(), TransferError> {
        let head = self
            .objects
            .head(key)
            .await
            .map_err(|e| errors.fail(e.to_string()))?
            .ok_or_else(|| errors.fail("the stored object is missing after upload".into()))?;
        if head.bytes != stored.bytes {
            return Err(errors.fail(format!("stored {} bytes, downloaded {}", head.bytes, stored.bytes)));
        }
        if let Some(found) = head
            .checksum_sha256
            .as_deref()
            .filter(|c| c.contains('-') == stored.checksum.contains('-'))
            && found != stored.checksum
        {
            return Err(errors.fail(format!("stored checksum {found} differs from {}", stored.checksum)));
        }
        Ok(())
    }

    /// Uploads the rest of the body one part at a time, starting with
    /// `buffer` (what was read so far). At most one part (plus one network
    /// chunk) is held in memory.
    async fn stream_parts(
        &self,
        key: &str,
        upload_id: &str,
        mut reading: Reading<'_, <P::Downloads as Downloads>::Body>,
        mut buffer: Vec<u8>,
        mut finished: bool,
        inject_failure: bool,
    ) -> Result<(u64, [u8; 32], Vec<PartReceipt>), StreamFailure> {
        let part_size = self.config.part_size.max(1);
        let mut parts = Vec::new();
        loop {
            while buffer.len() >= part_size || (finished && (!buffer.is_empty() || parts.is_empty())) {
                let rest = if buffer.len() > part_size {
                    buffer.split_off(part_size)
                } else {
                    Vec::new()
                };
                let part = std::mem::replace(&mut buffer, rest);
                let number = parts.len() as i32 + 1;
                if inject_failure {
                    return Err(StreamFailure::Transient("injected: deliver.upload_fails".into()));
                }
                parts.push(
                    self.objects
                        .put_part(key, upload_id, number, part)
                        .await
                        .map_err(|e| StreamFailure::Transient(e.to_string()))?,
                );
            }
            if finished {
                break;
            }
            (buffer, finished) = reading.fill(buffer, part_size).await?;
        }
        self.objects
            .complete(key, upload_id, &parts)
            .await
            .map_err(|e| StreamFailure::Transient(e.to_string()))?;
        let (bytes, digest) = reading.finish();
        Ok((bytes, digest, parts))
    }
}

/// A download being read: hashed on the fly, bounded by the byte cap and
/// the attempt's deadline on every chunk.
/// What one output's upload stored: its size, its SHA-256 (hex) and the
/// checksum the store should report for it.
struct Stored {
    bytes: u64,
    sha256: String,
    checksum: String,
}

/// How one output's transfer fails: retryable, or permanent with the case
/// to open.
struct Errors {
    index: usize,
    cap: u64,
}

impl Errors {
    fn fail(&self, reason: String) -> TransferError {
        TransferError {
            index: self.index,
            reason,
            permanent: None,
        }
    }

    fn refuse(&self, case: CaseReason, reason: String) -> TransferError {
        TransferError {
            index: self.index,
            reason,
            permanent: Some(case),
        }
    }

    fn stream(&self, failure: StreamFailure) -> TransferError {
        match failure {
            StreamFailure::TooLarge => self.refuse(
                CaseReason::OutputTooLarge,
                format!("the output is larger than the {}-byte limit", self.cap),
            ),
            StreamFailure::Transient(reason) => self.fail(reason),
        }
    }
}

struct Reading<'a, B> {
    body: &'a mut B,
    hasher: Sha256,
    total: u64,
    cap: u64,
    deadline: tokio::time::Instant,
}

impl<'a, B: DownloadBody> Reading<'a, B> {
    fn new(body: &'a mut B, cap: u64, deadline: tokio::time::Instant) -> Self {
        Self {
            body,
            hasher: Sha256::new(),
            total: 0,
            cap,
            deadline,
        }
    }

    /// Appends chunks to `buffer` until it holds at least `want` bytes or the
    /// body ends; says whether it ended.
    async fn fill(&mut self, mut buffer: Vec<u8>, want: usize) -> Result<(Vec<u8>, bool), StreamFailure> {
        while buffer.len() < want {
            let chunk = match tokio::time::timeout_at(self.deadline, self.body.chunk()).await {
                Err(_) => {
                    return Err(StreamFailure::Transient(format!(
                        "the attempt's deadline passed after {} bytes",
                        self.total
                    )));
                }
                Ok(Err(e)) => {
                    return Err(StreamFailure::Transient(format!("download broke off: {e}")));
                }
                Ok(Ok(None)) => return Ok((buffer, true)),
                Ok(Ok(Some(chunk))) => chunk,
            };
            self.total += chunk.len() as u64;
            if self.total > self.cap {
                return Err(StreamFailure::TooLarge);
            }
            self.hasher.update(&chunk);
            buffer.extend_from_slice(&chunk);
        }
        Ok((buffer, false))
    }

    /// Bytes read and their SHA-256.
    fn finish(self) -> (u64, [u8; 32]) {
        (self.total, self.hasher.finalize().into())
    }
}

/// Why streaming one output stopped.
enum StreamFailure {
    TooLarge,
    Transient(String),
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
