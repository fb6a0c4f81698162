//! The SAM template, read as data: least privilege per function, partial
//! batch responses on every queue consumer, a DLQ on every queue, visibility
//! timeouts of at least six times the consumer's timeout, and fault injection
//! kept out of production.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;

fn template() -> Value {
    let text = include_str!("../../infra/template.yaml");
    serde_yaml::from_str(text).expect("the template is YAML")
}

/// Strips CloudFormation tags (`!Ref`, `!GetAtt`, ...) down to their values.
fn untag(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => untag(&t.value),
        other => other,
    }
}

fn resources(t: &Value) -> BTreeMap<String, Value> {
    untag(&t["Resources"])
        .as_mapping()
        .expect("Resources")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.clone()))
        .collect()
}

fn functions(t: &Value) -> BTreeMap<String, Value> {
    resources(t)
        .into_iter()
        .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    match untag(v) {
        Value::String(s) => vec![s.clone()],
        Value::Sequence(items) => items.iter().flat_map(strings).collect(),
        _ => vec![],
    }
}

/// Every (action, resource text) a function's inline policies allow.
fn grants(f: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for policy in untag(&f["Properties"]["Policies"]).as_sequence().into_iter().flatten() {
        for stmt in untag(&policy["Statement"]).as_sequence().into_iter().flatten() {
            assert_eq!(stmt["Effect"], "Allow");
            let resource = format!("{:?}", stmt["Resource"]);
            for action in strings(&stmt["Action"]) {
                out.push((action, resource.clone()));
            }
        }
    }
    out
}

fn actions(f: &Value) -> BTreeSet<String> {
    grants(f).into_iter().map(|(a, _)| a).collect()
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
fn every_function_has_only_the_actions_it_uses() {
    let t = template();
    let expected: BTreeMap<&str, &[&str]> = BTreeMap::from([
        (
            "IntakeFunction",
            &[
                "dynamodb:PutItem",
                "dynamodb:GetItem",
                // A waiting operation's place in its tenant's order, and
                // the list indexes.
                "dynamodb:Query",
                // A page of a listing, read in one batch.
                "dynamodb:BatchGetItem",
                "sqs:SendMessage",
                "s3:GetObject",
            ][..],
        ),
        (
            "EraseFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload",
                // Under outputs/ only: what earlier delivery attempts left.
                "s3:ListBucket",
                "s3:ListBucketMultipartUploads",
            ][..],
        ),
        (
            "CancelFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                // The waiting set's ledgers, in one batch, to wake.
                "dynamodb:BatchGetItem",
                // The ledgers and the waiting order, to pass a wake-up on.
                "dynamodb:Query",
                "sqs:SendMessage",
            ][..],
        ),
        (
            "DispatchFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                // The waiting set's ledgers, in one batch, to wake.
                "dynamodb:BatchGetItem",
                // The ledgers and the waiting order, to wake waiting operations.
                "dynamodb:Query",
                "sqs:SendMessage",
                "secretsmanager:GetSecretValue",
            ][..],
        ),
        (
            "PollFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                // The waiting set's ledgers, in one batch, to wake.
                "dynamodb:BatchGetItem",
                // The ledgers and the waiting order, to wake waiting operations.
                "dynamodb:Query",
                "sqs:SendMessage",
                "secretsmanager:GetSecretValue",
            ][..],
        ),
        (
            "DeliverFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                "sqs:SendMessage",
                "s3:PutObject",
                "s3:GetObject",
                "s3:AbortMultipartUpload",
            ][..],
        ),
        (
            "OperatorFunction",
            &[
                "dynamodb:GetItem",
                // A page of cases found through the age index.
                "dynamodb:BatchGetItem",
                "dynamodb:UpdateItem",
                "dynamodb:PutItem",
                "dynamodb:DeleteItem",
                "dynamodb:Query",
                "sqs:SendMessage",
                "s3:GetObject",
            ][..],
        ),
        (
            "EndpointsFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                // The attempt log index.
                "dynamodb:Query",
                "secretsmanager:CreateSecret",
                // A rotation keeps the values it replaces for their overlap.
                "secretsmanager:GetSecretValue",
                "secretsmanager:PutSecretValue",
                "secretsmanager:DeleteSecret",
                // Replay and recovery: a copy of a kept event on the webhook queue.
                "sqs:SendMessage",
            ][..],
        ),
        (
            "RecoveryFunction",
            &[
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                // A saved job that already ended wakes the next waiter.
                "dynamodb:BatchGetItem",
                "dynamodb:Query",
                "sqs:SendMessage",
            ][..],
        ),
        // The pipe's enrichment reads tenants' receivers to mark events for
        // the webhook rule, and nothing else.
        (
            "EventsFunction",
            &["dynamodb:BatchGetItem", "secretsmanager:GetSecretValue"][..],
        ),
        (
            "WebhookFunction",
            &[
                "dynamodb:GetItem",
                // The attempt log of tenants' endpoints.
                "dynamodb:PutItem",
                "secretsmanager:GetSecretValue",
                "sqs:ChangeMessageVisibility",
                "sqs:SendMessage",
            ][..],
        ),
        // Static files: no permission at all.
        ("ConsoleFunction", &[][..]),
        (
            "SweepFunction",
            &[
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                // The waiting set's ledgers, in one batch, to wake.
                "dynamodb:BatchGetItem",
                "sqs:SendMessage",
            ][..],
        ),
    ]);
    let fns = functions(&t);
    assert_eq!(
        fns.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        expected.keys().copied().collect()
    );
    for (name, f) in &fns {
        let got = actions(f);
        let want: BTreeSet<String> = expected[name.as_str()].iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want, "{name}");
        for (action, resource) in grants(f) {
            assert!(!action.contains('*'), "{name}: wildcard action {action}");
            assert!(!resource.contains("\"*\""), "{name}: {action} on every resource");
        }
    }
    // Intake cannot write objects; dispatch cannot touch objects at all.
    assert!(
        !actions(&fns["IntakeFunction"])
            .iter()
            .any(|a| a.starts_with("s3:Put") || a.contains("Delete"))
    );
    assert!(!actions(&fns["DispatchFunction"]).iter().any(|a| a.starts_with("s3:")));
    // Only dispatch may send to the recovery queue.
    for (name, f) in &fns {
        let sends_recovery = grants(f)
            .iter()
            .any(|(a, r)| a == "sqs:SendMessage" && r.contains("RecoveryQueue"));
        assert_eq!(sends_recovery, name == "DispatchFunction", "{name}");
    }
}

