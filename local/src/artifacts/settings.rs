//! Where the artifacts, the emulator and the template are, and the
//! environment every function gets on top of the template's.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use genace_stages::config::Config;

use crate::template::Locals;

/// Where the artifacts, the emulator and the template are.
#[derive(Debug, Clone)]
pub struct ArtifactSettings {
    /// Directory holding the function binaries (`target/debug`).
    pub bin_dir: PathBuf,
    /// The emulator (`aws-lambda-rie-x86_64` from the installed SAM CLI).
    pub rie: PathBuf,
    pub template: PathBuf,
    /// Template parameters given on the command line (`Name=Value`).
    pub params: HashMap<String, String>,
    /// Emulator logs, one file per instance.
    pub logs: PathBuf,
}

impl ArtifactSettings {
    /// Reads `ARTIFACTS_DIR` (default `target/debug`), `RIE_BIN` (required),
    /// `TEMPLATE` (default `infra/template.yaml`) and `ARTIFACT_LOGS`
    /// (default `.local/artifacts`); `params` are `Name=Value` pairs.
    pub fn from_env(params: &[String]) -> Result<Self, String> {
        let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let rie = std::env::var("RIE_BIN").map_err(
            |_| "RIE_BIN must name the Lambda Runtime Interface Emulator (scripts/run-local.sh --artifacts finds it)",
        )?;
        let params = params
            .iter()
            .map(|p| {
                p.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or(format!("template parameters are Name=Value, got {p:?}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            bin_dir: var("ARTIFACTS_DIR", "target/debug").into(),
            rie: rie.into(),
            template: var("TEMPLATE", "infra/template.yaml").into(),
            params,
            logs: var("ARTIFACT_LOGS", ".local/artifacts").into(),
        })
    }
}

impl ArtifactSettings {
    /// The functions send their spans to the OTLP/HTTP `endpoint`, with
    /// `headers` (a list as `OTEL_EXPORTER_OTLP_HEADERS` takes it), and
    /// keep `rate` of the traces (the template's `OtlpEndpoint`,
    /// `OtlpHeaders` and `TraceSampleRate`), unless the command line named
    /// them.
    pub fn send_spans_to(&mut self, endpoint: &str, rate: f64, headers: Option<String>) {
        self.params
            .entry("OtlpEndpoint".to_owned())
            .or_insert_with(|| endpoint.to_owned());
        if let Some(headers) = headers {
            self.params.entry("OtlpHeaders".to_owned()).or_insert(headers);
        }
        self.params
            .entry("TraceSampleRate".to_owned())
            .or_insert_with(|| rate.to_string());
    }
}

/// The template's parameters for a local run: the local Genace, the key
/// from the environment instead of Secrets Manager, the development JWT
/// issuer, and fault injection and http outputs as this process is set.
pub(super) fn local_locals(config: &Config, given: &HashMap<String, String>) -> Locals {
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "true" || v == "1");
    let mut params = HashMap::from([
        (
            "GenaceBaseUrl".to_owned(),
            std::env::var("GENACE_BASE_URL").unwrap_or_default(),
        ),
        ("GenaceApiKeySecretArn".to_owned(), String::new()),
        ("JwtIssuer".to_owned(), crate::devauth::ISSUER.to_owned()),
        ("JwtAudience".to_owned(), crate::devauth::AUDIENCE.to_owned()),
        (
            "FaultInjection".to_owned(),
            if flag("FAULT_INJECTION") { "enabled" } else { "disabled" }.to_owned(),
        ),
        ("AllowHttpOutputs".to_owned(), flag("DELIVERY_ALLOW_HTTP").to_string()),
    ]);
    if let Ok(claim) = std::env::var("TENANT_CLAIM") {
        params.insert("TenantClaim".into(), claim);
    }
    params.extend(given.iter().map(|(k, v)| (k.clone(), v.clone())));
    let refs = Locals::stack_refs(&config.table, &config.bucket, &config.queues);
    Locals { params, refs }
}

/// The local-only variables every function gets on top of the template's:
/// the local AWS endpoint and credentials, the Genace key (the template
/// reads it from Secrets Manager), logging, the receiver's span file, and each
/// `LOCAL_OVERRIDE_<NAME>=value` of this process as `<NAME>=value`.
pub fn local_overlay(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    const PASSED: [&str; 8] = [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "GENACE_API_KEY",
        "RUST_LOG",
        "LOG_FORMAT",
        // Where the receiver writes spans: the operators' trace route reads it.
        "GENACE_TRACES_FILE",
    ];
    let mut overlay = BTreeMap::from([
        ("AWS_CONFIG_FILE".to_owned(), "/dev/null".to_owned()),
        ("AWS_SHARED_CREDENTIALS_FILE".to_owned(), "/dev/null".to_owned()),
        ("AWS_EC2_METADATA_DISABLED".to_owned(), "true".to_owned()),
        ("METRICS_DISABLED".to_owned(), "true".to_owned()),
    ]);
    for (k, v) in vars {
        if let Some(name) = k.strip_prefix("LOCAL_OVERRIDE_").filter(|n| !n.is_empty()) {
            overlay.insert(name.to_owned(), v);
        } else if PASSED.contains(&k.as_str()) || k == "METRICS_DISABLED" {
            overlay.insert(k, v);
        }
    }
    overlay
}
