//! Reads `infra/template.yaml` for local runs of the deployment artifacts:
//! the environment the template gives each function, with its intrinsic
//! functions (`!Ref`, `!If` with its conditions, `!FindInMap`, `!GetAtt`,
//! `!Sub`) resolved against local values. A variable added to the template
//! reaches a local run without another edit.

use std::collections::{BTreeMap, HashMap};

use genace_stages::config::{QueueUrls, ResourceNames};
use serde_yaml::Value;

/// Local values for the template's parameters and resources.
#[derive(Debug, Clone, Default)]
pub struct Locals {
    /// Parameter values; a parameter not given takes its `Default`.
    pub params: HashMap<String, String>,
    /// What `!Ref <logical id>` gives for a resource (table name, queue URL, bucket).
    pub refs: HashMap<String, String>,
}

impl Locals {
    /// What `!Ref` gives for each of the stack's resources: its table,
    /// bucket and queues. The one map both the artifact runner and
    /// `genace-local env` use, so a resource the template starts to
    /// reference is missing from neither.
    pub fn stack_refs(table: &str, bucket: &str, queues: &QueueUrls) -> HashMap<String, String> {
        [
            ("OperationsTable", table),
            ("OutputBucket", bucket),
            ("DispatchQueue", &queues.dispatch),
            ("PollQueue", &queues.poll),
            ("DeliverQueue", &queues.deliver),
            ("RecoveryQueue", &queues.recovery),
            ("WebhookQueue", &queues.webhooks),
            ("WebhookDeadLetterQueue", &queues.webhook_dead_letters),
            ("WakeQueue", &queues.wake),
            ("EventsSealSecret", &genace_aws::provision::events_seal_name(table)),
        ]
        .into_iter()
        .map(|(id, value)| (id.to_owned(), value.to_owned()))
        .collect()
    }

    /// The values `genace-local env` resolves with: the local stack's
    /// default resource names, its queue URLs under `endpoint`, and the
    /// given parameters.
    pub fn local_endpoint(endpoint: &str, params: HashMap<String, String>) -> Self {
        let names = ResourceNames::with_prefix("");
        let queues = crate::local_queue_urls(endpoint, &names);
        Self {
            params,
            refs: Self::stack_refs(&names.table, &names.bucket, &queues),
        }
    }
}

