//! The conformance suite against the whole local stack: every handler hosted
//! by the local runner (the same functions the Lambdas run), on moto, with
//! the suite's wiremock as Genace, and the local trace receiver keeping
//! every span for the suite's trace checks.

use std::net::SocketAddr;
use std::time::Duration;

use conformance::api;
use conformance::genace::GenaceDouble;
use conformance::{Context, run_scenarios, summary};
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acceptance_scenario_passes_on_the_local_stack() {
    let env = LocalAws::fresh().await;
    let genace = GenaceDouble::start("127.0.0.1:0".parse().unwrap()).await.unwrap();

    let mut config = env.config.clone();
    config.fault_injection = true;
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    config.policy.dispatch_lease = chrono::Duration::seconds(8);
    let mut gconf = GenaceConfig::new(genace.base_url(), "conformance-key");
    gconf.timeout = Duration::from_secs(3);
    let events = std::env::temp_dir().join(format!("genace-events-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let traces = std::env::temp_dir().join(format!("genace-traces-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let receiver = genace_local::traces::Receiver::for_this_process(&traces, "local")
        .await
        .unwrap();
    let settings = runner::RunnerSettings {
        intake_addr: free_addr(),
        batch_size: 5,
        visibility_seconds: 4,
        concurrency: 2,
        sweep_every: Duration::from_secs(3),
        phase_log: false,
        events_file: Some(events.clone()),
        webhook_rule_unfiltered: false,
        console: genace_console::SignIn::Local,
        traces_file: Some(traces.clone()),
    };
    let target = format!("http://{}", settings.intake_addr);
    let running = runner::start(&env.sdk, config, gconf, settings).await.unwrap();

    let token = |tenant: &str| devauth::issue("tenant_id", tenant, 3600).unwrap();
    let ctx = Context {
        api: api::client(&target, &token("e2e-tenant-a")),
        api_other_tenant: Some(api::client(&target, &token("e2e-tenant-b"))),
        genace,
        patience: Duration::from_secs(90),
        lost_delay: Duration::from_secs(10),
        run_id: uuid::Uuid::new_v4().simple().to_string()[..10].to_owned(),
        events: Some(events.clone()),
        traces: Some(traces.clone()),
    };
    let results = run_scenarios(&ctx, &[]).await;
    running.shutdown().await;
    let _ = std::fs::remove_file(&events);
    drop(receiver);
    let _ = std::fs::remove_file(&traces);
    let report = summary(&results);
    println!("{report}");
    assert_eq!(results.len(), conformance::SCENARIOS.len());
    assert!(results.iter().all(|r| r.outcome.is_ok()), "{report}");
}
