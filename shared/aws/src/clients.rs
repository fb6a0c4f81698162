//! AWS clients, built once per cold start from the standard environment
//! (`AWS_REGION`, `AWS_ENDPOINT_URL`, credentials).

//!
//! Every client has operation and attempt timeouts, so a hung request can
//! never outlive the Lambda that sent it: a dispatcher that holds a job id
//! only in memory gets an error in time to put it on the recovery channel.

use std::sync::OnceLock;
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::config::SharedInterceptor;

static METER: OnceLock<SharedInterceptor> = OnceLock::new();

/// Adds `interceptor` to every client built after this call (the benchmark
/// counts every AWS request with it). Once per process; false if already set.
pub fn meter_with(interceptor: SharedInterceptor) -> bool {
    METER.set(interceptor).is_ok()
}

fn meter() -> Option<SharedInterceptor> {
    METER.get().cloned()
}

/// Small requests (DynamoDB items, SQS messages): one attempt may take
/// `attempt`, all retries together `operation`. Four commit tries fit well
/// inside the dispatch function's timeout after a full Genace timeout.
pub const SMALL_REQUESTS: TimeoutBudget = TimeoutBudget {
    connect: Duration::from_secs(2),
    attempt: Duration::from_secs(2),
    operation: Duration::from_secs(5),
};

/// S3 parts of up to a few MiB, and completing a multipart upload.
pub const OBJECT_REQUESTS: TimeoutBudget = TimeoutBudget {
    connect: Duration::from_secs(2),
    attempt: Duration::from_secs(60),
    operation: Duration::from_secs(180),
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutBudget {
    pub connect: Duration,
    pub attempt: Duration,
    pub operation: Duration,
}

impl TimeoutBudget {
    pub fn config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(SMALL_REQUESTS.config())
        .load()
        .await
}

/// [`load`], with every client sent to `endpoint` (a local AWS, such as moto).
pub async fn load_at(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(SMALL_REQUESTS.config())
        .endpoint_url(endpoint)
        .load()
        .await
}

pub fn dynamodb(conf: &SdkConfig) -> aws_sdk_dynamodb::Client {
    let mut builder = aws_sdk_dynamodb::config::Builder::from(conf);
    if let Some(m) = meter() {
        builder.push_interceptor(m);
    }
    aws_sdk_dynamodb::Client::from_conf(builder.build())
}

pub fn sqs(conf: &SdkConfig) -> aws_sdk_sqs::Client {
    let mut builder = aws_sdk_sqs::config::Builder::from(conf);
    if let Some(m) = meter() {
        builder.push_interceptor(m);
    }
    aws_sdk_sqs::Client::from_conf(builder.build())
}

pub fn secrets(conf: &SdkConfig) -> aws_sdk_secretsmanager::Client {
    let mut builder = aws_sdk_secretsmanager::config::Builder::from(conf);
    if let Some(m) = meter() {
        builder.push_interceptor(m);
    }
    aws_sdk_secretsmanager::Client::from_conf(builder.build())
}

/// SQS for long polling (the local runner's event-source emulation): a
/// receive may wait up to 20 s for messages, so its attempt may take longer.
pub fn sqs_receiver(conf: &SdkConfig) -> aws_sdk_sqs::Client {
    let budget = TimeoutBudget {
        attempt: Duration::from_secs(25),
        operation: Duration::from_secs(60),
        ..SMALL_REQUESTS
    };
    let mut builder = aws_sdk_sqs::config::Builder::from(conf).timeout_config(budget.config());
    if let Some(m) = meter() {
        builder.push_interceptor(m);
    }
    aws_sdk_sqs::Client::from_conf(builder.build())
}

/// S3 with path-style addressing whenever a custom endpoint is in use: local
/// object stores do not serve virtual-hosted bucket names. Its timeouts fit
/// part uploads rather than small items.
pub fn s3(conf: &SdkConfig) -> aws_sdk_s3::Client {
    let mut builder = aws_sdk_s3::config::Builder::from(conf)
        .force_path_style(conf.endpoint_url().is_some())
        .timeout_config(OBJECT_REQUESTS.config());
    if let Some(m) = meter() {
        builder.push_interceptor(m);
    }
    aws_sdk_s3::Client::from_conf(builder.build())
}
