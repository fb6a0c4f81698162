//! Object storage for delivered outputs (S3): multipart uploads fed one part
//! at a time, verification, and presigned reads.

use std::future::Future;
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart};
use base64::Engine;
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
#[error("object storage: {0}")]
pub struct StorageError(pub String);

fn err(e: impl std::error::Error) -> StorageError {
    StorageError(aws_sdk_s3::error::DisplayErrorContext(e).to_string())
}

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
}

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

#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
}

impl S3Store {
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }
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

impl ObjectStore for S3Store {
    async fn put(&self, key: &str, content_type: &str, data: Vec<u8>, sha256: &str) -> Result<(), StorageError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .checksum_sha256(sha256)
            .body(ByteStream::from(data))
            .send()
            .await
            .map(|_| ())
            .map_err(err)
    }

    async fn begin(&self, key: &str, content_type: &str) -> Result<String, StorageError> {
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .send()
            .await
            .map_err(err)?;
        out.upload_id
            .ok_or_else(|| StorageError("no upload id returned".into()))
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<PartReceipt, StorageError> {
        let sha256 = b64_sha256(&data);
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .checksum_sha256(&sha256)
            .body(ByteStream::from(data))
            .send()
            .await
            .map_err(err)?;
        Ok(PartReceipt {
            number,
            etag: out.e_tag.unwrap_or_default(),
            sha256,
        })
    }

    async fn complete(&self, key: &str, upload_id: &str, parts: &[PartReceipt]) -> Result<(), StorageError> {
        let parts = parts
            .iter()
            .map(|p| {
                CompletedPart::builder()
                    .part_number(p.number)
                    .e_tag(&p.etag)
                    .checksum_sha256(&p.sha256)
                    .build()
            })
            .collect();
        self.client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
            .send()
            .await
            .map(|_| ())
            .map_err(err)
    }

    async fn abort(&self, key: &str, upload_id: &str) -> Result<(), StorageError> {
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
            .map(|_| ())
            .map_err(err)
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
        {
            Ok(out) => Ok(Some(ObjectHead {
                bytes: out.content_length.unwrap_or(0).max(0) as u64,
                content_type: out.content_type,
                checksum_sha256: out.checksum_sha256,
            })),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    async fn presign_get(&self, key: &str, expiry: Duration) -> Result<String, StorageError> {
        let conf = PresigningConfig::expires_in(expiry).map_err(|e| StorageError(e.to_string()))?;
        let req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            // A browser saves the output rather than rendering it in our origin.
            .response_content_disposition(attachment_disposition(key))
            .presigned(conf)
            .await
            .map_err(err)?;
        Ok(req.uri().to_owned())
    }
}