#[test]
fn functions_are_rust_on_arm64() {
    let t = template();
    let globals = &t["Globals"]["Function"];
    assert_eq!(globals["Runtime"], "provided.al2023");
    assert_eq!(strings(&globals["Architectures"]), ["arm64"]);
    for (name, f) in functions(&t) {
        assert_eq!(f["Metadata"]["BuildMethod"], "rust-cargolambda", "{name}");
        let binary = f["Metadata"]["BuildProperties"]["Binary"].as_str().unwrap().to_owned();
        // The operator routes, cancel, erase and endpoints run the intake binary under their own roles.
        let expected = if [
            "OperatorFunction",
            "CancelFunction",
            "EraseFunction",
            "EndpointsFunction",
        ]
        .contains(&name.as_str())
        {
            "intake".to_owned()
        } else {
            name.trim_end_matches("Function").to_ascii_lowercase()
        };
        assert_eq!(binary, expected, "{name}");
    }
}

fn timeout(t: &Value, f: &Value) -> u64 {
    f["Properties"]["Timeout"]
        .as_u64()
        .or_else(|| t["Globals"]["Function"]["Timeout"].as_u64())
        .unwrap()
}

#[test]
fn queue_consumers_report_partial_failures_and_queues_fit_their_consumers() {
    let t = template();
    let res = resources(&t);
    let mut consumed = BTreeSet::new();
    for (name, f) in functions(&t) {
        for (_, event) in untag(&f["Properties"]["Events"]).as_mapping().into_iter().flatten() {
            if event["Type"] != "SQS" {
                continue;
            }
            let props = &event["Properties"];
            assert_eq!(
                strings(&props["FunctionResponseTypes"]),
                ["ReportBatchItemFailures"],
                "{name}"
            );
            assert!(
                props["BatchSize"].as_u64().is_some(),
                "{name}: the batch size is chosen deliberately"
            );
            let queue = strings(&props["Queue"])[0].trim_end_matches(".Arn").to_owned();
            let visibility = res[&queue]["Properties"]["VisibilityTimeout"].as_u64().unwrap();
            assert!(
                visibility >= 6 * timeout(&t, &f),
                "{queue}: visibility {visibility} < 6 x {name}'s timeout"
            );
            consumed.insert(queue);
        }
    }
    assert_eq!(
        consumed.len(),
        6,
        "dispatch, wake-ups, poll, deliver, recovery and webhooks are consumed"
    );
    for (name, r) in &res {
        if r["Type"] != "AWS::SQS::Queue" {
            continue;
        }
        assert!(
            r["Properties"]["SqsManagedSseEnabled"] == Value::Bool(true)
                || !r["Properties"]["KmsMasterKeyId"].is_null(),
            "{name}: encryption"
        );
        if name.ends_with("DeadLetterQueue") {
            continue;
        }
        let redrive = &r["Properties"]["RedrivePolicy"];
        let dlq = strings(&redrive["deadLetterTargetArn"])[0].clone();
        assert!(dlq.ends_with("DeadLetterQueue.Arn"), "{name}: DLQ {dlq}");
        assert!(redrive["maxReceiveCount"].as_u64().is_some_and(|n| n > 0), "{name}");
    }
}

/// Wake-ups have a queue of their own, which dispatch consumes beside its
/// own queue (so a wake-up never waits behind a burst's intents), which
/// shares the dispatch dead-letter queue and its alarm, and to which every
/// function that wakes waiting operations may send.
#[test]
fn wake_ups_have_their_own_queue_that_dispatch_consumes() {
    let t = template();
    let res = resources(&t);
    let fns = functions(&t);
    let sources: BTreeSet<String> = untag(&fns["DispatchFunction"]["Properties"]["Events"])
        .as_mapping()
        .into_iter()
        .flatten()
        .filter(|(_, e)| e["Type"] == "SQS")
        .map(|(_, e)| strings(&e["Properties"]["Queue"])[0].clone())
        .collect();
    assert_eq!(
        sources,
        BTreeSet::from(["DispatchQueue.Arn".to_owned(), "WakeQueue.Arn".to_owned()])
    );
    assert_eq!(
        strings(&res["WakeQueue"]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]),
        ["DispatchDeadLetterQueue.Arn"]
    );
    assert_eq!(
        strings(&t["Globals"]["Function"]["Environment"]["Variables"]["WAKE_QUEUE_URL"]),
        ["WakeQueue"]
    );
    // Whoever reads the waiting order wakes from it, and nobody else sends there.
    for (name, f) in &fns {
        let sends_wakes = grants(f)
            .iter()
            .any(|(a, r)| a == "sqs:SendMessage" && r.contains("WakeQueue.Arn"));
        let reads_order = format!("{:?}", f["Properties"]["Policies"]).contains("wait-index");
        let wakes = [
            "DispatchFunction",
            "PollFunction",
            "SweepFunction",
            "CancelFunction",
            "OperatorFunction",
            // A saved job that had already ended frees its slot.
            "RecoveryFunction",
        ]
        .contains(&name.as_str());
        assert_eq!(sends_wakes, wakes, "{name}");
        assert!(!wakes || reads_order, "{name} wakes from the waiting order");
    }
}

