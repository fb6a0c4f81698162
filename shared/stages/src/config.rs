//! Settings, read once per cold start from environment variables.
//!
//! Every setting has a documented default (see the table in
//! docs/configuration.md). Queue URLs default to the local stack's names when
//! `AWS_ENDPOINT_URL` points at a local endpoint.

use chrono::Duration;

use genace_core::machine::Policy;
use genace_core::urlguard::UrlPolicy;

/// The most copies one recovery of an endpoint queues unless the
/// deployment says otherwise (`WEBHOOK_RECOVER_COPIES`).
pub const DEFAULT_RECOVER_COPIES: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration: {0}")]
pub struct ConfigError(pub String);

/// Names of the AWS resources a deployment uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceNames {
    pub table: String,
    pub bucket: String,
    /// Queue names; each also has a `<name>-dlq`.
    pub dispatch_queue: String,
    pub poll_queue: String,
    pub deliver_queue: String,
    pub recovery_queue: String,
    /// Lifecycle events for tenants' webhooks (the bus rule's target).
    pub webhook_queue: String,
    /// Wake-ups of operations waiting for a slot or for credits, which
    /// dispatch consumes beside its own queue (never behind a burst).
    pub wake_queue: String,
}

impl ResourceNames {
    /// The default names, each optionally prefixed (tests use a unique prefix).
    pub fn with_prefix(prefix: &str) -> Self {
        Self {
            table: format!("{prefix}genace-operations"),
            bucket: format!("{prefix}genace-outputs"),
            dispatch_queue: format!("{prefix}genace-dispatch"),
            poll_queue: format!("{prefix}genace-poll"),
            deliver_queue: format!("{prefix}genace-deliver"),
            recovery_queue: format!("{prefix}genace-recovery"),
            webhook_queue: format!("{prefix}genace-webhooks"),
            wake_queue: format!("{prefix}genace-wake"),
        }
    }

