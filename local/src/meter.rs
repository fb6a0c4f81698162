//! Counts what the local stack does, for the benchmark: every AWS request by
//! service and operation (an SDK interceptor on every client, installed with
//! `genace_aws::clients::meter_with`), and every handler invocation by stage with
//! its duration. Off unless the benchmark turns it on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents, SharedInterceptor};
use aws_smithy_runtime_api::client::orchestrator::Metadata;

#[derive(Debug, Default)]
pub struct Meter {
    on: AtomicBool,
    requests: Mutex<BTreeMap<(String, String), u64>>,
    invocations: Mutex<BTreeMap<String, Vec<Duration>>>,
}

static METER: OnceLock<Arc<Meter>> = OnceLock::new();

/// The process's meter.
pub fn global() -> Arc<Meter> {
    METER.get_or_init(|| Arc::new(Meter::default())).clone()
}

/// Starts counting: every AWS client built from now on reports to the meter.
pub fn enable() -> Arc<Meter> {
    let meter = global();
    meter.on.store(true, Ordering::SeqCst);
    genace_aws::clients::meter_with(SharedInterceptor::new(Counting(meter.clone())));
    meter
}

/// Records one handler invocation (a batch, or one HTTP request).
pub fn invocation(stage: &str, took: Duration) {
    let meter = global();
    if meter.on.load(Ordering::Relaxed) {
        meter
            .invocations
            .lock()
            .expect("meter lock")
            .entry(stage.to_owned())
            .or_default()
            .push(took);
    }
}

impl Meter {
    /// Requests by (service, operation) so far.
    pub fn requests(&self) -> BTreeMap<(String, String), u64> {
        self.requests.lock().expect("meter lock").clone()
    }

    /// Invocation durations by stage so far.
    pub fn invocations(&self) -> BTreeMap<String, Vec<Duration>> {
        self.invocations.lock().expect("meter lock").clone()
    }

    /// Forgets everything counted so far.
    pub fn reset(&self) {
        self.requests.lock().expect("meter lock").clear();
        self.invocations.lock().expect("meter lock").clear();
    }
}

#[derive(Debug)]
struct Counting(Arc<Meter>);

impl Intercept for Counting {
    fn name(&self) -> &'static str {
        "BenchMeter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if self.0.on.load(Ordering::Relaxed) {
            let (service, operation) = cfg
                .load::<Metadata>()
                .map(|m| (m.service().to_owned(), m.name().to_owned()))
                .unwrap_or_else(|| ("unknown".into(), "unknown".into()));
            *self
                .0
                .requests
                .lock()
                .expect("meter lock")
                .entry((service, operation))
                .or_default() += 1;
        }
        Ok(())
    }
}
