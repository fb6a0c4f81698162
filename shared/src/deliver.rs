//! Deliver: stream each finished output into S3, verify it, then record
//! `delivered`. A failed upload retries delivery of the same outputs; it
//! never renders or POSTs again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, UrlPolicy};
use crate::domain::{OperationId, hex};
use crate::machine::{self, Refusal};
use crate::metrics;
use crate::queue::WorkMessage;
use crate::queue::{Queue, WorkQueue};
use crate::record::{CaseReason, DeliveredObject, DeliveryState, Fault, OperationRecord, OutputRef, Phase};
use crate::stage::{Stage, StageError, case_opened, commit_failure, write_attempts};
use crate::storage::{ObjectStore, PartReceipt, composite_sha256};
use crate::store::{CommitError, OperationStore, StoreError, commit};

// ---------------------------------------------------------------- URL guard

/// True for addresses on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254.0.0/16, the metadata service among them
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments, 192.0.0.0/24
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    let first = seg[0];
    // Forms that embed or translate to an IPv4 address are refused whole:
    // their IPv4 part could be anything, an internal address included.
    let ipv4_compatible = seg[..6].iter().all(|s| *s == 0); // ::a.b.c.d (and ::, ::1)
    let nat64 = seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0]; // 64:ff9b::/96
    let nat64_local = first == 0x64 && seg[1] == 0xff9b && seg[2] == 1; // 64:ff9b:1::/48
    let six_to_four = first == 0x2002; // 2002::/16
    let teredo = first == 0x2001 && seg[1] == 0; // 2001::/32
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ipv4_compatible
        || nat64
        || nat64_local
        || six_to_four
        || teredo
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link local
        || (first & 0xffc0) == 0xfec0 // site local (deprecated)
        || first == 0x2001 && seg[1] == 0x0db8) // documentation
}

fn ip_allowed(ip: IpAddr, policy: &UrlPolicy) -> bool {
    policy.allow_private || is_public(ip)
}

/// Checks what can be checked without DNS: scheme, host allow-list and
/// literal addresses. Host names are checked again after resolution.
pub fn check_url(url: &Url, policy: &UrlPolicy) -> Result<(), String> {
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        other => return Err(format!("scheme {other:?} is not allowed (https only)")),
    }
    let host = url.host_str().ok_or("the URL has no host")?.to_ascii_lowercase();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(0);
    let port_allowed = if policy.allowed_ports.is_empty() {
        // Local runs (private addresses allowed) serve outputs on any port.
        policy.allow_private || port == 443 || (port == 80 && policy.allow_http)
    } else {
        policy.allowed_ports.contains(&port)
    };
    if !port_allowed {
        return Err(format!("port {port} is not allowed"));
    }
    if !policy.allowed_hosts.is_empty() && !policy.allowed_hosts.iter().any(|h| h == bare) {
        return Err(format!("host {bare} is not in the allowed output hosts"));
    }
    if let Ok(ip) = bare.parse::<IpAddr>()
        && !ip_allowed(ip, policy)
    {
        return Err(format!("address {ip} is not public"));
    }
    Ok(())
}

/// Resolves host names for downloads and drops every address the policy
/// refuses, so neither a DNS answer nor a redirect can reach an internal address.
#[derive(Debug, Clone)]
struct GuardedResolver {
    policy: UrlPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found.iter().copied().filter(|a| ip_allowed(a.ip(), &policy)).collect();
            if allowed.is_empty() {
                let addrs: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                // The addresses go to the log only, never into a stored error.
                warn!(host, addresses = %addrs.join(", "), "an output host resolves only to refused addresses");
                return Err(Box::new(GuardRefused(format!(
                    "host {host} resolves only to addresses that are not allowed"
                ))) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client that fetches outputs under `policy`.
pub fn download_client(policy: &UrlPolicy) -> Result<reqwest::Client, reqwest::Error> {
    let redirect_policy = policy.clone();
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { policy: policy.clone() }))
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                attempt.error("too many redirects")
            } else if let Err(why) = check_url(attempt.url(), &redirect_policy) {
                attempt.error(why)
            } else {
                attempt.follow()
            }
        }))
        .connect_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(60))
        // A proxy from the environment would resolve names itself, past the guard.
        .no_proxy()
        .build()
}

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