#[test]
fn dispatch_outlives_the_genace_timeout_and_deliver_can_stream() {
    let t = template();
    let fns = functions(&t);
    let genace_timeout: u64 = t["Globals"]["Function"]["Environment"]["Variables"]["GENACE_TIMEOUT_SECONDS"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(timeout(&t, &fns["DispatchFunction"]) > genace_timeout);
    // After the longest POST, a job id is tried again in the table for at
    // most JOB_SAVE_SECONDS, and the recovery send (one SQS request, 5 s at
    // most) still fits in the dispatcher's time.
    assert!(
        genace_timeout + genace_stages::pipeline::dispatch::JOB_SAVE_SECONDS + 5
            <= timeout(&t, &fns["DispatchFunction"]),
        "a job id's save outlasts the dispatch function"
    );
    let lease: u64 = t["Globals"]["Function"]["Environment"]["Variables"]["DISPATCH_LEASE_SECONDS"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        lease > timeout(&t, &fns["DispatchFunction"]),
        "a claim outlives the dispatcher holding it"
    );
    assert_eq!(timeout(&t, &fns["DeliverFunction"]), 900);
}

/// Every function is traced by X-Ray (`Tracing: Active`, which grants the
/// functions `xray:PutTraceSegments` and `xray:PutTelemetryRecords`), keeps
/// the share of operations the sampling parameter says, and sends its spans
/// to the OTLP endpoint parameter, else to the collector layer's, else
/// nowhere (the variable left out).
#[test]
fn every_function_is_traced_and_samples_by_the_parameter() {
    let t = template();
    let globals = &t["Globals"]["Function"];
    assert_eq!(globals["Tracing"], "Active");
    for (name, f) in functions(&t) {
        assert!(f["Properties"].get("Tracing").is_none(), "{name} overrides the tracing");
        assert!(f["Properties"].get("Layers").is_none(), "{name} overrides the layers");
    }
    let rate = &t["Parameters"]["TraceSampleRate"];
    assert_eq!(rate["Default"], "0.1");
    let pattern = regex_lite(rate["AllowedPattern"].as_str().unwrap());
    for ok in ["0", "0.05", "1", "1.0"] {
        assert!(pattern(ok), "{ok}");
    }
    for bad in ["", "2", "-0.1", "1.5", "lots"] {
        assert!(!pattern(bad), "{bad}");
    }
    let vars = &globals["Environment"]["Variables"];
    assert_eq!(strings(&vars["GENACE_TRACE_SAMPLE_RATE"]), ["TraceSampleRate"]);
    let endpoint = untag(&vars["OTEL_EXPORTER_OTLP_ENDPOINT"]);
    assert_eq!(endpoint[0], "HasOtlpEndpoint");
    assert_eq!(strings(&endpoint[1]), ["OtlpEndpoint"]);
    let otherwise = untag(&endpoint[2]);
    assert_eq!(
        (otherwise[0].as_str(), otherwise[1].as_str()),
        (Some("HasTracesLayer"), Some("http://localhost:4318"))
    );
    // A hosted receiver's key: sent only to the endpoint named, kept in
    // Secrets Manager (the settings name the secret, never the headers),
    // and readable by the functions that export alone.
    assert!(vars["OTEL_EXPORTER_OTLP_HEADERS"].is_null());
    let headers = untag(&vars["OTEL_EXPORTER_OTLP_HEADERS_SECRET_ARN"]);
    assert_eq!(headers[0], "HasOtlpHeaders");
    assert_eq!(strings(&headers[1]), ["OtlpHeadersSecretArn"]);
    assert_eq!(strings(&headers[2]), ["AWS::NoValue"]);
    assert_eq!(t["Parameters"]["OtlpHeadersSecretArn"]["Default"], "");
    let read = &resources(&t)["OtlpHeadersReadPolicy"];
    assert_eq!(read["Condition"], "HasOtlpHeaders");
    assert_eq!(
        format!("{:?}", read["Properties"]["PolicyDocument"])
            .matches("secretsmanager:GetSecretValue")
            .count(),
        1
    );
    for (name, f) in functions(&t) {
        let exports = name != "ConsoleFunction";
        let reads = untag(&f["Properties"]["Policies"])
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|p| format!("{p:?}").contains("OtlpHeadersReadPolicy"));
        assert_eq!(
            reads, exports,
            "{name}: only the functions that export read the headers"
        );
    }
    // When the condition holds: genace-local's template tests evaluate it.
    let layers = untag(&globals["Layers"]);
    assert_eq!(layers[0], "HasTracesLayer");
    assert_eq!(strings(&layers[1]), ["TracesLayerArn"]);
}

/// Whether `value` matches the parameter's `pattern`, as a JSON schema's
/// pattern (ECMA 262, as CloudFormation's) reads it.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
    let schema = serde_json::json!({"type": "string", "pattern": pattern});
    move |v: &str| jsonschema::validate(&schema, &serde_json::json!(v)).is_ok()
}

#[test]
fn fault_injection_is_off_by_default_and_refused_in_prod() {
    let t = template();
    assert_eq!(t["Parameters"]["FaultInjection"]["Default"], "disabled");
    let rule = &t["Rules"]["NoFaultInjectionInProd"];
    assert!(format!("{:?}", rule["RuleCondition"]).contains("prod"));
    assert!(format!("{:?}", rule["Assertions"]).contains("disabled"));
    let secret = &t["Parameters"]["GenaceApiKeySecretArn"];
    assert!(secret["AllowedPattern"].as_str().unwrap().contains("secretsmanager"));
    assert!(
        t["Parameters"].get("GenaceApiKey").is_none(),
        "the key is never a plain parameter"
    );
}

