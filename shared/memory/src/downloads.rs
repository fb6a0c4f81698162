//! Outputs served from memory, by URL.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Outputs served from memory, by URL.
#[derive(Debug, Clone, Default)]
pub struct MemoryDownloads {
    files: Arc<Mutex<BTreeMap<String, ServedFile>>>,
}

/// What a URL answers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedFile {
    pub status: u16,
    pub content_type: Option<String>,
    pub data: Vec<u8>,
}

impl MemoryDownloads {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ServedFile>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves `data` at `url` with a 200.
    pub fn serve(&self, url: &str, content_type: Option<&str>, data: Vec<u8>) {
        self.answer(
            url,
            ServedFile {
                status: 200,
                content_type: content_type.map(str::to_owned),
                data,
            },
        );
    }

    /// Answers `url` with anything.
    pub fn answer(&self, url: &str, file: ServedFile) {
        self.lock().insert(url.to_owned(), file);
    }
}

/// A served body, handed out in chunks of at most 64 KiB.
#[derive(Debug)]
pub struct MemoryBody {
    data: Vec<u8>,
    at: usize,
}

impl genace_stages::ports::downloads::DownloadBody for MemoryBody {
    async fn chunk(&mut self) -> Result<Option<Vec<u8>>, genace_stages::ports::downloads::DownloadError> {
        if self.at >= self.data.len() {
            return Ok(None);
        }
        let end = (self.at + 64 * 1024).min(self.data.len());
        let chunk = self.data[self.at..end].to_vec();
        self.at = end;
        Ok(Some(chunk))
    }
}

impl genace_stages::ports::downloads::Downloads for MemoryDownloads {
    type Body = MemoryBody;

    async fn open(
        &self,
        url: &str,
    ) -> Result<genace_stages::ports::downloads::Download<MemoryBody>, genace_stages::ports::downloads::DownloadError>
    {
        let file = self
            .lock()
            .get(url)
            .cloned()
            .ok_or_else(|| genace_stages::ports::downloads::DownloadError::Failed("connection refused".into()))?;
        Ok(genace_stages::ports::downloads::Download {
            status: file.status,
            content_length: Some(file.data.len() as u64),
            content_type: file.content_type,
            body: MemoryBody { data: file.data, at: 0 },
        })
    }
}
