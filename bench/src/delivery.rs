//! `delivery`: one large output through the real deliver stage into S3,
//! beside a raw download and a raw multipart upload of as many bytes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use genace_aws::DynamoStore;
use genace_aws::clients as aws;
use genace_core::domain::Intent;
use genace_core::domain::OperationId;
use genace_core::domain::TenantId;
use genace_core::machine;
use genace_core::record::OperationRecord;
use genace_stages::config::Config;
use genace_stages::pipeline::deliver::DeliverResult;
use genace_stages::ports::table::prelude::*;
use serde_json::{Value, json};

use crate::cli::DeliveryArgs;
use crate::stack::{Stack, TENANT, intent_body};

/// Serves `GET /blob` as `bytes` generated on the fly, in 64 KiB chunks.
pub(crate) async fn blob_server(bytes: u64) -> Result<String, String> {
    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| async move {
                    let chunk = Bytes::from((0..65536u32).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>());
                    let chunks = bytes.div_ceil(65536);
                    let stream = futures::stream::iter((0..chunks).map(move |i| {
                        let len = (bytes - i * 65536).min(65536) as usize;
                        Ok::<_, std::convert::Infallible>(Frame::data(chunk.slice(..len)))
                    }));
                    hyper::Response::builder()
                        .header("content-type", "video/mp4")
                        .header("content-length", bytes.to_string())
                        .body(StreamBody::new(stream))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(format!("http://{addr}/blob"))
}

/// Peak resident memory of this process in KiB (`VmHWM`).
pub(crate) fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak so the next reading covers only what follows (Linux `clear_refs` 5).
pub(crate) fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

pub(crate) async fn run(endpoint: &str, args: &DeliveryArgs) -> Result<(), String> {
    let bytes = args.bytes;
    let stack = Stack::fresh(endpoint).await?;
    let url = blob_server(bytes).await?;
    let raw = raw_download(&url, bytes).await?;

    let store = DynamoStore::new(aws::dynamodb(&stack.sdk), &stack.names.table);
    let id = rendered_operation(&store, &stack.config, "delivery-bench", &url).await?;
    let mut config = stack.config.clone();
    config.max_output_bytes = bytes.max(config.max_output_bytes);
    let app = genace_app::from_sdk(&stack.sdk, config.clone()).with_downloads(genace_app::downloads(&config)?);
    let deliverer = app.deliverer();
    let baseline_kib = peak_rss_kib();
    let reset = reset_peak_rss();
    let started = Instant::now();
    let result = deliverer.deliver(&id).await.map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let peak_kib = peak_rss_kib();
    if result != (DeliverResult::Delivered { objects: 1 }) {
        return Err(format!("delivery ended {result:?}"));
    }
    let stored = store
        .get(&id, chrono::Utc::now())
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the record vanished")?;
    if stored.delivered_objects.first().map(|o| o.bytes) != Some(bytes) {
        return Err("the delivered object has the wrong size".into());
    }

    // The stage's own pipeline, with a store that discards the bytes.
    let discard_id = rendered_operation(&store, &config, "delivery-bench-discard", &url).await?;
    let discarding = app.with_objects(DiscardStore::default()).deliverer();
    let started = Instant::now();
    let discarded = discarding.deliver(&discard_id).await.map_err(|e| e.to_string())?;
    let pipeline_only = started.elapsed();
    if discarded != (DeliverResult::Delivered { objects: 1 }) {
        return Err(format!("delivery into the discarding store ended {discarded:?}"));
    }
    let upload_only = upload_only(&stack, bytes, config.part_size).await?;
    print(&Figures {
        bytes,
        part_bytes: config.part_size,
        raw,
        took,
        upload_only,
        pipeline_only,
        peak_kib,
        baseline_kib,
        reset,
    });
    Ok(())
}

/// The ratio to beat: the same URL downloaded to nowhere.
async fn raw_download(url: &str, bytes: u64) -> Result<Duration, String> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut resp = client.get(url).send().await.map_err(|e| e.to_string())?;
    let mut seen = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        seen += chunk.len() as u64;
    }
    if seen != bytes {
        return Err(format!("raw download read {seen} of {bytes} bytes"));
    }
    Ok(started.elapsed())
}