/// One SQS event source mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsSource {
    /// Logical id of the queue.
    pub queue: String,
    pub batch_size: u64,
    /// `MaximumBatchingWindowInSeconds`.
    pub window_seconds: u64,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`.
    pub report_failures: bool,
}

/// One HTTP API route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRoute {
    pub function: String,
    pub method: String,
    /// The route's path, with `{name}` parameters.
    pub path: String,
    /// Scopes the authorizer requires (any one of them suffices).
    pub scopes: Vec<String>,
}

impl HttpRoute {
    /// The path parameters when `method` and `path` match this route.
    pub fn matches(&self, method: &str, path: &str) -> Option<HashMap<String, String>> {
        if self.method != "ANY" && !self.method.eq_ignore_ascii_case(method) {
            return None;
        }
        let want: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let got: Vec<&str> = path.trim_matches('/').split('/').collect();
        if want.len() != got.len() {
            return None;
        }
        let mut params = HashMap::new();
        for (w, g) in want.iter().zip(&got) {
            match w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                Some(name) if !g.is_empty() => {
                    params.insert(name.to_owned(), (*g).to_owned());
                }
                Some(_) => return None,
                None if w == g => {}
                None => return None,
            }
        }
        Some(params)
    }

    /// API Gateway's route key, `METHOD /path`.
    pub fn key(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// The template, parsed.
#[derive(Debug, Clone)]
pub struct Template {
    root: Value,
}

fn untag(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => untag(&t.value),
        other => other,
    }
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, String> {
        let root: Value = serde_yaml::from_str(text).map_err(|e| format!("the template is not YAML: {e}"))?;
        Ok(Self { root })
    }

    pub fn load(path: &str) -> Result<Self, String> {
        Self::parse(&std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?)
    }

    fn resources(&self) -> impl Iterator<Item = (&str, &Value)> {
        untag(&self.root["Resources"])
            .as_mapping()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str()?, v)))
    }

    /// Logical ids of the `AWS::Serverless::Function` resources.
    pub fn functions(&self) -> Vec<String> {
        self.resources()
            .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
            .map(|(k, _)| k.to_owned())
            .collect()
    }

    /// The function a pipe of the template runs as its enrichment step.
    pub fn pipe_enrichment(&self) -> Option<String> {
        self.resources()
            .filter(|(_, r)| r["Type"] == "AWS::Pipes::Pipe")
            .find_map(|(_, r)| match untag(&r["Properties"]["Enrichment"]) {
                Value::String(s) => Some(s.trim_end_matches(".Arn").to_owned()),
                _ => None,
            })
    }

    /// The binary a function runs (`Metadata.BuildProperties.Binary`).
    pub fn binary(&self, function: &str) -> Option<String> {
        self.root["Resources"][function]["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .map(str::to_owned)
    }

    /// The SQS event sources of a function, as its event source mappings read them.
    pub fn sqs_sources(&self, function: &str) -> Vec<SqsSource> {
        self.events(function, "SQS")
            .filter_map(|p| {
                let queue = match untag(&p["Queue"]) {
                    Value::String(s) => s.trim_end_matches(".Arn").to_owned(),
                    Value::Sequence(s) => s.first()?.as_str()?.to_owned(),
                    _ => return None,
                };
                Some(SqsSource {
                    queue,
                    batch_size: p["BatchSize"].as_u64().unwrap_or(10),
                    window_seconds: p["MaximumBatchingWindowInSeconds"].as_u64().unwrap_or(0),
                    report_failures: p["FunctionResponseTypes"]
                        .as_sequence()
                        .is_some_and(|t| t.iter().any(|t| t == "ReportBatchItemFailures")),
                })
            })
            .collect()
    }

    /// The HTTP API routes of every function: method, path and the scopes
    /// the JWT authorizer requires.
    pub fn http_routes(&self, locals: &Locals) -> Result<Vec<HttpRoute>, String> {
        let mut routes = Vec::new();
        for function in self.functions() {
            for p in self.events(&function, "HttpApi") {
                let field = |k: &str| {
                    p[k].as_str()
                        .map(str::to_owned)
                        .ok_or(format!("{function}: an HttpApi event without {k}"))
                };
                let scopes = untag(&p["Auth"]["AuthorizationScopes"])
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .map(|s| self.resolve(s, locals))
                    .collect::<Result<Vec<_>, _>>()?;
                routes.push(HttpRoute {
                    function: function.clone(),
                    method: field("Method")?.to_ascii_uppercase(),
                    path: field("Path")?,
                    scopes,
                });
            }
        }
        Ok(routes)
    }

    /// Whether `function` has an event source of type `kind`.
    pub fn has_events(&self, function: &str, kind: &str) -> bool {
        self.events(function, kind).next().is_some()
    }

    fn events<'a>(&'a self, function: &str, kind: &'a str) -> impl Iterator<Item = &'a Value> {
        untag(&self.root["Resources"][function]["Properties"]["Events"])
            .as_mapping()
            .into_iter()
            .flatten()
            .filter(move |(_, e)| e["Type"] == kind)
            .map(|(_, e)| untag(&e["Properties"]))
    }

    /// A function property (`Timeout`, `MemorySize`, ...), else its global value.
    pub fn function_setting(&self, function: &str, name: &str, locals: &Locals) -> Result<Option<String>, String> {
        let own = &self.root["Resources"][function]["Properties"][name];
        let global = &self.root["Globals"]["Function"][name];
        match (own.is_null(), global.is_null()) {
            (false, _) => self.resolve(own, locals).map(Some),
            (true, false) => self.resolve(global, locals).map(Some),
            (true, true) => Ok(None),
        }
    }

    /// The environment the template gives `function`: the global variables,
    /// then the function's own, every value resolved.
    pub fn function_env(&self, function: &str, locals: &Locals) -> Result<BTreeMap<String, String>, String> {
        let mut env = BTreeMap::new();
        let layers = [
            &self.root["Globals"]["Function"]["Environment"]["Variables"],
            &self.root["Resources"][function]["Properties"]["Environment"]["Variables"],
        ];
        if self.root["Resources"][function].is_null() {
            return Err(format!("no resource {function} in the template"));
        }
        for layer in layers {
            for (k, v) in untag(layer).as_mapping().into_iter().flatten() {
                let name = k.as_str().ok_or("a variable name is not a string")?;
                let value = self
                    .resolve(v, locals)
                    .map_err(|e| format!("{function}: {name}: {e}"))?;
                env.insert(name.to_owned(), value);
            }
        }
        Ok(env)
    }

    fn param(&self, name: &str, locals: &Locals) -> Option<String> {
        if let Some(v) = locals.params.get(name) {
            return Some(v.clone());
        }
        let default = &self.root["Parameters"][name]["Default"];
        match untag(default) {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    fn reference(&self, name: &str, locals: &Locals) -> Result<String, String> {
        if let Some(v) = self.param(name, locals) {
            return Ok(v);
        }
        if !self.root["Parameters"][name].is_null() {
            return Err(format!("parameter {name} has no default and no local value"));
        }
        match name {
            "AWS::Region" => return Ok(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())),
            "AWS::AccountId" => return Ok(crate::LOCAL_ACCOUNT.into()),
            "AWS::NoValue" => return Ok(String::new()),
            _ => {}
        }
        locals
            .refs
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no local value for !Ref {name}"))
    }

    /// Resolves a value with intrinsic functions to a string.
    pub fn resolve(&self, v: &Value, locals: &Locals) -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Tagged(t) => {
                let tag = t.tag.to_string();
                let arg = &t.value;
                match tag.as_str() {
                    "!Ref" => self.reference(arg.as_str().ok_or("!Ref needs a name")?, locals),
                    "!If" => {
                        let parts = arg
                            .as_sequence()
                            .filter(|p| p.len() == 3)
                            .ok_or("!If needs three items")?;
                        let cond = parts[0].as_str().ok_or("!If needs a condition name")?;
                        let branch = if self.condition(cond, locals)? {
                            &parts[1]
                        } else {
                            &parts[2]
                        };
                        self.resolve(branch, locals)
                    }
                    "!FindInMap" => {
                        let parts = arg
                            .as_sequence()
                            .filter(|p| p.len() == 3)
                            .ok_or("!FindInMap needs three items")?;
                        let keys = parts
                            .iter()
                            .map(|p| self.resolve(p, locals))
                            .collect::<Result<Vec<_>, _>>()?;
                        let found = &self.root["Mappings"][keys[0].as_str()][keys[1].as_str()][keys[2].as_str()];
                        self.resolve(found, locals)
                    }
                    "!GetAtt" => {
                        let target = match arg {
                            Value::String(s) => s.clone(),
                            Value::Sequence(p) => p.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("."),
                            _ => return Err("!GetAtt needs a target".into()),
                        };
                        Ok(format!("arn:aws:local:us-east-1:{}:{target}", crate::LOCAL_ACCOUNT))
                    }
                    "!Sub" => {
                        let text = arg.as_str().ok_or("only the one-argument !Sub is supported")?;
                        let mut out = String::new();
                        let mut rest = text;
                        while let Some(start) = rest.find("${") {
                            out.push_str(&rest[..start]);
                            let end = rest[start..].find('}').ok_or("unclosed ${ in !Sub")? + start;
                            let name = &rest[start + 2..end];
                            out.push_str(&self.reference(name.split('.').next().unwrap_or(name), locals)?);
                            rest = &rest[end + 1..];
                        }
                        out.push_str(rest);
                        Ok(out)
                    }
                    other => Err(format!("unsupported intrinsic {other}")),
                }
            }
            other => Err(format!("not a scalar: {other:?}")),
        }
    }

    /// Evaluates a named condition of the template.
    pub fn condition(&self, name: &str, locals: &Locals) -> Result<bool, String> {
        let expr = &self.root["Conditions"][name];
        if expr.is_null() {
            return Err(format!("no condition {name}"));
        }
        self.eval(expr, locals)
    }

    fn eval(&self, expr: &Value, locals: &Locals) -> Result<bool, String> {
        let Value::Tagged(t) = expr else {
            return Err(format!("not a condition: {expr:?}"));
        };
        let items = || t.value.as_sequence().cloned().unwrap_or_default();
        match t.tag.to_string().as_str() {
            "!Equals" => {
                let parts = items();
                if parts.len() != 2 {
                    return Err("!Equals needs two items".into());
                }
                Ok(self.resolve(&parts[0], locals)? == self.resolve(&parts[1], locals)?)
            }
            "!Not" => Ok(!self.eval(items().first().ok_or("!Not needs an item")?, locals)?),
            "!And" => items().iter().try_fold(true, |acc, c| Ok(acc && self.eval(c, locals)?)),
            "!Or" => items()
                .iter()
                .try_fold(false, |acc, c| Ok(acc || self.eval(c, locals)?)),
            "!Condition" => self.condition(t.value.as_str().ok_or("!Condition needs a name")?, locals),
            other => Err(format!("unsupported condition function {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = include_str!("../../infra/template.yaml");

    fn locals(faults: &str) -> Locals {
        Locals {
            params: HashMap::from([
                ("GenaceBaseUrl".into(), "http://127.0.0.1:9400".into()),
                ("GenaceApiKeySecretArn".into(), String::new()),
                ("JwtIssuer".into(), "genace-local".into()),
                ("FaultInjection".into(), faults.into()),
                ("AllowHttpOutputs".into(), "true".into()),
            ]),
            refs: Locals::stack_refs(
                "t-ops",
                "t-bucket",
                &QueueUrls {
                    dispatch: "http://q/dispatch".into(),
                    poll: "http://q/poll".into(),
                    deliver: "http://q/deliver".into(),
                    recovery: "http://q/recovery".into(),
                    webhooks: "http://q/webhooks".into(),
                    webhook_dead_letters: "http://q/webhooks-dlq".into(),
                    wake: "http://q/wake".into(),
                },
            ),
        }
    }

    /// A hosted receiver's key goes with the spans only where they go to
    /// the endpoint named beside it, never to the layer's collector.
    #[test]
    fn the_otlp_headers_reach_the_functions_only_with_the_endpoint() {
        let t = Template::parse(TEMPLATE).unwrap();
        let env_with = |endpoint: &str, secret: &str| {
            let mut l = locals("disabled");
            l.params.insert("OtlpEndpoint".into(), endpoint.into());
            l.params.insert("OtlpHeadersSecretArn".into(), secret.into());
            l.params.insert(
                "TracesLayerArn".into(),
                "arn:aws:lambda:us-east-1:1:layer:adot:1".into(),
            );
            t.function_env("PollFunction", &l).unwrap()
        };
        let arn = "arn:aws:secretsmanager:us-east-1:1:secret:otlp";
        let both = env_with("https://otlp.example", arn);
        assert_eq!(both["OTEL_EXPORTER_OTLP_HEADERS_SECRET_ARN"], arn);
        assert!(!both.contains_key("OTEL_EXPORTER_OTLP_HEADERS"), "{both:?}");
        assert_eq!(both["OTEL_EXPORTER_OTLP_ENDPOINT"], "https://otlp.example");
        // `AWS::NoValue` resolves to empty here, which the functions read
        // as unset (CloudFormation leaves the variable out).
        let none = |env: &BTreeMap<String, String>| {
            env.get("OTEL_EXPORTER_OTLP_HEADERS_SECRET_ARN")
                .is_none_or(String::is_empty)
        };
        let layer_only = env_with("", arn);
        assert!(none(&layer_only), "{layer_only:?}");
        assert_eq!(layer_only["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://localhost:4318");
        assert!(none(&env_with("https://otlp.example", "")));
    }

    /// What `genace-local env` (and so `scripts/cold-start.sh`) resolves
    /// with: every function's environment, with every resource it names.
    #[test]
    fn the_env_command_resolves_every_function_on_the_local_endpoint() {
        let t = Template::parse(TEMPLATE).unwrap();
        let endpoint = "http://127.0.0.1:5000";
        let locals = Locals::local_endpoint(
            endpoint,
            HashMap::from([
                ("GenaceBaseUrl".into(), "http://127.0.0.1:9".into()),
                ("GenaceApiKeySecretArn".into(), String::new()),
                ("JwtIssuer".into(), "genace-local".into()),
            ]),
        );
        let queue = |name: &str| format!("{endpoint}/{}/{name}", crate::LOCAL_ACCOUNT);
        for f in t.functions() {
            let env = t.function_env(&f, &locals).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert_eq!(env["DISPATCH_QUEUE_URL"], queue("genace-dispatch"), "{f}");
            assert_eq!(env["WAKE_QUEUE_URL"], queue("genace-wake"), "{f}");
        }
        let webhook = t.function_env("WebhookFunction", &locals).unwrap();
        assert_eq!(webhook["WEBHOOK_QUEUE_URL"], queue("genace-webhooks"));
        assert_eq!(webhook["WEBHOOK_DLQ_URL"], queue("genace-webhooks-dlq"));
    }

    #[test]
    fn every_function_gets_the_templates_environment_resolved() {
        let t = Template::parse(TEMPLATE).unwrap();
        let functions = t.functions();
        assert!(functions.len() >= 6, "{functions:?}");
        for f in &functions {
            let env = t.function_env(f, &locals("disabled")).unwrap();
            assert_eq!(env["OPERATIONS_TABLE"], "t-ops", "{f}");
            assert_eq!(env["DISPATCH_QUEUE_URL"], "http://q/dispatch", "{f}");
            assert_eq!(env["GENACE_BASE_URL"], "http://127.0.0.1:9400", "{f}");
            assert_eq!(env["FAULT_INJECTION"], "false", "{f}");
            assert_eq!(env["TENANT_CLAIM"], "tenant_id", "{f}: a parameter's default");
            assert!(t.binary(f).is_some(), "{f}");
        }
        let webhook = t.function_env("WebhookFunction", &locals("disabled")).unwrap();
        assert_eq!(
            webhook["WEBHOOK_QUEUE_URL"], "http://q/webhooks",
            "the queue it defers on"
        );
        let deliver = t.function_env("DeliverFunction", &locals("enabled")).unwrap();
        assert_eq!(deliver["FAULT_INJECTION"], "true");
        assert_eq!(
            deliver["DELIVERY_ALLOW_HTTP"], "true",
            "the function's own variables, with !If"
        );
        assert_eq!(deliver["UPLOAD_PART_BYTES"], "8388608");
        let mut prod = locals("disabled");
        prod.params.insert("Stage".into(), "prod".into());
        assert_eq!(
            t.function_env("DeliverFunction", &prod).unwrap()["DELIVERY_ALLOW_HTTP"],
            "false"
        );
    }

    #[test]
    fn a_variable_added_to_the_template_reaches_the_local_run() {
        let edited = TEMPLATE.replacen(
            "        METRICS_NAMESPACE: GenaceOperations\n",
            "        METRICS_NAMESPACE: GenaceOperations\n        BRAND_NEW_SETTING: !Sub \"${OperationsTable}-x\"\n",
            1,
        );
        let t = Template::parse(&edited).unwrap();
        let env = t.function_env("PollFunction", &locals("disabled")).unwrap();
        assert_eq!(env["BRAND_NEW_SETTING"], "t-ops-x");
    }

    #[test]
    fn event_sources_come_from_the_template() {
        let t = Template::parse(TEMPLATE).unwrap();
        let poll = SqsSource {
            queue: "PollQueue".into(),
            batch_size: 5,
            window_seconds: 0,
            report_failures: true,
        };
        assert_eq!(t.sqs_sources("PollFunction"), vec![poll]);
        let dispatch = &t.sqs_sources("DispatchFunction")[0];
        assert_eq!(
            (dispatch.queue.as_str(), dispatch.batch_size, dispatch.window_seconds),
            ("DispatchQueue", 1, 0)
        );
        assert!(t.sqs_sources("IntakeFunction").is_empty());
        let edited = TEMPLATE.replacen(
            "            BatchSize: 5\n",
            "            BatchSize: 7\n            MaximumBatchingWindowInSeconds: 2\n",
            1,
        );
        let edited = Template::parse(&edited).unwrap();
        let poll = &edited.sqs_sources("PollFunction")[0];
        assert_eq!((poll.batch_size, poll.window_seconds), (7, 2));
    }

    #[test]
    fn routes_and_settings_come_from_the_template() {
        let t = Template::parse(TEMPLATE).unwrap();
        let routes = t.http_routes(&locals("disabled")).unwrap();
        let find = |method: &str, path: &str| {
            routes
                .iter()
                .find_map(|r| r.matches(method, path).map(|p| (r.clone(), p)))
        };
        let (read, params) = find("GET", "/v1/operations/op_1").unwrap();
        assert_eq!(read.function, "IntakeFunction");
        assert_eq!(read.key(), "GET /v1/operations/{operation_id}");
        assert_eq!(params["operation_id"], "op_1");
        assert!(read.scopes.is_empty());
        let (resolve, _) = find("POST", "/v1/operations/op_1/resolution").unwrap();
        assert_eq!(resolve.function, "OperatorFunction");
        assert_eq!(resolve.scopes, vec!["genace:operator".to_owned()]);
        assert_eq!(find("POST", "/v1/operations").unwrap().0.function, "IntakeFunction");
        assert!(find("DELETE", "/v1/operations/op_1").is_none());
        // No empty operation id: the trailing slash is the listing.
        let (listing, params) = find("GET", "/v1/operations/").unwrap();
        assert_eq!(listing.key(), "GET /v1/operations");
        assert!(params.is_empty());
        assert!(find("GET", "/v1/elsewhere").is_none());

        let l = locals("disabled");
        assert_eq!(
            t.function_setting("DeliverFunction", "Timeout", &l).unwrap().as_deref(),
            Some("900")
        );
        assert_eq!(
            t.function_setting("PollFunction", "MemorySize", &l).unwrap().as_deref(),
            Some("256")
        );
        assert_eq!(t.function_setting("IntakeFunction", "Nothing", &l).unwrap(), None);
    }
}
