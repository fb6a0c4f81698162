//! The output bucket in S3: the [`ObjectStore`] port with S3's own SHA-256
//! checksums, multipart uploads and presigned reads.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
};
use genace_stages::ports::outputs::{
    MAX_DELETE_KEYS, ObjectHead, ObjectStore, PartReceipt, StorageError, attachment_disposition, b64_sha256,
};
use tracing::Instrument;

fn err(e: impl std::error::Error) -> StorageError {
    StorageError(aws_sdk_s3::error::DisplayErrorContext(e).to_string())
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

/// A span for one write of output bytes to S3: the key and the bytes sent.
fn s3_span(name: &'static str, key: &str, bytes: usize) -> tracing::Span {
    tracing::info_span!("s3", otel.name = name, otel.kind = "client", key, bytes)
}

impl ObjectStore for S3Store {
    async fn put(&self, key: &str, content_type: &str, data: Vec<u8>, sha256: &str) -> Result<(), StorageError> {
        let span = s3_span("s3.put_object", key, data.len());
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .checksum_sha256(sha256)
            .body(ByteStream::from(data))
            .send()
            .instrument(span)
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
        let span = s3_span("s3.upload_part", key, data.len());
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
            .instrument(span)
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

    async fn delete_all(&self, keys: &[String]) -> Result<(), StorageError> {
        if keys.is_empty() {
            return Ok(());
        }
        if keys.len() > MAX_DELETE_KEYS {
            return Err(StorageError(format!(
                "{} keys in one delete, more than {MAX_DELETE_KEYS}",
                keys.len()
            )));
        }
        let objects = keys
            .iter()
            .map(|k| ObjectIdentifier::builder().key(k).build().map_err(err))
            .collect::<Result<Vec<_>, _>>()?;
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(err)?;
        // A key that is not there counts as deleted; quiet mode lists only
        // the keys S3 failed on, each of which fails the call.
        let out = self
            .client
            .delete_objects()
            .bucket(&self.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(err)?;
        match out.errors().first() {
            None => Ok(()),
            Some(e) => Err(StorageError(format!(
                "{} of {} keys not deleted, first {}: {} {}",
                out.errors().len(),
                keys.len(),
                e.key().unwrap_or("?"),
                e.code().unwrap_or("?"),
                e.message().unwrap_or("")
            ))),
        }
    }

    async fn abort_uploads(&self, prefix: &str, limit: usize) -> Result<usize, StorageError> {
        let page = self
            .client
            .list_multipart_uploads()
            .bucket(&self.bucket)
            .prefix(prefix)
            .max_uploads(i32::try_from(limit.min(1000)).unwrap_or(1000))
            .send()
            .await
            .map_err(err)?;
        let mut aborted = 0;
        for upload in page.uploads().iter().take(limit) {
            let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) else {
                continue;
            };
            match self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(id)
                .send()
                .await
            {
                Ok(_) => aborted += 1,
                // Completed or aborted meanwhile: nothing left of it.
                Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_upload()) => {}
                Err(e) => return Err(err(e)),
            }
        }
        Ok(aborted)
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StorageError> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        // Pages of up to 1,000 keys, and one more for a short one; S3 may
        // answer an empty page with a token, which counts too.
        for _ in 0..=limit / 1000 + 1 {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .max_keys(i32::try_from(limit.saturating_sub(keys.len()).min(1000)).unwrap_or(1000))
                .set_continuation_token(token)
                .send()
                .await
                .map_err(err)?;
            keys.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
            token = page.next_continuation_token().map(str::to_owned);
            if token.is_none() || keys.len() >= limit {
                break;
            }
        }
        keys.truncate(limit);
        Ok(keys)
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