    pub fn queues(&self) -> [&str; 6] {
        [
            &self.dispatch_queue,
            &self.poll_queue,
            &self.deliver_queue,
            &self.recovery_queue,
            &self.webhook_queue,
            &self.wake_queue,
        ]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueUrls {
    pub dispatch: String,
    pub poll: String,
    pub deliver: String,
    pub recovery: String,
    /// Only the webhook stage reads it (and, locally, the events pipe
    /// writes it, as the bus rule does on AWS).
    pub webhooks: String,
    /// The webhook queue's dead-letter queue (`WEBHOOK_DLQ_URL`): the
    /// webhook stage sends an event there at once when it can never be
    /// delivered as configured.
    pub webhook_dead_letters: String,
    /// Wake-ups for dispatch (`WAKE_QUEUE_URL`; the dispatch queue when
    /// unset): a queue of their own, so a wake-up is not queued behind the
    /// fresh intents of a burst while the slot it is for stands idle.
    pub wake: String,
}

impl QueueUrls {
    /// Every queue's URL as `{base}/{name}`: SQS's shape, where `base` is
    /// the endpoint and the account (the local stack forms its URLs so).
    pub fn under(base: &str, names: &ResourceNames) -> Self {
        let base = base.trim_end_matches('/');
        let url = |n: &str| format!("{base}/{n}");
        Self {
            dispatch: url(&names.dispatch_queue),
            poll: url(&names.poll_queue),
            deliver: url(&names.deliver_queue),
            recovery: url(&names.recovery_queue),
            webhooks: url(&names.webhook_queue),
            webhook_dead_letters: url(&format!("{}-dlq", names.webhook_queue)),
            wake: url(&names.wake_queue),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub table: String,
    pub bucket: String,
    pub queues: QueueUrls,
    /// JWT claim that names the tenant (`TENANT_CLAIM`, default `tenant_id`).
    pub tenant_claim: String,
    /// Claim that marks operators (`OPERATOR_CLAIM`, default `scope`; a
    /// space-separated list, or `[a b]` as API Gateway renders groups).
    pub operator_claim: String,
    /// Value in that claim that makes an operator (`OPERATOR_VALUE`, default `genace:operator`).
    pub operator_value: String,
    /// Value in the same claim that marks an operator of every tenant
    /// (`GLOBAL_OPERATOR_VALUE`, default `genace:operator:all`). An
    /// operator token with neither the tenant claim nor this mark is
    /// refused: a tenant claim the issuer names differently never makes a
    /// scoped operator global.
    pub global_operator_value: String,
    /// Largest accepted intake body in bytes.
    pub max_body_bytes: usize,
    /// A prepared operation older than this is re-enqueued by the sweep.
    pub dispatch_grace: Duration,
    pub policy: Policy,
    /// When a failed webhook POST is tried again (`WEBHOOK_RETRY_FIRST_SECONDS`,
    /// default 30, doubling to `WEBHOOK_RETRY_MAX_SECONDS`, default 6 h).
    pub webhook_retry: RetrySchedule,
    /// How long a rotated webhook secret's old value still signs, beside
    /// the new one (`WEBHOOK_SECRET_OVERLAP_HOURS`, default 24).
    pub webhook_secret_overlap: Duration,
    /// The most webhook endpoints one tenant may have (`WEBHOOK_MAX_ENDPOINTS`,
    /// default 5, 1 to 100).
    pub webhook_max_endpoints: usize,
    /// The most copies one recovery of an endpoint queues
    /// (`WEBHOOK_RECOVER_COPIES`, default [`DEFAULT_RECOVER_COPIES`], 1 to
    /// 1,000).
    pub webhook_recover_copies: usize,
    /// How long an endpoint may fail without one success before it is
    /// disabled (`WEBHOOK_DISABLE_AFTER_HOURS`, default 72, 1 to 720).
    pub webhook_disable_after: Duration,
    /// How long each entry of an endpoint's attempt log is kept
    /// (`WEBHOOK_LOG_DAYS`, default 30, 1 to 365).
    pub webhook_log_days: Duration,
    /// Whether per-operation fault directives are honoured (never in production).
    pub fault_injection: bool,
    /// Whether `operation.delivered` names the bucket (`EVENTS_NAME_BUCKET`,
    /// default false: tenants fetch through the API's links).
    pub events_name_bucket: bool,
    /// Longest delay between two polls of a running job (SQS allows 900 s).
    pub poll_max_delay_seconds: u32,
    /// A job with no terminal state this long after acceptance opens a stall case.
    pub stall_after: Duration,
    /// Key prefix of delivered objects.
    pub output_prefix: String,
    /// Multipart part size for deliveries.
    pub part_size: usize,
    /// First delay before a failed delivery is retried; it doubles per attempt (`DELIVERY_BACKOFF_SECONDS`).
    pub delivery_backoff_seconds: u32,
    /// Wall-clock bound of one delivery attempt, below the deliver function's timeout (`DELIVERY_ATTEMPT_SECONDS`).
    pub delivery_attempt_deadline: std::time::Duration,
    /// Largest output delivered (`MAX_OUTPUT_BYTES`, default 4 GiB); a larger one opens a case.
    pub max_output_bytes: u64,
    /// Lifetime of the presigned GET URLs in operation views.
    pub presign_expiry: std::time::Duration,
    /// Which output URLs deliver may fetch.
    pub url_policy: UrlPolicy,
    /// `WEBHOOK_ALLOWED_PORTS`: the ports a tenant's webhook URL may name;
    /// empty allows 443 only. See [`Config::webhook_url_policy`].
    pub webhook_allowed_ports: Vec<u16>,
    /// `GENACE_MAX_IN_FLIGHT`: the most jobs of ours the Genace account may
    /// have in flight at once (1 to 10,000); unset, no limit. A dispatch
    /// claim past it waits for a slot instead of POSTing.
    pub max_in_flight: Option<u32>,
}

impl Config {
    /// Which webhook URLs may be saved and POSTed to: https, public
    /// addresses, port 443 unless `WEBHOOK_ALLOWED_PORTS` says otherwise.
    /// Not the output-download policy: `OUTPUT_ALLOWED_HOSTS` names
    /// Genace's CDN and says nothing about tenants' receivers. Only the two
    /// local-run switches (`DELIVERY_ALLOW_HTTP`, `DELIVERY_ALLOW_PRIVATE`)
    /// are shared.
    pub fn webhook_url_policy(&self) -> UrlPolicy {
        UrlPolicy {
            allow_http: self.url_policy.allow_http,
            allow_private: self.url_policy.allow_private,
            allowed_hosts: Vec::new(),
            allowed_ports: self.webhook_allowed_ports.clone(),
        }
    }
}

/// SQS's longest message delay, as the settings' integer type.
const MAX_DELAY: i64 = crate::ports::queue::MAX_DELAY_SECONDS as i64;

fn ports(vars: Vars<'_>, name: &str) -> Result<Vec<u16>, ConfigError> {
    match var(vars, name) {
        None => Ok(Vec::new()),
        Some(v) => v
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.parse::<u16>()
                    .map_err(|_| ConfigError(format!("{name} has a bad port {p:?}")))
            })
            .collect(),
    }
}

/// Where settings are looked up by name: the composition root passes the
/// process environment; nothing in this crate reads it.
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

fn var(vars: Vars<'_>, name: &str) -> Option<String> {
    vars(name).filter(|v| !v.trim().is_empty())
}

impl QueueUrls {
    /// The four work queues' URLs (required) and the webhook queue's and
    /// its DLQ's (only the functions that use them have them).
    fn from_vars(vars: Vars<'_>) -> Result<Self, ConfigError> {
        let queue = |name: &str| var(vars, name).ok_or_else(|| ConfigError(format!("{name} is not set")));
        let dispatch = queue("DISPATCH_QUEUE_URL")?;
        Ok(Self {
            wake: var(vars, "WAKE_QUEUE_URL").unwrap_or_else(|| dispatch.clone()),
            dispatch,
            poll: queue("POLL_QUEUE_URL")?,
            deliver: queue("DELIVER_QUEUE_URL")?,
            recovery: queue("RECOVERY_QUEUE_URL")?,
            webhooks: var(vars, "WEBHOOK_QUEUE_URL").unwrap_or_default(),
            webhook_dead_letters: var(vars, "WEBHOOK_DLQ_URL").unwrap_or_default(),
        })
    }
}

/// [`number`], at most `most`.
fn within(vars: Vars<'_>, name: &str, default: i64, most: i64) -> Result<i64, ConfigError> {
    match number(vars, name, default)? {
        n if n <= most => Ok(n),
        n => Err(ConfigError(format!("{name} is {n}; it must be 1 to {most}"))),
    }
}

fn number(vars: Vars<'_>, name: &str, default: i64) -> Result<i64, ConfigError> {
    match var(vars, name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ConfigError(format!("{name} must be a positive integer, got {v:?}"))),
    }
}

/// `GENACE_MAX_IN_FLIGHT`: unset or empty for no limit, else 1 to
/// [`genace_core::capacity::MAX_IN_FLIGHT_LIMIT`].
fn in_flight_limit(vars: Vars<'_>) -> Result<Option<u32>, ConfigError> {
    let Some(v) = var(vars, "GENACE_MAX_IN_FLIGHT") else {
        return Ok(None);
    };
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=genace_core::capacity::MAX_IN_FLIGHT_LIMIT).contains(n))
        .map(Some)
        .ok_or_else(|| {
            ConfigError(format!(
                "GENACE_MAX_IN_FLIGHT must be a whole number from 1 to 10000, got {v:?}"
            ))
        })
}

