//! Deliver: stream each finished output into S3, verify it, then record
//! `delivered`. A failed upload retries delivery of the same outputs; it
//! never renders or POSTs again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::config::{Config, UrlPolicy};
use crate::domain::{OperationId, hex};
use crate::machine::{self, Refusal};
use crate::metrics;
use crate::queue::{Stage, WorkQueue};
use crate::record::{DeliveredObject, DeliveryState, Fault, OperationRecord, OutputRef, Phase};
use crate::stage::{StageError, case_opened, commit_failure, write_attempts};
use crate::storage::{ObjectStore, PartReceipt, composite_sha256};
use crate::store::{OperationStore, StoreError, commit};

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
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link local
        || first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation
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
                return Err(format!("{host} resolves only to addresses that are not public: {found:?}").into());
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
        .build()
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
}

pub struct Deliverer<S, Q, O> {
    pub store: S,
    pub queue: Q,
    pub objects: O,
    pub http: reqwest::Client,
    pub config: Config,
}

/// Why one output could not be delivered.
#[derive(Debug, thiserror::Error)]
#[error("output {index}: {reason}")]
pub struct TransferError {
    pub index: usize,
    pub reason: String,
}

const MAX_RACES: usize = 5;

fn delivery_backoff_seconds(attempts: u32) -> u32 {
    (5u32.saturating_mul(1 << attempts.min(8))).min(900)
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

impl<S: OperationStore, Q: WorkQueue, O: ObjectStore> Deliverer<S, Q, O> {
    pub async fn handle_message(&self, body: &str) -> Result<DeliverResult, StageError> {
        let msg = crate::stage::work_message(body)?;
        self.deliver(&msg.operation_id).await
    }

    pub async fn deliver(&self, id: &OperationId) -> Result<DeliverResult, StageError> {
        let now = Utc::now();
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
                    Err(StoreError::Conflict(Some(current))) => rec = *current,
                    Err(e) => return Err(e.into()),
                }
            }
            return Err(StoreError::Conflict(None).into());
        };

        let started = std::time::Instant::now();
        let outputs = claimed.outputs.clone().unwrap_or_default();
        let mut objects = Vec::with_capacity(outputs.len());
        for (index, output) in outputs.iter().enumerate() {
            let inject = fault == Some(Fault::DeliverUploadFails) && index == 0;
            match self.transfer(&claimed, index, output, inject).await {
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
            machine::delivered(r, &token, objects.clone(), Utc::now(), &policy)
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

    async fn attempt_failed(
        &self,
        claimed: OperationRecord,
        token: &str,
        error: &TransferError,
    ) -> Result<DeliverResult, StageError> {
        let now = Utc::now();
        let wait = delivery_backoff_seconds(claimed.delivery_attempts);
        let retry_at = now + chrono::Duration::seconds(wait as i64);
        let policy = self.config.policy;
        let detail = error.to_string();
        warn!(operation_id = %claimed.operation_id, error = %detail, "delivery attempt failed");
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
        self.queue.enqueue(Stage::Deliver, &rec.operation_id, wait).await?;
        Ok(DeliverResult::Retrying {
            attempts: rec.delivery_attempts,
            next_attempt_seconds: wait,
        })
    }

    /// Streams one output into storage and verifies it.
    async fn transfer(
        &self,
        rec: &OperationRecord,
        index: usize,
        output: &OutputRef,
        inject_failure: bool,
    ) -> Result<DeliveredObject, TransferError> {
        let fail = |reason: String| TransferError { index, reason };
        let url = Url::parse(&output.url).map_err(|e| fail(format!("bad URL: {e}")))?;
        check_url(&url, &self.config.url_policy).map_err(fail)?;
        let mut response = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| fail(format!("download failed: {e}")))?;
        if !response.status().is_success() {
            return Err(fail(format!("download answered HTTP {}", response.status().as_u16())));
        }
        let content_type = output
            .content_type
            .clone()
            .or_else(|| {
                response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "application/octet-stream".into());
        let key = object_key(&self.config.output_prefix, rec, index, &extension(&content_type, &url));
        let upload_id = self
            .objects
            .begin(&key, &content_type)
            .await
            .map_err(|e| fail(e.to_string()))?;

        let streamed = self.stream_parts(&key, &upload_id, &mut response, inject_failure).await;
        let (bytes, sha256, parts) = match streamed {
            Ok(v) => v,
            Err(reason) => {
                if let Err(e) = self.objects.abort(&key, &upload_id).await {
                    warn!(key, error = %e, "aborting the multipart upload failed; the bucket lifecycle rule will remove it");
                }
                return Err(fail(reason));
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
        // Only a checksum in S3's composite form can be compared.
        if let Some(stored) = head.checksum_sha256.as_deref().filter(|c| c.contains('-')) {
            let expected = composite_sha256(&parts);
            if stored != expected {
                return Err(fail(format!("stored checksum {stored} differs from {expected}")));
            }
        }
        Ok(DeliveredObject {
            key,
            bytes,
            sha256,
            content_type,
        })
    }

    /// Uploads the body one part at a time, hashing as it goes. At most one
    /// part (plus one network chunk) is held in memory.
    async fn stream_parts(
        &self,
        key: &str,
        upload_id: &str,
        response: &mut reqwest::Response,
        inject_failure: bool,
    ) -> Result<(u64, String, Vec<PartReceipt>), String> {
        let part_size = self.config.part_size.max(1);
        let mut hasher = Sha256::new();
        let mut buffer: Vec<u8> = Vec::with_capacity(part_size);
        let mut parts = Vec::new();
        let mut total = 0u64;
        loop {
            let chunk = response.chunk().await.map_err(|e| format!("download broke off: {e}"))?;
            let finished = chunk.is_none();
            if let Some(chunk) = chunk {
                hasher.update(&chunk);
                total += chunk.len() as u64;
                buffer.extend_from_slice(&chunk);
            }
            while buffer.len() >= part_size || (finished && (!buffer.is_empty() || parts.is_empty())) {
                let rest = if buffer.len() > part_size {
                    buffer.split_off(part_size)
                } else {
                    Vec::new()
                };
                let part = std::mem::replace(&mut buffer, rest);
                let number = parts.len() as i32 + 1;
                if inject_failure {
                    return Err("injected: deliver.upload_fails".into());
                }
                parts.push(
                    self.objects
                        .put_part(key, upload_id, number, part)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            if finished {
                break;
            }
        }
        self.objects
            .complete(key, upload_id, &parts)
            .await
            .map_err(|e| e.to_string())?;
        Ok((total, hex(&hasher.finalize()), parts))
    }
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
    fn local_flags_and_the_allow_list() {
        let local = UrlPolicy {
            allow_http: true,
            allow_private: true,
            allowed_hosts: vec![],
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
        assert_eq!(delivery_backoff_seconds(0), 5);
        assert_eq!(delivery_backoff_seconds(20), 900);
    }
}