fn s3_error<E: std::error::Error + 'static, R: std::fmt::Debug>(e: aws_sdk_s3::error::SdkError<E, R>) -> String {
    aws_sdk_s3::error::DisplayErrorContext(e).to_string()
}

/// What the local object store accepts on its own: the same bytes as a
/// multipart upload, no download.
async fn upload_only(stack: &Stack, bytes: u64, part: usize) -> Result<Duration, String> {
    let s3 = aws::s3(&stack.sdk);
    let (bucket, key) = (&stack.names.bucket, "bench/upload-only.bin");
    let started = Instant::now();
    let upload = s3
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .map_err(s3_error)?;
    let upload_id = upload.upload_id.unwrap_or_default();
    let data: Vec<u8> = (0..part).map(|i| (i * 31 % 251) as u8).collect();
    let mut parts = Vec::new();
    let (mut sent, mut number) = (0u64, 1);
    while sent < bytes {
        let len = (bytes - sent).min(part as u64) as usize;
        let out = s3
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(&upload_id)
            .part_number(number)
            .body(aws_sdk_s3::primitives::ByteStream::from(data[..len].to_vec()))
            .send()
            .await
            .map_err(s3_error)?;
        parts.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(number)
                .set_e_tag(out.e_tag)
                .build(),
        );
        sent += len as u64;
        number += 1;
    }
    let done = aws_sdk_s3::types::CompletedMultipartUpload::builder()
        .set_parts(Some(parts))
        .build();
    s3.complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(&upload_id)
        .multipart_upload(done)
        .send()
        .await
        .map_err(s3_error)?;
    Ok(started.elapsed())
}

/// What the delivery workload measured.
struct Figures {
    bytes: u64,
    part_bytes: usize,
    raw: Duration,
    took: Duration,
    upload_only: Duration,
    pipeline_only: Duration,
    peak_kib: u64,
    baseline_kib: u64,
    reset: bool,
}

fn print(f: &Figures) {
    let mib = f.bytes as f64 / (1 << 20) as f64;
    let rate = |d: Duration| mib / d.as_secs_f64();
    let (raw, took) = (f.raw, f.took);
    println!("# genace-bench delivery");
    println!();
    println!(
        "One {mib:.0} MiB output, parts of {} MiB, local S3 (moto).",
        f.part_bytes >> 20
    );
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| raw download to nowhere | {:.0} MiB/s ({:.1} s) |",
        rate(raw),
        raw.as_secs_f64()
    );
    println!(
        "| deliver stage: download, hash, upload, verify | {:.0} MiB/s ({:.1} s) |",
        rate(took),
        took.as_secs_f64()
    );
    println!(
        "| ratio to the raw download | {:.2} (goal 0.8) |",
        raw.as_secs_f64() / took.as_secs_f64()
    );
    println!(
        "| multipart upload alone, no download | {:.0} MiB/s ({:.1} s) |",
        rate(f.upload_only),
        f.upload_only.as_secs_f64()
    );
    println!(
        "| deliver stage into a discarding store | {:.0} MiB/s ({:.1} s), ratio {:.2} |",
        rate(f.pipeline_only),
        f.pipeline_only.as_secs_f64(),
        raw.as_secs_f64() / f.pipeline_only.as_secs_f64()
    );
    println!(
        "| peak RSS of the delivering process | {:.1} MiB{} (goal 64 MiB; before the delivery: {:.1} MiB) |",
        f.peak_kib as f64 / 1024.0,
        if f.reset {
            ""
        } else {
            " (peak not reset: includes setup)"
        },
        f.baseline_kib as f64 / 1024.0
    );
}

/// An object store that keeps only sizes: measures the deliver stage's own
/// pipeline (download, hash, parts) without the local store's speed.
#[derive(Debug, Default, Clone)]
pub(crate) struct DiscardStore {
    sizes: std::sync::Arc<std::sync::Mutex<HashMap<String, u64>>>,
}

