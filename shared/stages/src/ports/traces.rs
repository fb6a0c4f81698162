//! Where an operator reads an operation's trace: the spans a local
//! receiver kept, or a link to the trace where the deployment sends them.
//! Held as a trait object beside the other ports, as the secret vault is.

use genace_core::trace::TraceId;
use genace_trace::lines::SpanLine;

/// What the trace reader found for one trace.
#[derive(Debug, Clone, PartialEq)]
pub enum Trace {
    /// The spans kept for it (none yet is an empty list).
    Spans(Vec<SpanLine>),
    /// Where the trace is shown (the deployment's tracing console).
    Link(String),
    /// This process keeps no traces and knows of no place that does.
    Unkept,
}

/// The future a [`TraceReader`] returns.
pub type TraceFuture<'a> = std::pin::Pin<Box<dyn Future<Output = Result<Trace, String>> + Send + 'a>>;

pub trait TraceReader: Send + Sync + std::fmt::Debug {
    /// What is kept of `trace`; an error when the store of spans failed.
    fn read<'a>(&'a self, trace: &'a TraceId) -> TraceFuture<'a>;
}

/// No traces anywhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTraces;

impl TraceReader for NoTraces {
    fn read<'a>(&'a self, _trace: &'a TraceId) -> TraceFuture<'a> {
        Box::pin(async { Ok(Trace::Unkept) })
    }
}

/// The deployed reader: spans go to X-Ray in `region`, so the answer is
/// the link to the trace in the CloudWatch console, by the trace's X-Ray id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XRayLink {
    pub region: String,
}

impl XRayLink {
    /// The console's address of `trace`.
    pub fn link(&self, trace: &TraceId) -> String {
        let hex = trace.to_hex();
        let region = &self.region;
        format!(
            "https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#xray:traces/1-{}-{}",
            &hex[..8],
            &hex[8..]
        )
    }
}

impl TraceReader for XRayLink {
    fn read<'a>(&'a self, trace: &'a TraceId) -> TraceFuture<'a> {
        let link = self.link(trace);
        Box::pin(async move { Ok(Trace::Link(link)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use genace_core::domain::OperationId;

    #[test]
    fn the_xray_link_names_the_trace_by_its_xray_id() {
        let id = OperationId::parse("op_0123456789abcdef0123456789abcdef").unwrap();
        let link = XRayLink {
            region: "eu-west-1".into(),
        }
        .link(&TraceId::of(&id));
        assert_eq!(
            link,
            "https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1\
             #xray:traces/1-01234567-89abcdef0123456789abcdef"
        );
    }
}