pub struct Deliverer<S, Q, O, C = SystemClock> {
    pub store: S,
    pub queue: Q,
    pub objects: O,
    pub http: reqwest::Client,
    pub config: Config,
    pub clock: C,
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

const MAX_RACES: usize = 5;

/// Delay before the retry that follows attempt number `attempts` (1-based):
/// `base`, then doubling, at most 900 s (SQS's longest delay).
fn delivery_backoff_seconds(base: u32, attempts: u32) -> u32 {
    base.max(1)
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(900)
}

/// The URL guard refused an address after DNS resolution.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct GuardRefused(String);

/// A download error as text without the URL (it may carry a signed query
/// string), and whether the URL guard caused it (a refused redirect target
/// or resolved address), which no retry can change.
fn transport(e: reqwest::Error) -> (String, bool) {
    let mut refused = e.is_redirect();
    let timeout = e.is_timeout();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        refused |= inner.downcast_ref::<GuardRefused>().is_some();
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    if timeout && !text.contains("timed out") {
        text.push_str(" (timed out)");
    }
    (text, refused)
}

/// File extension for a content type, else the URL's own, else `bin`.
fn extension(content_type: &str, url: &Url) -> String {
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
            let last = url.path_segments()?.next_back()?;
            let (_, ext) = last.rsplit_once('.')?;
            (!ext.is_empty() && ext.len() <= 5 && ext.bytes().all(|b| b.is_ascii_alphanumeric()))
                .then(|| ext.to_ascii_lowercase())
        })
        .unwrap_or_else(|| "bin".into())
}

/// `<prefix>/<tenant>/<operation_id>/output-<index>.<ext>`
pub fn object_key(prefix: &str, rec: &OperationRecord, index: usize, ext: &str) -> String {
    format!(
        "{}/{}/{}/output-{index}.{ext}",
        prefix.trim_end_matches('/'),
        rec.tenant_id,
        rec.operation_id
    )
}

impl<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock> Stage for Deliverer<S, Q, O, C> {
    type Message = WorkMessage;
    type Outcome = DeliverResult;

    async fn handle(&self, message: WorkMessage) -> Result<DeliverResult, StageError> {
        self.deliver(&message.operation_id).await
    }
}

