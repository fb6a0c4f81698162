//! The downloads port: how deliver reads a rendered output. The deployed
//! adapter (`genace_outbound::download`) puts every URL, redirect and resolved
//! address through the output URL guard.

use std::future::Future;

/// Why a download did not start or broke off. Texts never carry the URL
/// (it may hold a signed query string): they are shown to people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DownloadError {
    /// The URL guard refused the URL, a redirect target or an address:
    /// retrying cannot help.
    #[error("{0}")]
    Refused(String),
    /// Anything else (connection, timeout, broken body): a later attempt may succeed.
    #[error("{0}")]
    Failed(String),
}

/// An opened download: the response head and its body.
#[derive(Debug)]
pub struct Download<B> {
    pub status: u16,
    pub content_length: Option<u64>,
    pub content_type: Option<String>,
    pub body: B,
}

/// A response body, read chunk by chunk.
pub trait DownloadBody: Send {
    /// The next chunk, or `None` at the end.
    fn chunk(&mut self) -> impl Future<Output = Result<Option<Vec<u8>>, DownloadError>> + Send;
}

/// Where deliver fetches outputs.
pub trait Downloads: Send + Sync {
    type Body: DownloadBody;

    /// Sends the request for `url` and returns once the response head arrived.
    fn open(&self, url: &str) -> impl Future<Output = Result<Download<Self::Body>, DownloadError>> + Send;
}
