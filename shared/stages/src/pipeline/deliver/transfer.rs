//! Delivery's transfer of one output: open the download, stream it into
//! storage (one put, or parts), hash it on the way, and verify what the
//! store kept, all within the invocation's deadline.

use base64::Engine;
use sha2::{Digest, Sha256};
use tracing::warn;

use super::{Deliverer, TransferError, extension, stored_content_type};
use crate::ports::Ports;
use crate::ports::downloads::{DownloadBody, DownloadError, Downloads};
use crate::ports::outputs::{ObjectStore, PartReceipt, composite_sha256, object_key};
use genace_core::domain::hex;
use genace_core::record::{CaseReason, DeliveredObject, OperationRecord, OutputRef};

impl<P: Ports> Deliverer<P>
where
    P::Downloads: Downloads,
{
    /// Streams one output into storage and verifies it, within `deadline`:
    /// open the download, store it (one put, or a multipart upload), check
    /// what was stored.
    pub(super) async fn transfer(
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