#[test]
fn storage_is_protected() {
    let t = template();
    let res = resources(&t);
    let table = &res["OperationsTable"]["Properties"];
    assert_eq!(table["BillingMode"], "PAY_PER_REQUEST");
    assert_eq!(
        table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"],
        true
    );
    assert_eq!(table["SSESpecification"]["SSEEnabled"], true);
    assert_eq!(table["TimeToLiveSpecification"]["AttributeName"], "expires_at");
    assert_eq!(table["GlobalSecondaryIndexes"][0]["IndexName"], "due-index");
    let bucket = &res["OutputBucket"]["Properties"];
    for flag in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(bucket["PublicAccessBlockConfiguration"][flag], true, "{flag}");
    }
    assert!(bucket["LifecycleConfiguration"]["Rules"][0]["AbortIncompleteMultipartUpload"].is_mapping());
}

/// Every HttpApi route of every function: (method, path, operator scopes).
fn routes(t: &Value) -> BTreeMap<(String, String), (String, Vec<String>)> {
    let mut out = BTreeMap::new();
    for (name, f) in functions(t) {
        for (_, event) in untag(&f["Properties"]["Events"]).as_mapping().into_iter().flatten() {
            if event["Type"] != "HttpApi" {
                continue;
            }
            let p = &event["Properties"];
            let key = (
                p["Method"].as_str().unwrap().to_ascii_lowercase(),
                p["Path"].as_str().unwrap().to_owned(),
            );
            out.insert(key, (name.clone(), strings(&p["Auth"]["AuthorizationScopes"])));
        }
    }
    out
}

#[test]
fn the_deployed_routes_are_the_documented_ones_and_operator_routes_need_the_scope() {
    let t = template();
    let doc: Value = serde_yaml::from_str(include_str!("../../docs/openapi.yaml")).unwrap();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_mapping().unwrap() {
        for (method, _) in item.as_mapping().unwrap() {
            let method = method.as_str().unwrap();
            if ["get", "post", "put", "patch", "delete"].contains(&method) {
                documented.insert((method.to_owned(), path.as_str().unwrap().to_owned()));
            }
        }
    }
    let (console, deployed): (BTreeMap<_, _>, BTreeMap<_, _>) = routes(&t)
        .into_iter()
        .partition(|((_, path), _)| path.starts_with("/console"));
    assert_eq!(deployed.keys().cloned().collect::<BTreeSet<_>>(), documented);
    for ((method, path), (function, scopes)) in &deployed {
        let operator = path.contains("reconciliation-cases")
            || path.ends_with("/resolution")
            || path == "/v1/credits"
            || path == "/v1/capacity"
            || path.ends_with("/spend-limit")
            || path.ends_with("/max-in-flight")
            || path.ends_with("/webhook")
            || path.ends_with("/trace");
        if operator {
            assert_eq!(function, "OperatorFunction", "{method} {path}");
            assert_eq!(scopes, &["OperatorScope".to_owned()], "{method} {path}");
        } else if path.starts_with("/v1/webhooks/endpoints") {
            // Tenants manage their own endpoints with their scope; operators
            // with theirs. The one function that may write secrets.
            assert_eq!(function, "EndpointsFunction", "{method} {path}");
            assert_eq!(
                scopes,
                &["operations.webhooks".to_owned(), "OperatorScope".to_owned()],
                "{method} {path}"
            );
        } else if path.ends_with("/outputs") {
            // Applications erase their own outputs: the one function that
            // may delete objects.
            assert_eq!(function, "EraseFunction", "{method} {path}");
            assert!(scopes.is_empty(), "{method} {path}");
        } else if path.ends_with("/cancel") {
            // Applications cancel their own operations: no operator scope,
            // and a function apart from intake, which cannot update records.
            assert_eq!(function, "CancelFunction", "{method} {path}");
            assert!(scopes.is_empty(), "{method} {path}");
        } else {
            assert_eq!(function, "IntakeFunction", "{method} {path}");
            assert!(scopes.is_empty(), "{method} {path}");
        }
    }
    the_console_is_static_and_signs_in_by_itself(&t, &console);
    // Only the operator function may change records outside the lifecycle.
    let fns = functions(&t);
    // Only the endpoints function may write secrets.
    for (name, f) in &fns {
        let writes_secrets = actions(f)
            .iter()
            .any(|a| a.starts_with("secretsmanager:") && a != "secretsmanager:GetSecretValue");
        assert_eq!(writes_secrets, name == "EndpointsFunction", "{name}");
    }
    assert!(!actions(&fns["IntakeFunction"]).contains("dynamodb:UpdateItem"));
}

