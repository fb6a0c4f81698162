//! The trace reader of a stack whose spans a receiver writes to a file
//! (`GENACE_TRACES_FILE`): the local stack, in process or with the
//! artifacts under the emulator. Deployed, the operators' route links to
//! X-Ray instead.

use std::path::{Path, PathBuf};

use genace_trace::lines::SpanLine;

/// The spans of `trace_id` in `file`, as written (none when it is missing).
pub fn read_trace(file: &Path, trace_id: &str) -> std::io::Result<Vec<SpanLine>> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(genace_trace::lines::of_trace(&text, trace_id))
}

/// The local stack's trace reader: the spans the receiver wrote to `file`.
#[derive(Debug, Clone)]
pub struct TraceFile {
    pub file: PathBuf,
}

impl TraceFile {
    /// The file `GENACE_TRACES_FILE` names, if any.
    pub fn from_env() -> Option<Self> {
        std::env::var("GENACE_TRACES_FILE")
            .ok()
            .filter(|file| !file.is_empty())
            .map(|file| Self { file: file.into() })
    }
}

impl genace_stages::ports::traces::TraceReader for TraceFile {
    fn read<'a>(&'a self, trace: &'a genace_core::trace::TraceId) -> genace_stages::ports::traces::TraceFuture<'a> {
        let (file, trace) = (self.file.clone(), trace.to_hex());
        Box::pin(async move {
            let read = tokio::task::spawn_blocking(move || read_trace(&file, &trace));
            match read.await {
                Ok(Ok(spans)) => Ok(genace_stages::ports::traces::Trace::Spans(spans)),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}