/// `GENACE_ACCOUNT_SHARDS`: how many items the account's counters are
/// split into ([`genace_core::shard`]); unset or empty for 1, else 1 to
/// [`genace_core::shard::MAX_ACCOUNT_SHARDS`], and no more than
/// `GENACE_MAX_IN_FLIGHT`, so every shard's part of the deployment's limit
/// admits at least one job.
fn account_shards(vars: Vars<'_>) -> Result<genace_core::shard::AccountShards, ConfigError> {
    use genace_core::shard::{AccountShards, MAX_ACCOUNT_SHARDS};
    let Some(v) = var(vars, "GENACE_ACCOUNT_SHARDS") else {
        return Ok(AccountShards::ONE);
    };
    let shards = v
        .trim()
        .parse::<u16>()
        .ok()
        .and_then(AccountShards::new)
        .ok_or_else(|| {
            ConfigError(format!(
                "GENACE_ACCOUNT_SHARDS must be a whole number from 1 to {MAX_ACCOUNT_SHARDS}, got {v:?}"
            ))
        })?;
    match in_flight_limit(vars)? {
        Some(limit) if limit < u32::from(shards.get()) => Err(ConfigError(format!(
            "GENACE_ACCOUNT_SHARDS ({}) must not exceed GENACE_MAX_IN_FLIGHT ({limit}): a shard's part of the limit would be 0",
            shards.get()
        ))),
        _ => Ok(shards),
    }
}

