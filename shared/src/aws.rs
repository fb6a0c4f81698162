//! AWS clients, built once per cold start from the standard environment
//! (`AWS_REGION`, `AWS_ENDPOINT_URL`, credentials).

use aws_config::{BehaviorVersion, SdkConfig};

pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).load().await
}

pub fn dynamodb(conf: &SdkConfig) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(conf)
}

pub fn sqs(conf: &SdkConfig) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(conf)
}

/// S3 with path-style addressing whenever a custom endpoint is in use: local
/// object stores do not serve virtual-hosted bucket names.
pub fn s3(conf: &SdkConfig) -> aws_sdk_s3::Client {
    let s3conf = aws_sdk_s3::config::Builder::from(conf)
        .force_path_style(conf.endpoint_url().is_some())
        .build();
    aws_sdk_s3::Client::from_conf(s3conf)
}
