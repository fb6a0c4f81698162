//! The output bucket port: whole puts and multipart uploads fed one part at
//! a time, each checked against its SHA-256, and presigned reads.

use std::future::Future;
use std::time::Duration;

use base64::Engine;
use sha2::{Digest, Sha256};

use genace_core::record::OperationRecord;

#[derive(Debug, thiserror::Error)]
#[error("object storage: {0}")]
pub struct StorageError(pub String);

/// One uploaded part, as `complete` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartReceipt {
    pub number: i32,
    pub etag: String,
    /// Base64 SHA-256 of the part.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHead {
    pub bytes: u64,
    pub content_type: Option<String>,
    /// The store's checksum, if it returned one (for multipart: `<b64>-<parts>`).
    pub checksum_sha256: Option<String>,
}

pub trait ObjectStore: Send + Sync {
    /// Stores a whole object in one request (one write-class request instead
    /// of three for an output that fits in one part). `sha256` is the base64
    /// SHA-256 of `data`, which the store verifies on receipt.
    fn put(
        &self,
        key: &str,
        content_type: &str,
        data: Vec<u8>,
        sha256: &str,
    ) -> impl Future<Output = Result<(), StorageError>> + Send;
    fn begin(&self, key: &str, content_type: &str) -> impl Future<Output = Result<String, StorageError>> + Send;
    fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        data: Vec<u8>,
    ) -> impl Future<Output = Result<PartReceipt, StorageError>> + Send;
    fn complete(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[PartReceipt],
    ) -> impl Future<Output = Result<(), StorageError>> + Send;
    fn abort(&self, key: &str, upload_id: &str) -> impl Future<Output = Result<(), StorageError>> + Send;
    fn head(&self, key: &str) -> impl Future<Output = Result<Option<ObjectHead>, StorageError>> + Send;
    fn presign_get(&self, key: &str, expiry: Duration) -> impl Future<Output = Result<String, StorageError>> + Send;
    /// Deletes the objects, at most [`MAX_DELETE_KEYS`] in one request; a
    /// key that is not there is not an error, so a repeated erasure
    /// succeeds. Any key the store failed to delete fails the whole call.
    fn delete_all(&self, keys: &[String]) -> impl Future<Output = Result<(), StorageError>> + Send;
    /// Aborts the multipart uploads left incomplete under `prefix`, at most
    /// `limit` of them: the parts they hold are deleted. How many it aborted.
    fn abort_uploads(&self, prefix: &str, limit: usize) -> impl Future<Output = Result<usize, StorageError>> + Send;
    /// The keys stored under `prefix`, in key order, at most `limit`.
    fn list(&self, prefix: &str, limit: usize) -> impl Future<Output = Result<Vec<String>, StorageError>> + Send;
}

/// Keys per [`ObjectStore::delete_all`] call: S3's DeleteObjects limit.
pub const MAX_DELETE_KEYS: usize = 1000;

/// `attachment; filename="<last key segment>"`, with only safe characters.
pub fn attachment_disposition(key: &str) -> String {
    let name: String = key
        .rsplit('/')
        .next()
        .unwrap_or("output")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    format!("attachment; filename=\"{name}\"")
}

/// Base64 SHA-256, as S3 checksums are written.
pub fn b64_sha256(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(data))
}

/// S3's composite checksum of a multipart object: the SHA-256 of the
/// concatenated binary part digests, then `-<number of parts>`.
pub fn composite_sha256(parts: &[PartReceipt]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        if let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(&p.sha256) {
            h.update(raw);
        }
    }
    format!(
        "{}-{}",
        base64::engine::general_purpose::STANDARD.encode(h.finalize()),
        parts.len()
    )
}

/// `<prefix>/<tenant>/<operation_id>/output-<index>.<ext>`
pub fn object_key(prefix: &str, rec: &OperationRecord, index: usize, ext: &str) -> String {
    format!("{}{index}.{ext}", outputs_prefix(prefix, rec))
}

/// `<prefix>/<tenant>/<operation_id>/output-`: what every output object of
/// the operation's key begins with. Nothing else begins so: keys of a
/// nested tenant stored before tenant segments were escaped
/// (`<prefix>/a/op_X/op_Y/...`, docs/decisions/0005) go on with `op_`.
pub fn outputs_prefix(prefix: &str, rec: &OperationRecord) -> String {
    format!("{}output-", operation_prefix(prefix, rec))
}

/// `<prefix>/<tenant>/<operation_id>/`: where every object of the
/// operation is stored, whichever attempt stored it. The tenant segment is
/// escaped (`%` as `%25`, `/` as `%2F`): a tenant id may hold `/`, and
/// tenant `a/op_X`'s objects must never lie under tenant `a`'s operation
/// `op_X`, which an erase lists and deletes.
pub fn operation_prefix(prefix: &str, rec: &OperationRecord) -> String {
    format!(
        "{}/{}/{}/",
        prefix.trim_end_matches('/'),
        tenant_segment(rec.tenant_id.as_str()),
        rec.operation_id
    )
}

/// A tenant id as one segment of an object key: no `/` in it.
fn tenant_segment(tenant: &str) -> String {
    tenant.replace('%', "%25").replace('/', "%2F")
}