/// `OUTPUT_EXPIRY_DAYS`: unset, empty or 0 (the template's default) for
/// "as long as the record" (none here: `RETENTION_DAYS` stands in), else a
/// positive number of days.
fn output_expiry_days(vars: Vars<'_>) -> Result<Option<u32>, ConfigError> {
    match var(vars, "OUTPUT_EXPIRY_DAYS").as_deref().map(str::trim) {
        None | Some("" | "0") => Ok(None),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| ConfigError(format!("OUTPUT_EXPIRY_DAYS must be 0 or a number of days, got {v:?}"))),
    }
}

fn flag(vars: Vars<'_>, name: &str) -> Result<bool, ConfigError> {
    match var(vars, name).as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("0" | "false" | "no" | "off" | "disabled") => Ok(false),
        Some("1" | "true" | "yes" | "on" | "enabled") => Ok(true),
        Some(other) => Err(ConfigError(format!("{name} must be true or false, got {other:?}"))),
    }
}

impl Config {
    /// The settings named in `vars` (the deployment's environment), each
    /// at its default when unset. The four stage queue URLs are required.
    pub fn from_vars(vars: Vars<'_>) -> Result<Self, ConfigError> {
        let names = ResourceNames::with_prefix("");
        let var = |name: &str| var(vars, name);
        let number = |name: &str, default: i64| number(vars, name, default);
        let flag = |name: &str| flag(vars, name);
        let ports = |name: &str| ports(vars, name);
        Ok(Self {
            table: var("OPERATIONS_TABLE").unwrap_or(names.table),
            bucket: var("OUTPUT_BUCKET").unwrap_or(names.bucket),
            queues: QueueUrls::from_vars(vars)?,
            tenant_claim: var("TENANT_CLAIM").unwrap_or_else(|| "tenant_id".into()),
            operator_claim: var("OPERATOR_CLAIM").unwrap_or_else(|| "scope".into()),
            operator_value: var("OPERATOR_VALUE").unwrap_or_else(|| "genace:operator".into()),
            global_operator_value: var("GLOBAL_OPERATOR_VALUE").unwrap_or_else(|| "genace:operator:all".into()),
            max_body_bytes: 64 * 1024,
            dispatch_grace: Duration::seconds(number("DISPATCH_GRACE_SECONDS", 60)?),
            policy: Policy {
                dispatch_lease: Duration::seconds(number("DISPATCH_LEASE_SECONDS", 120)?),
                observe_grace: Duration::seconds(number("OBSERVE_GRACE_SECONDS", 300)?),
                retention: Duration::days(number("RETENTION_DAYS", 30)?),
                output_days: output_expiry_days(vars)?
                    .unwrap_or(u32::try_from(number("RETENTION_DAYS", 30)?).unwrap_or(30)),
                delivery_lease: Duration::seconds(number("DELIVERY_LEASE_SECONDS", 960)?),
                delivery_max_attempts: number("DELIVERY_MAX_ATTEMPTS", 8)? as u32,
                account_hold: Duration::seconds(number("ACCOUNT_HOLD_SECONDS", 600)?),
                rate_limit_max: number("RATE_LIMIT_MAX_RETRIES", 10)? as u32,
                credit_estimate: genace_core::machine::CreditEstimate {
                    image: number("CREDIT_ESTIMATE_IMAGE", 1)? as f64,
                    video: number("CREDIT_ESTIMATE_VIDEO", 10)? as f64,
                },
                account_shards: account_shards(vars)?,
            },
            webhook_retry: RetrySchedule {
                first_seconds: number("WEBHOOK_RETRY_FIRST_SECONDS", 30)? as u32,
                max_seconds: number("WEBHOOK_RETRY_MAX_SECONDS", 6 * 3600)? as u32,
            },
            webhook_secret_overlap: Duration::hours(number("WEBHOOK_SECRET_OVERLAP_HOURS", 24)?),
            webhook_max_endpoints: within(vars, "WEBHOOK_MAX_ENDPOINTS", 5, 100)? as usize,
            webhook_recover_copies: within(vars, "WEBHOOK_RECOVER_COPIES", DEFAULT_RECOVER_COPIES as i64, 1000)?
                as usize,
            webhook_log_days: Duration::days(within(vars, "WEBHOOK_LOG_DAYS", 30, 365)?),
            webhook_disable_after: Duration::hours(within(vars, "WEBHOOK_DISABLE_AFTER_HOURS", 72, 720)?),
            fault_injection: flag("FAULT_INJECTION")?,
            events_name_bucket: flag("EVENTS_NAME_BUCKET")?,
            poll_max_delay_seconds: number("POLL_MAX_DELAY_SECONDS", MAX_DELAY)?.min(MAX_DELAY) as u32,
            stall_after: Duration::seconds(number("RENDER_STALL_SECONDS", 6 * 3600)?),
            output_prefix: var("OUTPUT_PREFIX").unwrap_or_else(|| "outputs".into()),
            part_size: number("UPLOAD_PART_BYTES", 8 * 1024 * 1024)? as usize,
            delivery_backoff_seconds: number("DELIVERY_BACKOFF_SECONDS", 5)?.min(MAX_DELAY) as u32,
            delivery_attempt_deadline: std::time::Duration::from_secs(number("DELIVERY_ATTEMPT_SECONDS", 780)? as u64),
            max_output_bytes: number("MAX_OUTPUT_BYTES", 4 * 1024 * 1024 * 1024)? as u64,
            presign_expiry: std::time::Duration::from_secs(number("PRESIGN_EXPIRY_SECONDS", 3600)? as u64),
            url_policy: UrlPolicy {
                allow_http: flag("DELIVERY_ALLOW_HTTP")?,
                allow_private: flag("DELIVERY_ALLOW_PRIVATE")?,
                allowed_hosts: var("OUTPUT_ALLOWED_HOSTS")
                    .map(|v| {
                        v.split(',')
                            .map(|h| h.trim().to_ascii_lowercase())
                            .filter(|h| !h.is_empty())
                            .collect()
                    })
                    .unwrap_or_default(),
                allowed_ports: ports("OUTPUT_ALLOWED_PORTS")?,
            },
            webhook_allowed_ports: ports("WEBHOOK_ALLOWED_PORTS")?,
            max_in_flight: in_flight_limit(vars)?,
        })
    }

