//! Structured logs and traces: JSON lines in Lambda (CloudWatch), readable
//! text locally; and, when `OTEL_EXPORTER_OTLP_ENDPOINT` names a receiver,
//! the stages' spans exported to it as OpenTelemetry traces.

use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The share of operations whose traces are kept when nothing says
/// otherwise (every one with a case is kept whatever the rate).
pub const DEFAULT_SAMPLE_RATE: f64 = 1.0;

/// Installs the global subscriber once. `LOG_FORMAT=text` selects plain
/// text; `RUST_LOG` sets the filter (default `info`). With
/// `OTEL_EXPORTER_OTLP_ENDPOINT` set, spans go to that OTLP/HTTP receiver
/// (`GENACE_TRACE_SAMPLE_RATE`, 0 to 1, the share of operations kept;
/// `OTEL_SERVICE_NAME`, else the Lambda function's name, names the
/// resource), and each log line carries the spans it is in, the stage's
/// `trace_id` among their fields.
pub fn init() {
    init_with(tracing_from_env());
}

/// [`init`], the headers for the exports read first from the secret
/// [`HEADERS_SECRET_VARIABLE`] names, once, when the environment lists
/// none: what a deployed function runs (the template never puts the
/// headers in a function's settings).
pub async fn init_with_secrets() {
    init_with(with_secret_headers(tracing_from_env()).await);
}

/// The variable naming the secret whose value is the exports' header list.
pub const HEADERS_SECRET_VARIABLE: &str = "OTEL_EXPORTER_OTLP_HEADERS_SECRET_ARN";

/// `tracing` with its headers from the secret [`HEADERS_SECRET_VARIABLE`]
/// names, when it exports to a receiver and the environment lists no
/// headers. A secret that cannot be read is said on stderr, and the spans
/// go without headers (the receiver may refuse them; nothing else stops).
pub async fn with_secret_headers(mut tracing: Option<Tracing>) -> Option<Tracing> {
    if let Some(t) = &mut tracing
        && t.headers.is_none()
        && !t.endpoint.is_empty()
        && let Some(arn) = crate::env_var(HEADERS_SECRET_VARIABLE)
    {
        let sdk = genace_aws::clients::load().await;
        match crate::secret_string(&sdk, &arn, "the OTLP headers").await {
            Ok(text) => {
                t.headers = Some(HeaderList {
                    variable: HEADERS_SECRET_VARIABLE,
                    text: text.trim().to_owned(),
                });
            }
            Err(e) => eprintln!("spans exported without headers: {e}"),
        }
    }
    tracing
}

/// `invocation`, then the export of the spans it finished: what a
/// function that is neither an API nor a queue consumer (the sweep's
/// schedule) runs each time, as the router and the queue runner do after
/// theirs.
pub async fn flushed<T>(invocation: impl Future<Output = T>) -> T {
    let out = invocation.await;
    genace_trace::flush().await;
    out
}

/// Where spans go: an OTLP/HTTP receiver, the resource's name, and the
/// share of operations kept.
#[derive(Debug, Clone)]
pub struct Tracing {
    pub endpoint: String,
    pub service: String,
    pub rate: f64,
    /// The headers each export carries, as the environment lists them
    /// ([`header_list`]).
    pub headers: Option<HeaderList>,
}

/// A list of headers for the exports and the variable it was read from.
/// Its text holds secrets: `Debug` shows only the variable.
#[derive(Clone)]
pub struct HeaderList {
    pub variable: &'static str,
    pub text: String,
}

impl std::fmt::Debug for HeaderList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderList")
            .field("variable", &self.variable)
            .field("text", &"(hidden)")
            .finish_non_exhaustive()
    }
}

/// The headers' list as OpenTelemetry's exporters choose it: the traces'
/// own (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`) when set, else the general
/// one (`OTEL_EXPORTER_OTLP_HEADERS`); `var` reads a variable.
pub fn header_list(var: impl Fn(&str) -> Option<String>) -> Option<HeaderList> {
    ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]
        .into_iter()
        .find_map(|variable| {
            Some(HeaderList {
                variable,
                text: var(variable)?,
            })
        })
}

/// [`Tracing`] from `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`
/// (else the Lambda function's name) and `GENACE_TRACE_SAMPLE_RATE`. In a
/// Lambda function with no endpoint, tracing with an empty endpoint: the
/// spans are recorded only for the context the messages carry (the
/// operation's trace and the keep decision, which X-Ray's active tracing
/// joins the invocations by) and dropped at each invocation's end. Else
/// none without an endpoint.
pub fn tracing_from_env() -> Option<Tracing> {
    let in_lambda = crate::env_var("AWS_LAMBDA_FUNCTION_NAME").is_some();
    let endpoint = crate::env_var("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| in_lambda.then(String::new));
    Some(Tracing {
        endpoint: endpoint?,
        service: crate::env_var("OTEL_SERVICE_NAME")
            .or_else(|| crate::env_var("AWS_LAMBDA_FUNCTION_NAME"))
            .unwrap_or_else(|| "genace".into()),
        rate: sample_rate(crate::env_var("GENACE_TRACE_SAMPLE_RATE").as_deref()),
        headers: header_list(crate::env_var),
    })
}

/// [`init`] with spans going where `tracing` says (none: no traces).
pub fn init_with(tracing: Option<Tracing>) {
    let filter = crate::env_var("RUST_LOG")
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let text = crate::env_var("LOG_FORMAT").is_some_and(|v| v.eq_ignore_ascii_case("text"));
    let fmt = tracing_subscriber::fmt::layer().with_target(false);
    let fmt = if text {
        fmt.with_filter(filter).boxed()
    } else {
        fmt.json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .without_time()
            .with_filter(filter)
            .boxed()
    };
    // The spans are ours (the crates named `genace…`, spans only, not log
    // lines), kept whatever `RUST_LOG` lets the logs say: that filter is
    // the log layer's alone.
    let otel = tracing.map(|t| tracer(&t)).map(|provider| {
        let tracer = provider.tracer(genace_trace::SCOPE);
        opentelemetry::global::set_tracer_provider(provider);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                // Spans only (log lines are the log layer's), and ours.
                meta.is_span()
                    && meta.target().starts_with("genace")
                    && *meta.level() <= tracing_subscriber::filter::LevelFilter::INFO
            }))
    });
    let _ = tracing_subscriber::registry().with(fmt).with(otel).try_init();
}