#[test]
fn the_recovery_queue_outlasts_an_outage_and_only_the_admin_may_purge_or_redrive() {
    let t = template();
    let res = resources(&t);
    let q = &res["RecoveryQueue"]["Properties"];
    assert_eq!(q["MessageRetentionPeriod"], 1_209_600, "14 days");
    let receives = q["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap();
    let visibility = q["VisibilityTimeout"].as_u64().unwrap();
    assert!(
        receives * visibility >= 24 * 3600,
        "messages survive a day of failures before the DLQ ({receives} x {visibility} s)"
    );
    assert_eq!(
        res["RecoveryDeadLetterQueue"]["Properties"]["MessageRetentionPeriod"],
        1_209_600
    );
    for (policy, queue) in [
        ("RecoveryQueuePolicy", "RecoveryQueue"),
        ("RecoveryDeadLetterQueuePolicy", "RecoveryDeadLetterQueue"),
    ] {
        let p = &res[policy]["Properties"];
        assert_eq!(strings(&p["Queues"]), [queue]);
        let text = format!("{:?}", p["PolicyDocument"]);
        for action in [
            "sqs:PurgeQueue",
            "sqs:SetQueueAttributes",
            "sqs:StartMessageMoveTask",
            "sqs:ReceiveMessage",
            "sqs:SendMessage",
        ] {
            assert!(text.contains(action), "{policy} restricts {action}");
        }
        assert!(
            text.contains("AdminRoleArn"),
            "{policy}: the admin role is the exception"
        );
        assert!(!text.contains("Allow"), "{policy} only denies");
    }
    let rule = format!("{:?}", t["Rules"]["NoFaultInjectionInProd"]["Assertions"]);
    assert!(rule.contains("AdminRoleArn"), "prod names the admin role");
}

#[test]
fn the_api_is_throttled_and_logs_json_access_lines() {
    let t = template();
    let res = resources(&t);
    let api = &res["HttpApi"]["Properties"];
    assert_eq!(
        strings(&api["DefaultRouteSettings"]["ThrottlingRateLimit"]),
        ["ApiThrottlingRateLimit"]
    );
    assert_eq!(
        strings(&api["DefaultRouteSettings"]["ThrottlingBurstLimit"]),
        ["ApiThrottlingBurstLimit"]
    );
    let format = api["AccessLogSettings"]["Format"].as_str().unwrap();
    let line: serde_yaml::Value = serde_yaml::from_str(format).expect("the access log format is JSON");
    for field in ["requestId", "route", "status", "latencyMs"] {
        assert!(line.get(field).is_some(), "{field}");
    }
    assert_eq!(
        strings(&api["AccessLogSettings"]["DestinationArn"]),
        ["HttpApiAccessLog.Arn"]
    );
    assert_eq!(res["HttpApiAccessLog"]["Type"], "AWS::Logs::LogGroup");
}

/// The role's statements: (actions, resource text) each.
fn role_statements(role: &Value) -> Vec<(BTreeSet<String>, String)> {
    let mut out = Vec::new();
    for policy in untag(&role["Properties"]["Policies"])
        .as_sequence()
        .into_iter()
        .flatten()
    {
        for stmt in untag(&policy["PolicyDocument"]["Statement"])
            .as_sequence()
            .into_iter()
            .flatten()
        {
            assert_eq!(stmt["Effect"], "Allow");
            out.push((
                strings(&stmt["Action"]).into_iter().collect(),
                format!("{:?}", stmt["Resource"]),
            ));
        }
    }
    out
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
fn committed_changes_reach_the_bus_through_a_least_privilege_pipe() {
    let t = template();
    let res = resources(&t);
    // The stream carries both images, which the derivation compares.
    assert_eq!(
        res["OperationsTable"]["Properties"]["StreamSpecification"]["StreamViewType"],
        "NEW_AND_OLD_IMAGES"
    );
    assert_eq!(res["OperationsEventBus"]["Type"], "AWS::Events::EventBus");
    let pipe = &res["EventsPipe"]["Properties"];
    assert_eq!(res["EventsPipe"]["Type"], "AWS::Pipes::Pipe");
    assert_eq!(strings(&pipe["Source"]), ["OperationsTable.StreamArn"]);
    assert_eq!(strings(&pipe["Enrichment"]), ["EventsFunction.Arn"]);
    assert_eq!(strings(&pipe["Target"]), ["OperationsEventBus.Arn"]);
    assert_eq!(strings(&pipe["RoleArn"]), ["EventsPipeRole.Arn"]);
    let bus = &pipe["TargetParameters"]["EventBridgeEventBusParameters"];
    assert_eq!(bus["Source"], "genace.operations");
    assert_eq!(
        bus["DetailType"], "$.type",
        "consumers match the event type as detail-type"
    );
    // Bounded retries, then the dead-letter queue: nothing dropped in silence.
    let source = &pipe["SourceParameters"]["DynamoDBStreamParameters"];
    assert_eq!(source["StartingPosition"], "TRIM_HORIZON");
    assert!(source["MaximumRetryAttempts"].as_u64().is_some_and(|n| n > 0));
    // A change announces at most three events; a PutEvents takes ten.
    let most = genace_core::events::MAX_EVENTS_PER_CHANGE as u64;
    assert!(source["BatchSize"].as_u64().is_some_and(|n| n * most <= 10));
    assert_eq!(
        strings(&source["DeadLetterConfig"]["Arn"]),
        ["EventsPipeDeadLetterQueue.Arn"]
    );
    // Operation items only; ledger items and TTL removals never reach the enrichment.
    let pattern: serde_json::Value = serde_json::from_str(
        pipe["SourceParameters"]["FilterCriteria"]["Filters"][0]["Pattern"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(pattern["eventName"], serde_json::json!(["MODIFY"]));
    assert_eq!(pattern["dynamodb"]["Keys"]["pk"]["S"][0]["prefix"], "OP#");

    // The role: only the pipes service of this account and this pipe may
    // assume it, and it holds exactly what the pipe does, on exactly its
    // resources.
    let role = &res["EventsPipeRole"];
    let trust = &untag(&role["Properties"]["AssumeRolePolicyDocument"]["Statement"])[0];
    assert_eq!(trust["Principal"]["Service"], "pipes.amazonaws.com");
    assert_eq!(strings(&trust["Action"]), ["sts:AssumeRole"]);
    let condition = format!("{:?}", trust["Condition"]);
    assert!(condition.contains("aws:SourceAccount") && condition.contains("aws:SourceArn"));
    assert!(condition.contains("pipe/genace-operations-events-"));
    let statements = role_statements(role);
    let expected: [(&[&str], &str); 4] = [
        (
            &[
                "dynamodb:DescribeStream",
                "dynamodb:GetRecords",
                "dynamodb:GetShardIterator",
                "dynamodb:ListStreams",
            ],
            "OperationsTable.StreamArn",
        ),
        (&["lambda:InvokeFunction"], "EventsFunction.Arn"),
        (&["events:PutEvents"], "OperationsEventBus.Arn"),
        (&["sqs:SendMessage"], "EventsPipeDeadLetterQueue.Arn"),
    ];
    assert_eq!(statements.len(), expected.len(), "{statements:?}");
    for (actions, resource) in expected {
        let want: BTreeSet<String> = actions.iter().map(|a| a.to_string()).collect();
        assert!(
            statements
                .iter()
                .any(|(got, r)| *got == want && r.contains(resource) && !r.contains("\"*\"")),
            "{actions:?} on {resource}: {statements:?}"
        );
    }
    for (actions, resource) in &statements {
        assert!(!actions.iter().any(|a| a.contains('*')), "{actions:?}");
        assert!(!resource.contains("\"*\""), "{resource}");
    }
    // The enrichment reads only the items of tenants' receivers, and writes nothing.
    let events = functions(&t)["EventsFunction"].clone();
    let policies = format!("{:?}", events["Properties"]["Policies"]);
    assert!(
        policies.contains("dynamodb:LeadingKeys") && policies.contains("WEBHOOK#*") && policies.contains("ENDPOINTS#*"),
        "{policies}"
    );
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
fn webhooks_take_the_marked_events_from_the_bus_and_read_only_their_secrets() {
    let t = template();
    let res = resources(&t);
    let rule = &res["WebhookRule"]["Properties"];
    assert_eq!(strings(&rule["EventBusName"]), ["OperationsEventBus"]);
    assert_eq!(strings(&rule["EventPattern"]["source"]), ["genace.operations"]);
    // Only events the enrichment marked for a tenant's receivers.
    assert_eq!(
        serde_json::to_value(&rule["EventPattern"]["detail"]).unwrap(),
        serde_json::json!({"webhooks": [true]})
    );
    let target = &untag(&rule["Targets"])[0];
    assert_eq!(strings(&target["Arn"]), ["WebhookQueue.Arn"]);
    assert_eq!(
        strings(&target["DeadLetterConfig"]["Arn"]),
        ["WebhookDeadLetterQueue.Arn"]
    );
    assert!(
        target["RetryPolicy"]["MaximumRetryAttempts"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    // Only the rule may send to the queue.
    let statement = &untag(&res["WebhookQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"])[0];
    assert_eq!(statement["Principal"]["Service"], "events.amazonaws.com");
    assert_eq!(strings(&statement["Action"]), ["sqs:SendMessage"]);
    assert!(format!("{:?}", statement["Condition"]).contains("WebhookRule.Arn"));
    // A failed POST is retried, for longer after each failure, for at
    // least a day, then dead-lettered.
    let queue = &res["WebhookQueue"]["Properties"];
    assert_eq!(
        strings(&queue["RedrivePolicy"]["deadLetterTargetArn"]),
        ["WebhookDeadLetterQueue.Arn"]
    );
    let receives = queue["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap() as u32;
    let span = genace_stages::config::RetrySchedule::default().span(receives);
    assert!(
        (24 * 3600..=36 * 3600).contains(&span),
        "an unreachable receiver is retried for {span} s"
    );
    let fns = functions(&t);
    let function = &fns["WebhookFunction"];
    assert_eq!(
        strings(&function["Properties"]["Environment"]["Variables"]["WEBHOOK_QUEUE_URL"]),
        ["WebhookQueue"],
        "the function defers messages on the queue it consumes"
    );
    let deferrals: Vec<String> = grants(function)
        .into_iter()
        .filter(|(a, _)| a == "sqs:ChangeMessageVisibility")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(deferrals.len(), 1);
    assert!(deferrals[0].contains("WebhookQueue.Arn") && !deferrals[0].contains("DeadLetter"));
    // A whole batch of POSTs that each time out still fits the function's timeout.
    let batch = untag(&function["Properties"]["Events"]["Work"]["Properties"]["BatchSize"])
        .as_u64()
        .unwrap();
    assert!(
        batch * genace_outbound::webhook::POST_TIMEOUT.as_secs() < timeout(&t, function),
        "{batch} POSTs do not fit the webhook function's timeout"
    );
    let allowed = grants(&fns["WebhookFunction"]);
    // It may send to its dead-letter queue (an undeliverable event goes there
    // at once), and to no other queue.
    let sends: Vec<&String> = allowed
        .iter()
        .filter(|(a, _)| a == "sqs:SendMessage")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(sends.len(), 1);
    assert!(sends[0].contains("WebhookDeadLetterQueue"), "{}", sends[0]);
    assert!(
        strings(&fns["WebhookFunction"]["Properties"]["Environment"]["Variables"]["WEBHOOK_DLQ_URL"])
            .contains(&"WebhookDeadLetterQueue".to_owned())
    );
    // Nobody but the pipe's role puts lifecycle events on the bus.
    let bus = &res["OperationsEventBusPolicy"]["Properties"];
    let statement = &bus["Statement"];
    assert_eq!(statement["Effect"], "Deny");
    assert_eq!(statement["Principal"], "*");
    assert_eq!(statement["Action"], "events:PutEvents");
    assert_eq!(
        statement["Condition"]["StringEquals"]["events:source"],
        "genace.operations"
    );
    assert!(
        format!("{:?}", statement["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]).contains("EventsPipeRole.Arn"),
        "{statement:?}"
    );
    assert!(
        !allowed.iter().any(|(_, r)| r.contains("GenaceApiKeySecretArn")),
        "the webhook function cannot read the Genace key"
    );
    let alarm = format!("{:?}", res["DeadLetterAlarms"]["Properties"]["Metrics"]);
    assert!(alarm.contains("WebhookDeadLetterQueue"));
}

/// The sweep measures the oldest capacity wait every run; an alarm watches
/// it against a parameter, and sends to the alarm topic like the others.
#[test]
fn an_alarm_watches_the_oldest_capacity_wait() {
    let t = template();
    let res = resources(&t);
    let alarm = &res["CapacityWaitAlarm"]["Properties"];
    assert_eq!(alarm["Namespace"], "GenaceOperations");
    assert_eq!(alarm["MetricName"], "OldestWaitSeconds");
    assert_eq!(alarm["Statistic"], "Maximum");
    assert_eq!(alarm["ComparisonOperator"], "GreaterThanThreshold");
    let threshold = format!("{:?}", alarm["Threshold"]);
    assert!(
        threshold.contains("Ref") && threshold.contains("CapacityWaitAlarmSeconds"),
        "{threshold}"
    );
    assert!(format!("{:?}", alarm["AlarmActions"]).contains("AlarmTopicArn"));
    let param = &t["Parameters"]["CapacityWaitAlarmSeconds"];
    assert_eq!(
        (param["Default"].as_u64(), param["MinValue"].as_u64()),
        (Some(1800), Some(60))
    );
}

/// Outputs never outlive their records: the bucket's rule for `outputs/`
/// always exists, beside the multipart cleanup, and deletes them after
/// `OutputExpiryDays`, or `RetentionDays` when that is 0 (the default); the
/// functions read the same days for views and records' TTLs.
#[test]
fn outputs_expire_by_the_parameter_or_with_their_records() {
    let t = template();
    let param = &t["Parameters"]["OutputExpiryDays"];
    assert_eq!(
        (param["Default"].as_i64(), param["MinValue"].as_i64()),
        (Some(0), Some(0))
    );
    let rules = t["Resources"]["OutputBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
        .as_sequence()
        .unwrap();
    let expire = rules
        .iter()
        .find(|r| r["Id"] == "expire-outputs")
        .expect("an unconditional rule for outputs");
    assert_eq!(
        (&expire["Prefix"], &expire["Status"]),
        (&Value::from("outputs/"), &Value::from("Enabled"))
    );
    let days = match &expire["ExpirationInDays"] {
        Value::Tagged(tag) if tag.tag == "If" => tag.value.as_sequence().expect("If's arguments").clone(),
        other => panic!("ExpirationInDays is not an !If: {other:?}"),
    };
    assert_eq!(days[0], "HasOutputExpiry");
    assert_eq!(
        (strings(&days[1]), strings(&days[2])),
        (vec!["OutputExpiryDays".to_owned()], vec!["RetentionDays".to_owned()])
    );
    assert!(rules.iter().any(|r| r["Id"] == "abort-incomplete-multipart-uploads"));
    let vars = &t["Globals"]["Function"]["Environment"]["Variables"];
    assert_eq!(strings(&vars["OUTPUT_EXPIRY_DAYS"]), ["OutputExpiryDays"]);
    assert_eq!(strings(&vars["RETENTION_DAYS"]), ["RetentionDays"]);
}

/// The console's routes are GET only, served by the console function with
/// no authorizer (the page signs in by itself; every call it makes goes
/// through the API's own authorizer), and its OIDC settings are parameters.
fn the_console_is_static_and_signs_in_by_itself(
    t: &Value,
    console: &BTreeMap<(String, String), (String, Vec<String>)>,
) {
    let paths: BTreeSet<&str> = console.keys().map(|(_, p)| p.as_str()).collect();
    assert_eq!(paths, BTreeSet::from(["/console", "/console/{file}"]));
    for ((method, path), (function, scopes)) in console {
        assert_eq!(method, "get", "{path}");
        assert_eq!(function, "ConsoleFunction", "{path}");
        assert!(scopes.is_empty(), "{path}");
    }
    let f = &functions(t)["ConsoleFunction"];
    for (_, event) in untag(&f["Properties"]["Events"]).as_mapping().unwrap() {
        assert_eq!(event["Properties"]["Auth"]["Authorizer"], "NONE");
    }
    let vars = &f["Properties"]["Environment"]["Variables"];
    for (var, param) in [
        ("CONSOLE_CLIENT_ID", "ConsoleClientId"),
        ("CONSOLE_AUTHORIZE_URL", "ConsoleAuthorizeUrl"),
        ("CONSOLE_TOKEN_URL", "ConsoleTokenUrl"),
        ("CONSOLE_SCOPE", "ConsoleScope"),
    ] {
        assert_eq!(strings(&vars[var]), [param.to_owned()], "{var}");
        assert!(t["Parameters"][param].is_mapping(), "{param}");
    }
}

/// Operators of every tenant are marked explicitly: the template names the
/// mark by a parameter and hands it to every function, so an operator
/// token with neither the tenant claim nor the mark is refused wherever it
/// is read.
#[test]
fn the_global_operator_mark_is_a_parameter_every_function_reads() {
    let t = template();
    let parameter = &t["Parameters"]["GlobalOperatorScope"];
    assert_eq!(parameter["Default"], "genace:operator:all");
    let env = &t["Globals"]["Function"]["Environment"]["Variables"];
    assert_eq!(strings(&env["GLOBAL_OPERATOR_VALUE"]), ["GlobalOperatorScope"]);
    for (name, f) in functions(&t) {
        let own = &f["Properties"]["Environment"]["Variables"]["GLOBAL_OPERATOR_VALUE"];
        assert!(own.is_null(), "{name} overrides the global-operator mark");
    }
}

/// Nobody in the account but the bus's webhook rule and the two functions
/// that queue copies can feed the webhook queue (its messages are signed
/// with a tenant's secret and POSTed): an explicit Deny for every other
/// sender, as the recovery queue has. And webhooks cannot take the
/// pipeline's Lambda concurrency: their event source has a maximum, and
/// intake and dispatch reserve theirs.
#[test]
fn the_webhook_queue_denies_other_senders_and_webhooks_cannot_starve_the_pipeline() {
    let t = template();
    let resources = resources(&t);
    let statements = resources["WebhookQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
        .as_sequence()
        .unwrap()
        .clone();
    let deny = |resource: &str| {
        statements
            .iter()
            .find(|s| s["Effect"] == "Deny" && strings(&s["Resource"]) == [resource.to_owned()])
            .unwrap_or_else(|| panic!("no Deny on {resource}"))
            .clone()
    };
    let queue = deny("WebhookQueue.Arn");
    assert_eq!(queue["Principal"], "*");
    assert_eq!(queue["Action"], "sqs:SendMessage");
    let not = &queue["Condition"]["ArnNotEquals"];
    assert_eq!(strings(&not["aws:SourceArn"]), ["WebhookRule.Arn"]);
    let senders = strings(&not["aws:PrincipalArn"]);
    assert_eq!(senders, ["EndpointsFunctionRole.Arn", "WebhookFunctionRole.Arn"]);
    let dlq = deny("WebhookDeadLetterQueue.Arn");
    assert_eq!(
        strings(&dlq["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]),
        ["WebhookFunctionRole.Arn"]
    );
    let functions = functions(&t);
    let source = &functions["WebhookFunction"]["Properties"]["Events"]["Work"]["Properties"];
    assert_eq!(
        strings(&source["ScalingConfig"]["MaximumConcurrency"]),
        ["WebhookMaxConcurrency"]
    );
    for (name, parameter) in [
        ("IntakeFunction", "IntakeReservedConcurrency"),
        ("DispatchFunction", "DispatchReservedConcurrency"),
    ] {
        let reserved = &functions[name]["Properties"]["ReservedConcurrentExecutions"];
        assert_eq!(strings(reserved), [parameter.to_owned()], "{name}");
    }
    // Reserved concurrency also caps: intake's takes the API's burst, and
    // dispatch's serves both of its queues at their most.
    let default = |name: &str| t["Parameters"][name]["Default"].as_u64().unwrap();
    assert!(default("IntakeReservedConcurrency") >= default("ApiThrottlingBurstLimit"));
    assert!(default("DispatchReservedConcurrency") >= 2 * default("DispatchMaxConcurrency"));
}

/// Least privilege inside the table: every statement that lets a function
/// write the operations table (`PutItem`, `UpdateItem`, `DeleteItem`) holds
/// it to the key prefixes it owns (`dynamodb:LeadingKeys`), and those are
/// exactly the function's: no pipeline stage may write a tenant's webhook
/// settings, and no webhook function an operation or a ledger.
#[test]
fn every_table_write_is_held_to_the_key_prefixes_its_function_owns() {
    const LIFE: [&str; 3] = ["OP#*", "TENANT#*", "ACCOUNT#*"];
    let owned = |extra: &[&str]| -> BTreeSet<String> { LIFE.iter().chain(extra).map(|p| p.to_string()).collect() };
    let only = |ps: &[&str]| -> BTreeSet<String> { ps.iter().map(|p| p.to_string()).collect() };
    let expected: BTreeMap<&str, BTreeSet<String>> = BTreeMap::from([
        ("IntakeFunction", only(&["OP#*"])),
        ("CancelFunction", owned(&[])),
        ("EraseFunction", only(&["OP#*"])),
        ("OperatorFunction", owned(&["WEBHOOK#*"])),
        ("EndpointsFunction", only(&["ENDPOINTS#*"])),
        ("DispatchFunction", owned(&[])),
        ("PollFunction", owned(&["RENDERTIME#*"])),
        ("DeliverFunction", owned(&[])),
        ("RecoveryFunction", owned(&[])),
        ("SweepFunction", owned(&["SWEEP#*"])),
        ("WebhookFunction", only(&["ENDPOINTS#*", "WHEVENT#*", "WHLOG#*"])),
    ]);
    let t = template();
    let writes = ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"];
    let mut writers = BTreeSet::new();
    for (name, f) in functions(&t) {
        for policy in untag(&f["Properties"]["Policies"]).as_sequence().into_iter().flatten() {
            for stmt in untag(&policy["Statement"]).as_sequence().into_iter().flatten() {
                let acts = strings(&stmt["Action"]);
                if !acts.iter().any(|a| writes.contains(&a.as_str())) {
                    continue;
                }
                assert!(
                    format!("{:?}", stmt["Resource"]).contains("OperationsTable"),
                    "{name}: {acts:?}"
                );
                writers.insert(name.clone());
                let keys: BTreeSet<String> =
                    strings(&stmt["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
                        .into_iter()
                        .collect();
                assert_eq!(Some(&keys), expected.get(name.as_str()), "{name}: {acts:?}");
                assert!(
                    acts.iter().all(|a| writes.contains(&a.as_str())),
                    "{name}: reads share a statement with writes: {acts:?}"
                );
            }
        }
    }
    let named: BTreeSet<String> = expected.keys().map(|k| k.to_string()).collect();
    assert_eq!(writers, named, "the functions that write the table");
}

/// The events pipe seals what the webhook function checks, under one
/// generated key only those two read (docs/decisions/0042).
#[test]
fn only_the_events_pipe_and_the_webhook_function_read_the_seal() {
    let t = template();
    let res = resources(&t);
    let fns = functions(&t);
    let allowed = grants(&fns["WebhookFunction"]);
    // The function reads webhook secrets and the events pipe's seal only,
    // never the Genace key.
    let secrets: Vec<&String> = allowed
        .iter()
        .filter(|(a, _)| a == "secretsmanager:GetSecretValue")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(secrets.len(), 2);
    assert!(
        secrets.iter().any(|r| r.contains("secret:genace/webhooks/*/*\"")),
        "only secrets inside a tenant's folder: {secrets:?}"
    );
    assert!(
        secrets
            .iter()
            .all(|r| r.contains("secret:genace/webhooks/*/*\"") || r.contains("EventsSealSecret")),
        "{secrets:?}"
    );
    for function in ["EventsFunction", "WebhookFunction"] {
        assert_eq!(
            strings(&fns[function]["Properties"]["Environment"]["Variables"]["EVENTS_SEAL_SECRET_ARN"]),
            ["EventsSealSecret"],
            "{function}"
        );
    }
    for (name, f) in &fns {
        let reads_seal = grants(f).iter().any(|(_, r)| r.contains("EventsSealSecret"));
        assert_eq!(
            reads_seal,
            ["EventsFunction", "WebhookFunction"].contains(&name.as_str()),
            "{name}"
        );
    }
    assert!(
        res["EventsSealSecret"]["Properties"]["GenerateSecretString"]["PasswordLength"]
            .as_u64()
            .is_some_and(|n| n >= 32)
    );
}