    /// A configuration for the given resources, with every other setting at its default.
    pub fn for_resources(names: &ResourceNames, queues: QueueUrls) -> Self {
        Self {
            table: names.table.clone(),
            bucket: names.bucket.clone(),
            queues,
            tenant_claim: "tenant_id".into(),
            operator_claim: "scope".into(),
            operator_value: "genace:operator".into(),
            global_operator_value: "genace:operator:all".into(),
            max_body_bytes: 64 * 1024,
            dispatch_grace: Duration::seconds(60),
            policy: Policy::default(),
            webhook_retry: RetrySchedule::default(),
            webhook_secret_overlap: Duration::hours(24),
            webhook_max_endpoints: 5,
            webhook_recover_copies: DEFAULT_RECOVER_COPIES,
            webhook_log_days: Duration::days(30),
            webhook_disable_after: Duration::hours(72),
            fault_injection: false,
            events_name_bucket: false,
            poll_max_delay_seconds: crate::ports::queue::MAX_DELAY_SECONDS,
            stall_after: Duration::seconds(6 * 3600),
            output_prefix: "outputs".into(),
            part_size: 8 * 1024 * 1024,
            delivery_backoff_seconds: 5,
            delivery_attempt_deadline: std::time::Duration::from_secs(780),
            max_output_bytes: 4 * 1024 * 1024 * 1024,
            presign_expiry: std::time::Duration::from_secs(3600),
            url_policy: UrlPolicy::default(),
            webhook_allowed_ports: Vec::new(),
            max_in_flight: None,
        }
    }
}