impl genace_stages::ports::outputs::ObjectStore for DiscardStore {
    async fn put(
        &self,
        key: &str,
        _: &str,
        data: Vec<u8>,
        _: &str,
    ) -> Result<(), genace_stages::ports::outputs::StorageError> {
        self.sizes
            .lock()
            .expect("sizes")
            .insert(key.to_owned(), data.len() as u64);
        Ok(())
    }
    async fn begin(&self, key: &str, _: &str) -> Result<String, genace_stages::ports::outputs::StorageError> {
        self.sizes.lock().expect("sizes").insert(key.to_owned(), 0);
        Ok("discard".into())
    }
    async fn put_part(
        &self,
        key: &str,
        _: &str,
        number: i32,
        data: Vec<u8>,
    ) -> Result<genace_stages::ports::outputs::PartReceipt, genace_stages::ports::outputs::StorageError> {
        *self.sizes.lock().expect("sizes").entry(key.to_owned()).or_default() += data.len() as u64;
        Ok(genace_stages::ports::outputs::PartReceipt {
            number,
            etag: String::new(),
            sha256: String::new(),
        })
    }
    async fn complete(
        &self,
        _: &str,
        _: &str,
        _: &[genace_stages::ports::outputs::PartReceipt],
    ) -> Result<(), genace_stages::ports::outputs::StorageError> {
        Ok(())
    }
    async fn abort(&self, _: &str, _: &str) -> Result<(), genace_stages::ports::outputs::StorageError> {
        Ok(())
    }
    async fn delete_all(&self, _: &[String]) -> Result<(), genace_stages::ports::outputs::StorageError> {
        Ok(())
    }
    async fn abort_uploads(&self, _: &str, _: usize) -> Result<usize, genace_stages::ports::outputs::StorageError> {
        Ok(0)
    }
    async fn list(&self, _: &str, _: usize) -> Result<Vec<String>, genace_stages::ports::outputs::StorageError> {
        Ok(Vec::new())
    }
    async fn head(
        &self,
        key: &str,
    ) -> Result<Option<genace_stages::ports::outputs::ObjectHead>, genace_stages::ports::outputs::StorageError> {
        Ok(self
            .sizes
            .lock()
            .expect("sizes")
            .get(key)
            .map(|b| genace_stages::ports::outputs::ObjectHead {
                bytes: *b,
                content_type: None,
                checksum_sha256: None,
            }))
    }
    async fn presign_get(&self, key: &str, _: Duration) -> Result<String, genace_stages::ports::outputs::StorageError> {
        Ok(key.to_owned())
    }
}

/// A record rendered with one output at `url`, stored.
pub(crate) async fn rendered_operation(
    store: &DynamoStore,
    config: &Config,
    key: &str,
    url: &str,
) -> Result<OperationId, String> {
    let now = chrono::Utc::now();
    let body: Value = serde_json::from_str(&intent_body(key, "one large output")).expect("json");
    let intent = Intent::parse(&body, None).map_err(|e| e.to_string())?;
    let tenant = TenantId::parse(TENANT).expect("tenant");
    let rec = OperationRecord::new_intent(&tenant, &intent, None, now, chrono::Duration::seconds(60));
    store.create(&rec, now).await.map_err(|e| e.to_string())?;
    let policy = config.policy;
    let claimed = machine::transition(
        &rec,
        machine::Input::ClaimDispatch { token: "t", shard: 0 },
        now,
        &policy,
    )
    .map_err(|e| e.to_string())?;
    let job = machine::AcceptedJob {
        job_id: format!("bench-job-{key}"),
        state: None,
        model: None,
        created_at: None,
        held_credits: None,
    };
    let accepted = machine::transition(
        &claimed,
        machine::Input::Accepted { token: "t", job: &job },
        now,
        &policy,
    )
    .map_err(|e| e.to_string())?;
    let snap =
        genace_core::remote::normalize_snapshot(&json!({"id": job.job_id, "state": "completed", "outputs": [url]}))
            .ok_or("snapshot")?;
    let rendered = machine::transition(
        &accepted,
        machine::Input::Observed(genace_core::machine::Look {
            snapshot: &snap,
            next_check: now,
            stalled: None,
            seen: &Default::default(),
        }),
        now,
        &policy,
    )
    .map_err(|e| e.to_string())?;
    for (a, b) in [(&rec, &claimed), (&claimed, &accepted), (&accepted, &rendered)] {
        store.apply(a, b).await.map_err(|e| e.to_string())?;
    }
    Ok(rec.operation_id)
}