impl<S: OperationStore, Q: WorkQueue, O: ObjectStore, C: Clock> Deliverer<S, Q, O, C> {
    pub async fn deliver(&self, id: &OperationId) -> Result<DeliverResult, StageError> {
        let now = self.clock.now();
        let Some(mut rec) = self.store.get(id, now).await? else {
            return Ok(DeliverResult::Missing);
        };
        let token = uuid::Uuid::new_v4().to_string();
        let policy = self.config.policy;
        let (claimed, fault) = 'claim: {
            for _ in 0..MAX_RACES {
                let mut next = match machine::claim_delivery(&rec, &token, now, &policy) {
                    Ok(next) => next,
                    Err(Refusal::LeaseLive { .. }) => return Ok(DeliverResult::Duplicate),
                    Err(Refusal::AttemptsExhausted(_)) => return self.give_up(rec).await,
                    Err(_) => return Ok(DeliverResult::NotDeliverable(rec.phase, rec.delivery_state)),
                };
                let fault = next.fault.filter(|f| {
                    self.config.fault_injection && matches!(f, Fault::DeliverUploadFails | Fault::DeliverAfterUpload)
                });
                if fault.is_some() {
                    next.fault = None;
                }
                match self.store.apply(&rec, &next).await {
                    Ok(_) => break 'claim (next, fault),
                    // A retried claim write that had already landed is our claim.
                    Err(StoreError::Conflict(Some(current))) if *current == next => break 'claim (next, fault),
                    Err(StoreError::Conflict(Some(current))) => rec = *current,
                    Err(e) => return Err(e.into()),
                }
            }
            return Err(StoreError::Conflict(None).into());
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
            machine::delivered(r, &token, objects.clone(), self.clock.now(), &policy)
        })
        .await
        .map_err(commit_failure)?;
        metrics::emit("DeliveredBytes", bytes as f64, "Bytes", &[]);
        metrics::emit(
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
            machine::give_up_delivery(r, now)
        })
        .await
        {
            Ok(rec) => rec,
            Err(CommitError::Refused { current, .. }) => {
                return Ok(DeliverResult::NotDeliverable(current.phase, current.delivery_state));
            }
            Err(CommitError::Store(e)) => return Err(e.into()),
        };
        case_opened(&rec);
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
                machine::delivery_refused(r, token, reason, &detail, now)
            })
            .await
            .map_err(commit_failure)?;
            case_opened(&rec);
            return Ok(DeliverResult::Refused { reason });
        }
        let wait = delivery_backoff_seconds(self.config.delivery_backoff_seconds, claimed.delivery_attempts);
        let retry_at = now + chrono::Duration::seconds(wait as i64);
        let rec = commit(&self.store, claimed, write_attempts(), |r| {
            machine::delivery_attempt_failed(r, token, &detail, retry_at, now, &policy)
        })
        .await
        .map_err(commit_failure)?;
        if rec.delivery_state == DeliveryState::DeliveryFailed {
            case_opened(&rec);
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

    /// Streams one output into storage and verifies it, within `deadline`.
    async fn transfer(
        &self,
        rec: &OperationRecord,
        index: usize,
        output: &OutputRef,
        inject_failure: bool,
        deadline: tokio::time::Instant,
    ) -> Result<DeliveredObject, TransferError> {
        let fail = |reason: String| TransferError {
            index,
            reason,
            permanent: None,
        };
        let refuse = |case: CaseReason, reason: String| TransferError {
            index,
            reason,
            permanent: Some(case),
        };
        let url = Url::parse(&output.url).map_err(|e| refuse(CaseReason::OutputUrlRefused, format!("bad URL: {e}")))?;
        check_url(&url, &self.config.url_policy).map_err(|why| refuse(CaseReason::OutputUrlRefused, why))?;
        let sent = tokio::time::timeout_at(deadline, self.http.get(url.clone()).send()).await;
        let mut response = match sent {
            Err(_) => {
                return Err(fail(
                    "the attempt's deadline passed before the download answered".into(),
                ));
            }
            Ok(Err(e)) => {
                let (text, refused) = transport(e);
                return Err(if refused {
                    refuse(CaseReason::OutputUrlRefused, text)
                } else {
                    fail(format!("download failed: {text}"))
                });
            }
            Ok(Ok(r)) => r,
        };
        if !response.status().is_success() {
            return Err(fail(format!("download answered HTTP {}", response.status().as_u16())));
        }
        let cap = self.config.max_output_bytes;
        if let Some(len) = response.content_length().filter(|len| *len > cap) {
            return Err(refuse(
                CaseReason::OutputTooLarge,
                format!("the output is {len} bytes, over the {cap}-byte limit"),
            ));
        }
        let content_type = stored_content_type(
            &output
                .content_type
                .clone()
                .or_else(|| {
                    response
                        .headers()
                        .get(reqwest::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                })
                .unwrap_or_default(),
        );
        let key = object_key(&self.config.output_prefix, rec, index, &extension(&content_type, &url));
        let too_large = || {
            refuse(
                CaseReason::OutputTooLarge,
                format!("the output is larger than the {cap}-byte limit"),
            )
        };
        let as_transfer_error = |failure: StreamFailure| match failure {
            StreamFailure::TooLarge => too_large(),
            StreamFailure::Transient(reason) => fail(reason),
        };
        let part_size = self.config.part_size.max(1);
        let mut reading = Reading::new(&mut response, cap, deadline);
        let (first, finished) = reading
            .fill(Vec::with_capacity(part_size), part_size)
            .await
            .map_err(as_transfer_error)?;

        // An output that fits in one part is one PutObject; larger ones stream as a multipart upload.
        let (bytes, sha256, expected_checksum) = if finished && first.len() <= part_size {
            if inject_failure {
                return Err(fail("injected: deliver.upload_fails".into()));
            }
            let (bytes, digest) = reading.finish();
            let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
            self.objects
                .put(&key, &content_type, first, &b64)
                .await
                .map_err(|e| fail(e.to_string()))?;
            (bytes, hex(&digest), b64)
        } else {
            let upload_id = self
                .objects
                .begin(&key, &content_type)
                .await
                .map_err(|e| fail(e.to_string()))?;
            match self
                .stream_parts(&key, &upload_id, reading, first, finished, inject_failure)
                .await
            {
                Ok((bytes, digest, parts)) => (bytes, hex(&digest), composite_sha256(&parts)),
                Err(failure) => {
                    if let Err(e) = self.objects.abort(&key, &upload_id).await {
                        warn!(key, error = %e, "aborting the multipart upload failed; the bucket lifecycle rule will remove it");
                    }
                    return Err(as_transfer_error(failure));
                }
            }
        };
        let head = self
            .objects
            .head(&key)
            .await
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail("the stored object is missing after upload".into()))?;
        if head.bytes != bytes {
            return Err(fail(format!("stored {} bytes, downloaded {bytes}", head.bytes)));
        }
        // A whole-object checksum, or a composite `<b64>-<parts>`, is compared
        // when the store returns one in the form we expect.
        if let Some(stored) = head
            .checksum_sha256
            .as_deref()
            .filter(|c| c.contains('-') == expected_checksum.contains('-'))
            && stored != expected_checksum
        {
            return Err(fail(format!(
                "stored checksum {stored} differs from {expected_checksum}"
            )));
        }
        Ok(DeliveredObject {
            key,
            bytes,
            sha256,
            content_type,
        })
    }

    /// Uploads the rest of the body one part at a time, starting with
    /// `buffer` (what was read so far). At most one part (plus one network
    /// chunk) is held in memory.
    async fn stream_parts(
        &self,
        key: &str,
        upload_id: &str,
        mut reading: Reading<'_>,
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
struct Reading<'a> {
    response: &'a mut reqwest::Response,
    hasher: Sha256,
    total: u64,
    cap: u64,
    deadline: tokio::time::Instant,
}

impl<'a> Reading<'a> {
    fn new(response: &'a mut reqwest::Response, cap: u64, deadline: tokio::time::Instant) -> Self {
        Self {
            response,
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
            let chunk = match tokio::time::timeout_at(self.deadline, self.response.chunk()).await {
                Err(_) => {
                    return Err(StreamFailure::Transient(format!(
                        "the attempt's deadline passed after {} bytes",
                        self.total
                    )));
                }
                Ok(Err(e)) => {
                    return Err(StreamFailure::Transient(format!(
                        "download broke off: {}",
                        transport(e).0
                    )));
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

    fn policy() -> UrlPolicy {
        UrlPolicy::default()
    }

    #[test]
    fn only_https_public_urls_pass_by_default() {
        let ok = |u: &str| check_url(&Url::parse(u).unwrap(), &policy());
        assert!(ok("https://cdn.genace.example/out/1.mp4").is_ok());
        for bad in [
            "http://cdn.genace.example/1.mp4",
            "ftp://cdn.genace.example/1.mp4",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://192.168.0.10/x",
            "https://172.16.5.5/x",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.64.0.1/x",
            "https://0.0.0.0/x",
            "https://[::1]/x",
            "https://[fd00::1]/x",
            "https://[fe80::1]/x",
            "https://[::ffff:127.0.0.1]/x",
        ] {
            assert!(ok(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn embedded_ipv4_forms_odd_ranges_and_ports_are_refused() {
        let ok = |u: &str| check_url(&Url::parse(u).unwrap(), &policy());
        for bad in [
            "https://[64:ff9b::a9fe:a9fe]/x",    // NAT64 of 169.254.169.254
            "https://[64:ff9b:1::a00:1]/x",      // local-use NAT64
            "https://[2002:a9fe:a9fe::1]/x",     // 6to4 of 169.254.169.254
            "https://[::a9fe:a9fe]/x",           // IPv4-compatible
            "https://[2001:0:4136:e378::1]/x",   // Teredo
            "https://[fec0::1]/x",               // site local
            "https://192.0.0.8/x",               // IETF protocol assignments
            "https://cdn.genace.example:8443/x", // not 443
            "https://cdn.genace.example:80/x",   // 80 without http allowed
        ] {
            assert!(ok(bad).is_err(), "{bad} must be refused");
        }
        assert!(ok("https://[2606:4700::1111]/x").is_ok(), "a public IPv6 address");
        assert!(ok("https://8.8.8.8/x").is_ok());
        let http = UrlPolicy {
            allow_http: true,
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("http://cdn.genace.example/x").unwrap(), &http).is_ok());
        assert!(check_url(&Url::parse("http://cdn.genace.example:8080/x").unwrap(), &http).is_err());
        let ports = UrlPolicy {
            allowed_ports: vec![8443],
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("https://cdn.genace.example:8443/x").unwrap(), &ports).is_ok());
        assert!(check_url(&Url::parse("https://cdn.genace.example/x").unwrap(), &ports).is_err());
    }

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
    fn local_flags_and_the_allow_list() {
        let local = UrlPolicy {
            allow_http: true,
            allow_private: true,
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("http://127.0.0.1:9000/o.mp4").unwrap(), &local).is_ok());
        let listed = UrlPolicy {
            allowed_hosts: vec!["cdn.genace.example".into()],
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("https://cdn.genace.example/a").unwrap(), &listed).is_ok());
        assert!(check_url(&Url::parse("https://evil.example/a").unwrap(), &listed).is_err());
    }

    #[tokio::test]
    async fn names_resolving_to_internal_addresses_are_refused() {
        let resolver = GuardedResolver { policy: policy() };
        let name: Name = "localhost".parse().unwrap();
        assert!(resolver.resolve(name).await.is_err());
        let allowing = GuardedResolver {
            policy: UrlPolicy {
                allow_private: true,
                ..UrlPolicy::default()
            },
        };
        let name: Name = "localhost".parse().unwrap();
        assert!(allowing.resolve(name).await.is_ok());
    }

    #[test]
    fn keys_and_extensions_are_deterministic() {
        let url = Url::parse("https://cdn/x/render.MOV?sig=1").unwrap();
        assert_eq!(extension("video/mp4", &url), "mp4");
        assert_eq!(extension("application/octet-stream", &url), "mov");
        assert_eq!(
            extension("application/octet-stream", &Url::parse("https://cdn/x/blob").unwrap()),
            "bin"
        );
        assert_eq!(delivery_backoff_seconds(5, 1), 5);
        assert_eq!(delivery_backoff_seconds(5, 2), 10);
        assert_eq!(delivery_backoff_seconds(5, 20), 900);
        assert_eq!(delivery_backoff_seconds(0, 1), 1);
    }
}