/// The tracer provider exporting where `tracing` says, with
/// [`genace_trace::flush`] set to export each invocation's spans. An
/// exporter that cannot be built (malformed headers) is said on stderr,
/// and the spans are then dropped as with no receiver: the context the
/// messages carry still travels.
fn tracer(tracing: &Tracing) -> SdkTracerProvider {
    let collector = genace_trace::Collector::new(tracing.rate);
    match exporter(tracing) {
        Some(Ok(exporter)) => genace_trace::set_flush((collector.clone(), exporter)),
        None => genace_trace::set_flush((collector.clone(), Dropped)),
        Some(Err(e)) => {
            // The endpoint is not repeated: a URL may carry a credential.
            eprintln!("spans not exported: the OTLP exporter could not be built: {e}");
            genace_trace::set_flush((collector.clone(), Dropped));
        }
    }
    collector.install();
    SdkTracerProvider::builder().with_span_processor(collector).build()
}

/// The exporter to `tracing`'s receiver (none without one).
fn exporter(tracing: &Tracing) -> Option<Result<genace_outbound::otlp::OtlpExporter, String>> {
    if tracing.endpoint.is_empty() {
        return None;
    }
    let headers = match &tracing.headers {
        Some(list) => genace_outbound::otlp::OtlpHeaders::parse(list.variable, &list.text),
        None => Ok(genace_outbound::otlp::OtlpHeaders::default()),
    };
    Some(headers.and_then(|headers| {
        genace_outbound::otlp::OtlpExporter::new(&tracing.endpoint, tracing.service.clone(), headers)
    }))
}

/// The exporter of a function with no receiver: drops every span.
#[derive(Debug)]
struct Dropped;

impl opentelemetry_sdk::trace::SpanExporter for Dropped {
    async fn export(&self, _batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// `GENACE_TRACE_SAMPLE_RATE` read: a share from 0 to 1; unset or not a
/// number, [`DEFAULT_SAMPLE_RATE`].
pub fn sample_rate(raw: Option<&str>) -> f64 {
    raw.and_then(|r| r.trim().parse::<f64>().ok())
        .filter(|r| r.is_finite())
        .map_or(DEFAULT_SAMPLE_RATE, |r| r.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_rate_is_a_share_with_a_default() {
        assert_eq!(sample_rate(None), 1.0);
        assert_eq!(sample_rate(Some("0.25")), 0.25);
        assert_eq!(sample_rate(Some("7")), 1.0);
        assert_eq!(sample_rate(Some("-1")), 0.0);
        assert_eq!(sample_rate(Some("NaN")), 1.0);
        assert_eq!(sample_rate(Some("lots")), 1.0);
    }

    fn to(endpoint: &str, headers: &str) -> Tracing {
        Tracing {
            endpoint: endpoint.into(),
            service: "poll".into(),
            rate: 1.0,
            headers: Some(HeaderList {
                variable: "OTEL_EXPORTER_OTLP_HEADERS",
                text: headers.into(),
            }),
        }
    }

    #[test]
    fn the_traces_own_header_list_replaces_the_general_one() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| (*v).to_owned())
        };
        let both = header_list(env(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=a,x-env=dev"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=b"),
        ]))
        .unwrap();
        assert_eq!(
            (both.variable, both.text.as_str()),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=b")
        );
        let general = header_list(env(&[("OTEL_EXPORTER_OTLP_HEADERS", "x-team=a")])).unwrap();
        assert_eq!(general.variable, "OTEL_EXPORTER_OTLP_HEADERS");
        assert!(header_list(env(&[])).is_none());
        assert!(!format!("{both:?}").contains("x-team"), "{both:?}");
    }

    #[test]
    fn the_exporter_takes_the_headers_listed_and_refuses_malformed_ones() {
        assert!(exporter(&to("", "x-key=1")).is_none(), "no receiver, no exporter");
        assert!(matches!(exporter(&to("http://127.0.0.1:4318", "x-key=1")), Some(Ok(_))));
        let Some(Err(e)) = exporter(&to("http://127.0.0.1:4318", "x-key")) else {
            panic!("a pair without a value is refused");
        };
        assert_eq!(e, "OTEL_EXPORTER_OTLP_HEADERS: pair 1 has no '='");
    }

    /// Counts its exports.
    struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl genace_trace::Flush for Counted {
        fn flush(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn a_scheduled_invocation_exports_its_spans_when_it_ends() {
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        genace_trace::set_flush(Counted(count.clone()));
        let answer = flushed(async {
            assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 0, "not before it ends");
            7
        })
        .await;
        assert_eq!((answer, count.load(std::sync::atomic::Ordering::SeqCst)), (7, 1));
    }
}