/// When an event whose POST failed is tried again: `first_seconds` after
/// the first failure, twice as long after each further one, never more
/// than `max_seconds` (nor what SQS grants a received message) between two tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    pub first_seconds: u32,
    pub max_seconds: u32,
}

impl Default for RetrySchedule {
    /// 30 s, doubling up to 6 h.
    fn default() -> Self {
        Self {
            first_seconds: 30,
            max_seconds: 6 * 3600,
        }
    }
}

impl RetrySchedule {
    /// The wait after the `receives`-th delivery failed (counting from 1).
    pub fn after(&self, receives: u32) -> u32 {
        let doubled = u64::from(self.first_seconds) << receives.saturating_sub(1).min(32);
        let most = crate::ports::queue::visibility_left(self.max_seconds, std::time::Duration::ZERO);
        doubled.min(u64::from(most)) as u32
    }

    /// How long an event is retried in all when the queue dead-letters it
    /// on delivery number `max_receives + 1`: the waits after each of its
    /// `max_receives` failed deliveries.
    pub fn span(&self, max_receives: u32) -> u64 {
        (1..=max_receives).map(|n| u64::from(self.after(n))).sum()
    }
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn retries_wait_twice_as_long_each_time_up_to_the_cap() {
        let r = RetrySchedule::default();
        let waits: Vec<u32> = (1..=12).map(|n| r.after(n)).collect();
        assert_eq!(
            waits,
            [30, 60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 21600, 21600]
        );
        assert_eq!(r.after(0), 30, "a missing receive count counts as the first");
        assert_eq!(r.after(u32::MAX), 21600, "no overflow");
        let capped = RetrySchedule {
            first_seconds: 3600,
            max_seconds: u32::MAX,
        };
        assert_eq!(
            capped.after(10),
            crate::ports::queue::MAX_VISIBILITY_SECONDS - crate::ports::queue::RECEIPT_MARGIN_SECONDS,
            "SQS refuses the whole 12 h once a message is received"
        );
        assert_eq!(r.span(3), 30 + 60 + 120);
    }
}

