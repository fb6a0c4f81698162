//! `console`: how quickly the operator console shows the first page of open
//! cases when many are open.
//!
//! N operations are written straight into fresh local resources as the
//! lifecycle leaves them after a lost 202 (created, claimed, `uncertain`
//! with an `unknown_submit_outcome` case: one conditional PutItem each).
//! The local runner serves the API and the console; headless Chromium,
//! through ChromeDriver, signs in once, then loads the console afresh for
//! each run: from the navigation to the first page's rows on screen, which
//! takes the page, its script, its settings and two API calls (the page of
//! cases and the counts by reason). The API's own latency for those two
//! calls is measured apart.

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use futures::StreamExt;
use genace_client::{ListQuery, RetryPolicy};
use genace_core::domain::{Intent, TenantId};
use genace_core::machine::{Input, Policy, transition};
use genace_core::record::OperationRecord;
use genace_local::browser::Driver;
use genace_local::devauth;
use genace_stages::ports::table::OperationRecords;

use crate::cli::ConsoleArgs;
use crate::report::{ms, percentile};
use crate::stack::{Stack, start_standin};

/// The console's page size.
const PAGE: usize = 25;

pub(crate) async fn run(endpoint: &str, args: &ConsoleArgs) -> Result<(), String> {
    let mut stack = Stack::fresh(endpoint).await?;
    // moto answers a query over thousands of items in seconds, where
    // DynamoDB takes milliseconds: the runner's AWS timeouts are raised so
    // the counts are measured, not cut off.
    let patient = genace_aws::clients::TimeoutBudget {
        connect: Duration::from_secs(2),
        attempt: Duration::from_secs(60),
        operation: Duration::from_secs(120),
    };
    stack.sdk = stack.sdk.to_builder().timeout_config(patient.config()).build();
    let started = Instant::now();
    seed(&stack, args.cases).await?;
    let seeded = started.elapsed();
    let (_sim, base) = start_standin(1024).await?;
    let (running, addr) = stack.start_runner(&base, 2).await?;
    let api = format!("http://{addr}");
    let operator = devauth::issue_operator("bench-operator", "tenant_id", None, 3600)?;
    let ops = genace_client::Client::new(&api, &operator).with_retry(RetryPolicy::none());
    let first_page = ListQuery::new().with("limit", PAGE);
    let mut list = Vec::new();
    let mut counts = Vec::new();
    for _ in 0..args.runs {
        list.push(timed("the page of cases", ops.cases_page(&first_page, None)).await?);
        counts.push(timed("the counts", ops.case_counts(None)).await?);
    }
    let driver = Driver::start()?;
    let browser = driver.connect().await?;
    let shown = first_pages(&browser, &format!("{api}/console"), args.runs).await;
    let _ = browser.close().await;
    running.shutdown().await;
    let (shown, counted) = shown?;

    println!("# genace-bench console\n");
    println!(
        "{} open cases (seeded in {:.0} s); the console's first page of {PAGE}, loaded afresh {} times in headless Chromium.\n",
        args.cases,
        seeded.as_secs_f64(),
        args.runs
    );
    println!("| measure | p50 | max | goal |");
    println!("|---|---|---|---|");
    for (what, mut v, goal) in [
        ("first page on screen (navigation to rows)", shown, "< 1 s"),
        ("counts by reason on screen (navigation to counts)", counted, ""),
        ("API: a page of cases, oldest first", list, ""),
        ("API: counts by reason", counts, ""),
    ] {
        v.sort();
        let max = v.last().copied().unwrap_or_default();
        println!("| {what} | {} ms | {} ms | {goal} |", ms(percentile(&v, 50.0)), ms(max));
    }
    Ok(())
}

/// `n` operations, each `uncertain` with a case, written as the lifecycle
/// leaves them; eight writes at a time.
async fn seed(stack: &Stack, n: usize) -> Result<(), String> {
    let tenants = ["bench-heavy", "bench-mid", "bench-light"];
    let store = &stack.observer;
    let results: Vec<Result<(), String>> = futures::stream::iter(0..n)
        .map(|i| async move {
            let rec = lost_202(tenants[i % tenants.len()], &format!("case-{i}"))?;
            store
                .create(&rec, chrono::Utc::now())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        })
        .buffer_unordered(8)
        .collect()
        .await;
    results.into_iter().collect()
}

/// An operation whose POST's outcome was lost: `uncertain`, with a case.
fn lost_202(tenant: &str, key: &str) -> Result<OperationRecord, String> {
    let intent = Intent::parse(
        &serde_json::json!({"operation_key": key, "media_type": "image",
                            "specification": {"model": "genace-image-1", "prompt": key}}),
        None,
    )
    .map_err(|e| format!("{e:?}"))?;
    let tenant = TenantId::parse(tenant).map_err(|e| format!("{e:?}"))?;
    let now = chrono::Utc::now();
    let policy = Policy::default();
    let rec = OperationRecord::new_intent(&tenant, &intent, None, now, chrono::Duration::seconds(60));
    let claimed = transition(
        &rec,
        Input::ClaimDispatch {
            token: "bench",
            shard: 0,
        },
        now,
        &policy,
    )
    .map_err(|e| format!("{e:?}"))?;
    let lost = Input::OutcomeUnknown {
        token: "bench",
        evidence: "the connection closed before the answer",
    };
    transition(&claimed, lost, now, &policy).map_err(|e| format!("{e:?}"))
}

/// How long `call` takes to answer with a success.
async fn timed<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, genace_client::Error>>,
) -> Result<Duration, String> {
    let t0 = Instant::now();
    call.await.map_err(|e| format!("{what}: {e}"))?;
    Ok(t0.elapsed())
}

/// Signs in, then loads the cases page afresh `runs` times: the time from
/// each navigation to a full first page on screen, and to the counts.
async fn first_pages(browser: &Client, console: &str, runs: u64) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let e = |e: fantoccini::error::CmdError| e.to_string();
    browser.goto(console).await.map_err(e)?;
    let form = browser
        .wait()
        .for_element(Locator::Id("local-sign-in"))
        .await
        .map_err(e)?;
    form.find(Locator::Css("button[type='submit']"))
        .await
        .map_err(e)?
        .click()
        .await
        .map_err(e)?;
    browser.wait().for_element(Locator::Id("cases")).await.map_err(e)?;
    // The sign-in's own page counts too: the runs start once it has.
    browser
        .wait()
        .at_most(Duration::from_secs(120))
        .for_element(Locator::Css("#counts:not([aria-busy])"))
        .await
        .map_err(e)?;
    let mut shown = Vec::new();
    let mut counted = Vec::new();
    for _ in 0..runs {
        browser.goto("about:blank").await.map_err(e)?;
        let t0 = Instant::now();
        browser.goto(&format!("{console}#/cases")).await.map_err(e)?;
        loop {
            let rows = browser.find_all(Locator::Css("#cases tbody tr")).await.map_err(e)?;
            if rows.len() >= PAGE {
                break;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(format!("{} rows after 30 s", rows.len()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        shown.push(t0.elapsed());
        // The counts too, before the next run, so no run waits on the
        // previous one's counting.
        loop {
            let counted = browser.find(Locator::Css("#counts:not([aria-busy])")).await.is_ok();
            if counted {
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                return Err("no counts after 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        counted.push(t0.elapsed());
    }
    Ok((shown, counted))
}
