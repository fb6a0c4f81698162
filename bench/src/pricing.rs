//! List prices (`docs/prices.json`) and the request classes they bill.

use std::collections::BTreeMap;

use serde_json::Value;

/// List prices, from `docs/prices.json`.
#[derive(Debug, Clone)]
pub(crate) struct Prices {
    pub(crate) source: String,
    pub(crate) api_per_million: f64,
    pub(crate) lambda_gb_second: f64,
    pub(crate) lambda_per_million: f64,
    pub(crate) wru_per_million: f64,
    pub(crate) rru_per_million: f64,
    pub(crate) sqs_per_million: f64,
    pub(crate) s3_write_per_thousand: f64,
    pub(crate) s3_read_per_thousand: f64,
    pub(crate) memory_mb: BTreeMap<String, f64>,
}

pub(crate) fn load_prices(path: &str) -> Result<Prices, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let num = |k: &str| v[k]["usd"].as_f64().ok_or(format!("{path}: {k}.usd is missing"));
    // Memory sizes come from the template's prod stage, so the cost follows it.
    let template: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string("infra/template.yaml").map_err(|e| format!("reading infra/template.yaml: {e}"))?,
    )
    .map_err(|e| e.to_string())?;
    let sizes = &template["Mappings"]["StageSizes"]["prod"];
    let size = |k: &str| sizes[k].as_f64().ok_or(format!("template: StageSizes.prod.{k}"));
    let (intake, stage, deliver) = (size("IntakeMemory")?, size("StageMemory")?, size("DeliverMemory")?);
    let memory_mb = BTreeMap::from([
        ("intake".to_owned(), intake),
        ("dispatch".to_owned(), stage),
        ("wake".to_owned(), stage),
        ("poll".to_owned(), stage),
        ("deliver".to_owned(), deliver),
        ("recovery".to_owned(), stage),
        ("sweep".to_owned(), stage),
    ]);
    Ok(Prices {
        source: v["source"].as_str().unwrap_or(path).to_owned(),
        api_per_million: num("api_gateway_http_requests_per_million")?,
        lambda_gb_second: num("lambda_arm64_gb_second")?,
        lambda_per_million: num("lambda_requests_per_million")?,
        wru_per_million: num("dynamodb_write_request_units_per_million")?,
        rru_per_million: num("dynamodb_read_request_units_per_million")?,
        sqs_per_million: num("sqs_requests_per_million")?,
        s3_write_per_thousand: num("s3_write_class_requests_per_thousand")?,
        s3_read_per_thousand: num("s3_read_class_requests_per_thousand")?,
        memory_mb,
    })
}

pub(crate) const DDB_WRITES: [&str; 5] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
];
pub(crate) const DDB_READS: [&str; 4] = ["GetItem", "Query", "Scan", "BatchGetItem"];
pub(crate) const S3_WRITES: [&str; 6] = [
    "PutObject",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "CopyObject",
    "ListObjectsV2",
];
pub(crate) const S3_READS: [&str; 2] = ["GetObject", "HeadObject"];

pub(crate) fn count_of(requests: &BTreeMap<(String, String), u64>, service: &str, ops: &[&str]) -> u64 {
    requests
        .iter()
        .filter(|((s, o), _)| s.eq_ignore_ascii_case(service) && ops.contains(&o.as_str()))
        .map(|(_, n)| *n)
        .sum()
}

/// The stages whose invocations are per-operation costs (the sweep runs on
/// a clock, whatever the volume).
pub(crate) const STAGES: [&str; 6] = ["intake", "dispatch", "wake", "poll", "deliver", "recovery"];

/// What one operation used, per operation.
pub(crate) struct PerOperation {
    pub(crate) ddb_writes: f64,
    pub(crate) ddb_reads: f64,
    pub(crate) transactions: f64,
    pub(crate) s3_writes: f64,
    pub(crate) s3_reads: f64,
    pub(crate) sqs: f64,
    pub(crate) gb_seconds: f64,
    pub(crate) lambda_requests: f64,
}