#[cfg(test)]
mod from_vars_tests {
    use std::collections::HashMap;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        Config::from_vars(&|name: &str| map.get(name).cloned())
    }

    const QUEUES: [(&str, &str); 4] = [
        ("DISPATCH_QUEUE_URL", "https://sqs/1/d"),
        ("POLL_QUEUE_URL", "https://sqs/1/p"),
        ("DELIVER_QUEUE_URL", "https://sqs/1/dl"),
        ("RECOVERY_QUEUE_URL", "https://sqs/1/r"),
    ];

    #[test]
    fn settings_come_from_the_lookup_given_with_defaults_for_the_rest() {
        let mut pairs = QUEUES.to_vec();
        pairs.extend([
            ("RETENTION_DAYS", "7"),
            ("FAULT_INJECTION", "true"),
            ("OUTPUT_ALLOWED_PORTS", "443, 8443"),
        ]);
        let c = config(&pairs).unwrap();
        assert_eq!(c.queues.poll, "https://sqs/1/p");
        assert_eq!(c.policy.retention, Duration::days(7));
        assert!(c.fault_injection);
        assert_eq!(c.url_policy.allowed_ports, vec![443, 8443]);
        assert_eq!(c.tenant_claim, "tenant_id", "unset: the default");
        assert_eq!(c.queues.webhooks, "", "only the webhook stage needs it");
    }

    #[test]
    fn a_missing_queue_or_a_bad_value_is_an_error_that_names_the_setting() {
        let e = config(&QUEUES[..3]).unwrap_err();
        assert!(e.0.contains("RECOVERY_QUEUE_URL"), "{e}");
        let mut pairs = QUEUES.to_vec();
        pairs.push(("DISPATCH_LEASE_SECONDS", "-3"));
        assert!(config(&pairs).unwrap_err().0.contains("DISPATCH_LEASE_SECONDS"));
        pairs.pop();
        pairs.push(("FAULT_INJECTION", "maybe"));
        assert!(config(&pairs).unwrap_err().0.contains("FAULT_INJECTION"));
    }

    /// Shards of the account: 1 unless set, at most 32, and never more
    /// than the deployment's limit (a shard's part would admit nothing).
    #[test]
    fn account_shards_are_parsed_and_bounded_by_the_limit() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut all = QUEUES.to_vec();
            all.extend_from_slice(pairs);
            config(&all).map(|c| c.policy.account_shards.get())
        };
        assert_eq!(with(&[]).unwrap(), 1);
        assert_eq!(with(&[("GENACE_ACCOUNT_SHARDS", "4")]).unwrap(), 4);
        assert_eq!(
            with(&[("GENACE_ACCOUNT_SHARDS", "8"), ("GENACE_MAX_IN_FLIGHT", "8")]).unwrap(),
            8
        );
        for bad in ["0", "33", "two", "-1"] {
            let e = with(&[("GENACE_ACCOUNT_SHARDS", bad)]).unwrap_err();
            assert!(e.0.contains("GENACE_ACCOUNT_SHARDS"), "{e}");
        }
        let e = with(&[("GENACE_ACCOUNT_SHARDS", "4"), ("GENACE_MAX_IN_FLIGHT", "3")]).unwrap_err();
        assert!(e.0.contains("must not exceed GENACE_MAX_IN_FLIGHT"), "{e}");
    }

    /// The template's default, 0, keeps outputs as long as their records
    /// (`RETENTION_DAYS`): a deployment with the default must start.
    #[test]
    fn an_output_expiry_of_0_is_the_retention_and_a_negative_one_is_refused() {
        let with = |days: &str| {
            let mut pairs = QUEUES.to_vec();
            pairs.extend([("OUTPUT_EXPIRY_DAYS", days), ("RETENTION_DAYS", "14")]);
            config(&pairs)
        };
        assert_eq!(config(&QUEUES).unwrap().policy.output_days, 30);
        assert_eq!(with("0").unwrap().policy.output_days, 14);
        assert_eq!(with("90").unwrap().policy.output_days, 90);
        assert!(with("-1").unwrap_err().0.contains("OUTPUT_EXPIRY_DAYS"));
    }
}
