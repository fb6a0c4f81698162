//! The output bucket, in memory: whole puts and multipart uploads.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One stored object.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredObject {
    pub content_type: String,
    pub data: Vec<u8>,
    pub checksum_sha256: String,
}

/// The output bucket, in memory: whole puts and multipart uploads, each
/// checked against its SHA-256 as S3 checks it. Clones share the bucket.
#[derive(Debug, Clone, Default)]
pub struct MemoryObjects {
    state: Arc<Mutex<ObjectState>>,
}

#[derive(Debug, Default)]
struct ObjectState {
    next_upload: u64,
    objects: BTreeMap<String, StoredObject>,
    uploads: BTreeMap<String, Upload>,
}

/// A multipart upload in progress: its key, content type and parts.
#[derive(Debug)]
struct Upload {
    key: String,
    content_type: String,
    parts: BTreeMap<i32, Vec<u8>>,
}

impl MemoryObjects {
    fn lock(&self) -> std::sync::MutexGuard<'_, ObjectState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<StoredObject> {
        self.lock().objects.get(key).cloned()
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }
}

impl genace_stages::ports::outputs::ObjectStore for MemoryObjects {
    async fn put(
        &self,
        key: &str,
        content_type: &str,
        data: Vec<u8>,
        sha256: &str,
    ) -> Result<(), genace_stages::ports::outputs::StorageError> {
        let checksum = genace_stages::ports::outputs::b64_sha256(&data);
        if checksum != sha256 {
            return Err(genace_stages::ports::outputs::StorageError(
                "the SHA-256 does not match the body".into(),
            ));
        }
        self.lock().objects.insert(
            key.to_owned(),
            StoredObject {
                content_type: content_type.to_owned(),
                data,
                checksum_sha256: checksum,
            },
        );
        Ok(())
    }

    async fn begin(
        &self,
        key: &str,
        content_type: &str,
    ) -> Result<String, genace_stages::ports::outputs::StorageError> {
        let mut state = self.lock();
        state.next_upload += 1;
        let id = format!("upload-{}", state.next_upload);
        state.uploads.insert(
            id.clone(),
            Upload {
                key: key.to_owned(),
                content_type: content_type.to_owned(),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<genace_stages::ports::outputs::PartReceipt, genace_stages::ports::outputs::StorageError> {
        let sha256 = genace_stages::ports::outputs::b64_sha256(&data);
        let mut state = self.lock();
        let upload = state
            .uploads
            .get_mut(upload_id)
            .filter(|u| u.key == key)
            .ok_or_else(|| genace_stages::ports::outputs::StorageError(format!("no upload {upload_id} for {key}")))?;
        upload.parts.insert(number, data);
        Ok(genace_stages::ports::outputs::PartReceipt {
            number,
            etag: format!("\"{upload_id}-{number}\""),
            sha256,
        })
    }

    async fn complete(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[genace_stages::ports::outputs::PartReceipt],
    ) -> Result<(), genace_stages::ports::outputs::StorageError> {
        let mut state = self.lock();
        let Upload {
            key: upload_key,
            content_type,
            parts: stored,
        } = state
            .uploads
            .remove(upload_id)
            .ok_or_else(|| genace_stages::ports::outputs::StorageError(format!("no upload {upload_id}")))?;
        if upload_key != key {
            return Err(genace_stages::ports::outputs::StorageError(format!(
                "upload {upload_id} is not for {key}"
            )));
        }
        let mut data = Vec::new();
        for p in parts {
            let part = stored.get(&p.number).ok_or_else(|| {
                genace_stages::ports::outputs::StorageError(format!("part {} was never uploaded", p.number))
            })?;
            if genace_stages::ports::outputs::b64_sha256(part) != p.sha256 {
                return Err(genace_stages::ports::outputs::StorageError(format!(
                    "part {} checksum mismatch",
                    p.number
                )));
            }
            data.extend_from_slice(part);
        }
        state.objects.insert(
            key.to_owned(),
            StoredObject {
                content_type,
                data,
                checksum_sha256: genace_stages::ports::outputs::composite_sha256(parts),
            },
        );
        Ok(())
    }

    async fn abort(&self, _key: &str, upload_id: &str) -> Result<(), genace_stages::ports::outputs::StorageError> {
        self.lock().uploads.remove(upload_id);
        Ok(())
    }

    async fn delete_all(&self, keys: &[String]) -> Result<(), genace_stages::ports::outputs::StorageError> {
        if keys.len() > genace_stages::ports::outputs::MAX_DELETE_KEYS {
            return Err(genace_stages::ports::outputs::StorageError(format!(
                "{} keys in one delete, more than {}",
                keys.len(),
                genace_stages::ports::outputs::MAX_DELETE_KEYS
            )));
        }
        let mut state = self.lock();
        for key in keys {
            state.objects.remove(key);
        }
        Ok(())
    }

    async fn abort_uploads(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<usize, genace_stages::ports::outputs::StorageError> {
        let mut state = self.lock();
        let left: Vec<String> = state
            .uploads
            .iter()
            .filter(|(_, u)| u.key.starts_with(prefix))
            .take(limit)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &left {
            state.uploads.remove(id);
        }
        Ok(left.len())
    }

    async fn list(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, genace_stages::ports::outputs::StorageError> {
        let state = self.lock();
        Ok(state
            .objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn head(
        &self,
        key: &str,
    ) -> Result<Option<genace_stages::ports::outputs::ObjectHead>, genace_stages::ports::outputs::StorageError> {
        Ok(self
            .lock()
            .objects
            .get(key)
            .map(|o| genace_stages::ports::outputs::ObjectHead {
                bytes: o.data.len() as u64,
                content_type: Some(o.content_type.clone()),
                checksum_sha256: Some(o.checksum_sha256.clone()),
            }))
    }

    async fn presign_get(
        &self,
        key: &str,
        expiry: std::time::Duration,
    ) -> Result<String, genace_stages::ports::outputs::StorageError> {
        Ok(format!("memory://outputs/{key}?expires-in={}", expiry.as_secs()))
    }
}