impl PerOperation {
    /// What `n` operations used, from the AWS requests and the handler
    /// invocations counted while they ran. The queues' billable receives
    /// are those that returned messages, one per stage invocation: the
    /// local pollers' empty long polls are not per-operation costs (on AWS,
    /// the event source mappings' pollers are a fixed cost per queue).
    pub(crate) fn measured(
        requests: &BTreeMap<(String, String), u64>,
        invocations: &BTreeMap<String, Vec<std::time::Duration>>,
        n: usize,
        prices: &Prices,
    ) -> Self {
        let per = |x: u64| x as f64 / n.max(1) as f64;
        let queued: usize = STAGES[1..]
            .iter()
            .map(|s| invocations.get(*s).map_or(0, Vec::len))
            .sum();
        let mut gb_seconds = 0.0;
        let mut lambda_requests = 0.0;
        for stage in STAGES {
            let durations = invocations.get(stage).map_or(&[][..], Vec::as_slice);
            // Lambda bills each invocation by the millisecond, rounded up.
            let billed: f64 = durations
                .iter()
                .map(|d| (d.as_secs_f64() * 1000.0).ceil() / 1000.0)
                .sum();
            gb_seconds += billed * prices.memory_mb[stage] / 1024.0 / n.max(1) as f64;
            lambda_requests += per(durations.len() as u64);
        }
        Self {
            ddb_writes: per(count_of(requests, "dynamodb", &DDB_WRITES)),
            ddb_reads: per(count_of(requests, "dynamodb", &DDB_READS)),
            transactions: per(count_of(requests, "dynamodb", &["TransactWriteItems"])),
            s3_writes: per(count_of(requests, "s3", &S3_WRITES)),
            s3_reads: per(count_of(requests, "s3", &S3_READS)),
            sqs: per(count_of(requests, "sqs", &["SendMessage", "SendMessageBatch"]))
                + per(count_of(requests, "sqs", &["DeleteMessage", "DeleteMessageBatch"]))
                + per(queued as u64),
            gb_seconds,
            lambda_requests,
        }
    }

    /// The dollars-per-million table at `prices`, for items of `item_bytes`.
    pub(crate) fn print_dollars(&self, prices: &Prices, prices_path: &str, item_bytes: f64) {
        // Capacity: a write costs ceil(item/1 KB) write units on the table. Every
        // lifecycle write moves `due_at`, the due index's sort key, which costs
        // the index a delete and a put (2 units); the first write only puts and
        // the last only deletes. The job index is written once. A consistent read
        // of an item under 4 KB costs 1 unit.
        let wru_per_write = (item_bytes / 1024.0).ceil().max(1.0);
        // A write that moves credits is a transaction of the record and the
        // tenant's ledger item: each item is written at twice the unit cost
        // (the ledger item is small, one unit), so the transaction adds three
        // units to the record's own.
        let wru = self.ddb_writes * wru_per_write
            + self.transactions * (wru_per_write + 2.0)
            + (2.0 * self.ddb_writes - 2.0).max(0.0)
            + 1.0;
        let lines = [
            ("API Gateway HTTP API", 1.0, "requests", prices.api_per_million / 1e6),
            (
                "Lambda requests",
                self.lambda_requests,
                "invocations",
                prices.lambda_per_million / 1e6,
            ),
            (
                "Lambda arm64 compute",
                self.gb_seconds,
                "GB-seconds",
                prices.lambda_gb_second,
            ),
            (
                "DynamoDB writes",
                wru,
                "write units (estimated)",
                prices.wru_per_million / 1e6,
            ),
            (
                "DynamoDB reads",
                self.ddb_reads,
                "read units",
                prices.rru_per_million / 1e6,
            ),
            ("SQS", self.sqs, "requests", prices.sqs_per_million / 1e6),
            (
                "S3 write-class",
                self.s3_writes,
                "requests",
                prices.s3_write_per_thousand / 1e3,
            ),
            (
                "S3 read-class",
                self.s3_reads,
                "requests",
                prices.s3_read_per_thousand / 1e3,
            ),
        ];
        println!();
        println!("## Dollars per million operations");
        println!();
        println!(
            "Prices: {} (`{prices_path}`). Items average {item_bytes:.0} bytes.",
            prices.source
        );
        println!();
        println!("| item | per operation | unit | $ per million operations |");
        println!("|---|---|---|---|");
        let mut total = 0.0;
        for (name, qty, unit, price) in lines {
            let dollars = qty * price * 1e6;
            total += dollars;
            println!("| {name} | {qty:.3} | {unit} | {dollars:.2} |");
        }
        println!("| **total** | | | **{total:.2}** |");
        println!();
        println!(
            "Excluded: output storage and transfer, CloudWatch logs and metrics, and the sweep's fixed \
             once-a-minute cost. Lambda time is the handlers' time here, against moto and the simulator; \
             a real Genace answers more slowly, which raises dispatch and poll compute."
        );
    }
}
