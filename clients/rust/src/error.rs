//! What a call can fail with: the transport, or the service's answer as
//! its problem document (RFC 9457).

use serde_json::Value;

/// An answer the service gave instead of what was asked: its status and
/// its problem document (`type`, `title`, `detail` and any members).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: u16,
    /// The whole document as sent; a body that was not JSON is kept as a
    /// string.
    pub body: Value,
}

impl Problem {
    /// The problem's type, without the service's prefix: `operation-key-reused`.
    pub fn kind(&self) -> &str {
        let t = self.body["type"].as_str().unwrap_or("");
        t.rsplit('/').next().unwrap_or(t)
    }

    pub fn detail(&self) -> &str {
        self.body["detail"].as_str().unwrap_or("")
    }

    /// The member a 400 names (`field`), when it names one.
    pub fn field(&self) -> Option<&str> {
        self.body["field"].as_str()
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.kind())?;
        if !self.detail().is_empty() {
            write!(f, ": {}", self.detail())?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The service answered with a problem.
    #[error("{0}")]
    Api(Problem),
    /// No answer: the connection failed or timed out, after every retry.
    #[error("{method} {path}: {reason}")]
    Transport {
        method: String,
        path: String,
        reason: String,
    },
    /// An answer this client cannot read.
    #[error("{0}")]
    Unreadable(String),
    /// [`crate::Client::wait`] reached its deadline; the last view read.
    #[error("not reached by the deadline; last phase {}", .0["phase"])]
    Deadline(Box<Value>),
    /// [`crate::Client::wait`]: the operation finished without reaching
    /// what was waited for (it failed, was cancelled...); its last view.
    #[error("finished without reaching it, in phase {}", .0["phase"])]
    Finished(Box<Value>),
}

impl Error {
    /// The problem, when the service answered with one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Api(p) => Some(p),
            _ => None,
        }
    }

    /// The answer's status, when the service answered.
    pub fn status(&self) -> Option<u16> {
        self.problem().map(|p| p.status)
    }
}
