//! The spans an invocation finished, held until its end and then exported
//! trace by trace: a trace is kept when its id falls under the sampling
//! rate (the same for every stage, since the id is the operation's) or
//! when one of its spans says the operation has a case. A trace with a
//! span still open in this process (another invocation running beside
//! this one, as the local runner's consumers do) waits for the next
//! export, so a trace is judged whole.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::trace::Span as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// The attribute that keeps a trace whatever the sampling rate: the
/// operation has a reconciliation case.
pub const CASE_ATTRIBUTE: &str = "genace.case";

/// A span processor that holds finished spans for [`Collector::export`].
#[derive(Debug, Clone)]
pub struct Collector {
    state: Arc<Mutex<Held>>,
    rate: f64,
}

#[derive(Debug, Default)]
struct Held {
    /// Finished spans, by trace.
    done: BTreeMap<[u8; 16], Vec<SpanData>>,
    /// Spans started and not yet ended, by trace.
    open: BTreeMap<[u8; 16], usize>,
    /// Traces kept whatever the rate (a span of which said the operation
    /// has a case, or whose sender kept them): kept from then on, in every
    /// later export of this process; the newest [`MAX_KEPT`] of them.
    cased: BTreeSet<[u8; 16]>,
    /// The order they came in, oldest first.
    cased_order: std::collections::VecDeque<[u8; 16]>,
}

/// Traces a process remembers as kept whatever the rate: a warm function
/// serves many operations, and its memory must not grow with them. An
/// operation forgotten here is judged by the rate again (and by its case,
/// met again at its next commit).
const MAX_KEPT: usize = 10_000;

impl Held {
    /// Keeps `trace`, as the newest: one marked again moves to the back,
    /// so the traces forgotten first are those not heard of the longest.
    fn keep(&mut self, trace: [u8; 16]) {
        if !self.cased.insert(trace)
            && let Some(at) = self.cased_order.iter().position(|t| *t == trace)
        {
            self.cased_order.remove(at);
        }
        self.cased_order.push_back(trace);
        if self.cased_order.len() > MAX_KEPT
            && let Some(oldest) = self.cased_order.pop_front()
        {
            self.cased.remove(&oldest);
        }
    }
}

impl Collector {
    /// Keeps a share `rate` (0 to 1) of the operations' traces, and every
    /// one that met a case.
    pub fn new(rate: f64) -> Self {
        Self {
            state: Arc::default(),
            rate: rate.clamp(0.0, 1.0),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Exports the finished spans of the traces kept that have no span
    /// open, and drops those of the others.
    pub async fn export<E: SpanExporter>(&self, exporter: &E) -> OTelSdkResult {
        let kept: Vec<SpanData> = {
            let mut held = self.held();
            let ready: Vec<[u8; 16]> = held
                .done
                .keys()
                .filter(|t| held.open.get(*t).is_none_or(|n| *n == 0))
                .copied()
                .collect();
            let mut kept = Vec::new();
            for trace in ready {
                let spans = held.done.remove(&trace).unwrap_or_default();
                if !sampled(trace, self.rate) && spans.iter().any(has_case) {
                    held.keep(trace);
                }
                if held.cased.contains(&trace) || sampled(trace, self.rate) {
                    kept.extend(spans);
                }
            }
            kept
        };
        if kept.is_empty() {
            return Ok(());
        }
        exporter.export(kept).await
    }
}

fn has_case(span: &SpanData) -> bool {
    span.attributes.iter().any(|kv| kv.key.as_str() == CASE_ATTRIBUTE)
}

/// Whether the trace `trace_id` falls under `rate`: its first 8 bytes, as
/// a share of their range.
pub fn sampled(trace_id: [u8; 16], rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    let mut head = [0u8; 8];
    head.copy_from_slice(&trace_id[..8]);
    (u64::from_be_bytes(head) as f64 / u64::MAX as f64) < rate
}

impl SpanProcessor for Collector {
    fn on_start(&self, span: &mut Span, _cx: &Context) {
        let trace = span.span_context().trace_id().to_bytes();
        *self.held().open.entry(trace).or_default() += 1;
    }

    fn on_end(&self, span: SpanData) {
        let trace = span.span_context.trace_id().to_bytes();
        let mut held = self.held();
        if let Some(n) = held.open.get_mut(&trace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.open.remove(&trace);
            }
        }
        held.done.entry(trace).or_default().push(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// What exports an invocation's spans at its end.
pub trait Flush: Send + Sync {
    fn flush(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

impl<E: SpanExporter + Sync> Flush for (Collector, E) {
    fn flush(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if let Err(e) = self.0.export(&self.1).await {
                tracing::warn!(error = %e, "spans not exported");
            }
        })
    }
}

static FLUSH: OnceLock<Box<dyn Flush>> = OnceLock::new();

/// The collector whose decision the context a send carries states.
static KEEPER: OnceLock<Collector> = OnceLock::new();

impl Collector {
    /// Whether this collector keeps `trace`: it met a case, or its id falls
    /// under the rate.
    pub fn keeps(&self, trace: [u8; 16]) -> bool {
        self.held().cased.contains(&trace) || sampled(trace, self.rate)
    }

    /// Makes this collector the process's: its decision is what the
    /// context a send carries says ([`keeps`]), and a case found in an
    /// invocation (or a sender that kept it) keeps the trace at once
    /// ([`mark_kept`]). Once; later
    /// calls are ignored.
    pub fn install(&self) {
        let _ = KEEPER.set(self.clone());
    }
}

/// Whether the process keeps `trace` (true when no collector is
/// installed): the "sampled" flag of the `traceparent` and
/// `AWSTraceHeader` a send carries, so X-Ray records the invocations of
/// kept operations only.
pub fn keeps(trace: [u8; 16]) -> bool {
    KEEPER.get().is_none_or(|c| c.keeps(trace))
}

/// `trace` met a case, or came from a sender that kept it: the process
/// keeps it from now on, sends included.
pub fn mark_kept(trace: [u8; 16]) {
    if let Some(c) = KEEPER.get()
        && !sampled(trace, c.rate)
    {
        c.held().keep(trace);
    }
}

/// Installs what [`flush`] runs (once; later calls are ignored).
pub fn set_flush(flush: impl Flush + 'static) {
    let _ = FLUSH.set(Box::new(flush));
}

/// Exports the spans the invocation finished: at the end of each Lambda
/// invocation and each request the local stack serves. Nothing when no
/// exporter is installed.
pub async fn flush() {
    if let Some(f) = FLUSH.get() {
        f.flush().await;
    }
}
