//! The operator console in a real browser: headless Chromium (Debian's
//! `chromium` and `chromium-driver`, which `scripts/test.sh` installs),
//! driven through WebDriver against the local stack. Genace answers the
//! first seven POSTs with a 500 and no job id, so seven operations end
//! `uncertain` with an `unknown_submit_outcome` case each, as the lost-202
//! scenario leaves them. The operator signs in, resolves one case with
//! `confirm_not_created` and sees it gone, meets the 412 message on a stale
//! decision, attaches three jobs in one bulk action, and an operator limited
//! to a tenant sees only that tenant's case.
//!
//! The operation whose job fails shows its trace as a waterfall, read
//! from the local trace receiver through the operator's trace route.
//!
//! `CHROMEDRIVER` and `CHROMIUM` name other binaries; screenshots of the
//! cases list, of an operation page and of a trace go to `target/console/`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use genace_local::browser::Driver;
use genace_local::{devauth, runner};
use genace_localaws::LocalAws;
use genace_outbound::GenaceConfig;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[allow(
    clippy::too_many_lines,
    reason = "a scenario reads top to bottom, one step after another"
)]
async fn an_operator_resolves_cases_in_the_console_one_by_one_and_in_bulk() {
    let env = LocalAws::fresh().await;
    let genace = MockServer::start().await;
    // The operation to erase gets a job of its own, which fails.
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .and(body_partial_json(json!({"prompt": "acme-erase"})))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"job_id": "job-erase", "state": "queued"})))
        .with_priority(1)
        .mount(&genace)
        .await;
    // Six POSTs whose outcome is unknown, then an ordinary 202.
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(7)
        .with_priority(1)
        .mount(&genace)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/jobs"))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"job_id": "job-again", "state": "queued"})))
        .mount(&genace)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/v1/jobs/[^/]+$"))
        .respond_with(StillRendering::default())
        .mount(&genace)
        .await;

    let mut gconf = GenaceConfig::new(genace.uri(), "console-test-key");
    gconf.timeout = Duration::from_secs(3);
    // The events pipe on, and a receiver on loopback for acme's endpoint.
    let receiver = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let mut config = env.config.clone();
    config.url_policy.allow_http = true;
    config.url_policy.allow_private = true;
    let events = std::env::temp_dir().join(format!("genace-console-events-{}.jsonl", uuid::Uuid::new_v4().simple()));
    // Spans to a receiver of the test's own, which the trace route reads.
    let traces = std::env::temp_dir().join(format!("genace-console-traces-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let spans = genace_local::traces::Receiver::for_this_process(&traces, "local")
        .await
        .unwrap();
    let settings = runner::RunnerSettings {
        events_file: Some(events.clone()),
        traces_file: Some(traces.clone()),
        ..runner::RunnerSettings::for_tests()
    };
    let addr = settings.intake_addr;
    let running = runner::start(&env.sdk, config, gconf, settings).await.unwrap();
    let api = Api {
        operator: e2e::client(
            &format!("http://{addr}"),
            &devauth::issue_operator("ops-check", "tenant_id", None, 600).unwrap(),
        ),
    };

    let mut ids = Vec::new();
    for (tenant, key) in [
        ("acme", "acme-1"),
        ("acme", "acme-2"),
        ("acme", "acme-3"),
        ("acme", "acme-4"),
        ("acme", "acme-5"),
        ("acme", "acme-6"),
        ("zeta", "zeta-1"),
    ] {
        ids.push(api.create(tenant, key).await);
        // One at a time: the first seven POSTs are these seven.
        api.wait_for(&ids[ids.len() - 1], |v| v["phase"] == "uncertain").await;
    }
    let [a, b, c, d, e, f, z] = <[String; 7]>::try_from(ids).unwrap();

    let endpoint = api.endpoint("acme", &format!("{}/hooks", receiver.uri())).await;

    let driver = Driver::start().unwrap();
    let browser = driver.connect().await.unwrap();
    let console = format!("http://{addr}/console");
    browser.goto(&console).await.unwrap();
    sign_in(&browser, "ops-alice", None).await;
    assert_eq!(case_rows(&browser, 7).await.len(), 7, "every open case is listed");
    let counts = text_of(&browser, "#counts:not([aria-busy])").await;
    assert!(
        counts.starts_with("7 open:") && counts.contains("unknown_submit_outcome: 7"),
        "{counts}"
    );
    let unlabelled: Value = browser
        .execute(
            "return [...document.querySelectorAll('input,select,textarea')]\
             .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).length",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(unlabelled, json!(0), "every control has a label");
    save_screenshot(&browser, "cases.png").await;
    keyboard_alone_selects_a_case(&browser).await;

    // One case, from its operation's page.
    browser.goto(&format!("{console}#/operations/{a}")).await.unwrap();
    let form = browser
        .wait()
        .for_element(Locator::Css("form[data-action='confirm_not_created']"))
        .await
        .unwrap();
    assert!(
        browser
            .source()
            .await
            .unwrap()
            .contains("Runbook: attach_remote_job or confirm_not_created")
    );
    save_screenshot(&browser, "operation.png").await;
    type_into(
        &form,
        "input[name='reason']",
        "nothing at Genace for this client_reference",
    )
    .await;
    press(&form, "button[type='submit']").await;
    let done = browser.wait().for_element(Locator::Css(".notice.ok")).await.unwrap();
    assert!(
        done.text().await.unwrap().contains("now prepared"),
        "{}",
        done.text().await.unwrap()
    );
    browser.goto(&format!("{console}#/cases")).await.unwrap();
    let listed = case_rows(&browser, 6).await;
    assert!(!listed.contains(&a), "the resolved case is gone");

    // A stale decision: someone else decides while the page is open.
    browser.goto(&format!("{console}#/operations/{b}")).await.unwrap();
    let form = browser
        .wait()
        .for_element(Locator::Css("form[data-action='confirm_not_created']"))
        .await
        .unwrap();
    api.resolve(&b, "attach_remote_job", Some("job-b"), "found it").await;
    type_into(&form, "input[name='reason']", "nothing there").await;
    press(&form, "button[type='submit']").await;
    let stale = browser.wait().for_element(Locator::Id("stale")).await.unwrap();
    let said = stale.text().await.unwrap();
    assert!(
        said.contains("Someone changed this operation since you opened it"),
        "{said}"
    );
    assert!(said.contains("now accepted"), "{said}");
    assert_eq!(
        api.get(&b).await["remote_job_id"],
        "job-b",
        "the stale decision changed nothing"
    );
    let erasable = api.create("acme", "acme-erase").await;
    erase_from_the_operation_page(&browser, &console, &api, &erasable).await;

    // Three cases, one decision, each item with its own job id and version.
    browser.goto(&format!("{console}#/cases")).await.unwrap();
    case_rows(&browser, 5).await;
    let page = browser.find(Locator::Css("main")).await.unwrap();
    for id in [&c, &d, &e] {
        press(&page, &format!("input.pick[data-operation='{id}']")).await;
    }
    press(&page, "#bulk-action option[value='attach_remote_job']").await;
    for id in [&c, &d, &e] {
        type_into(
            &page,
            &format!("input[name='job:{id}']"),
            &format!("job-{}", &id[3..11]),
        )
        .await;
    }
    type_into(
        &page,
        "#bulk-form textarea[name='reason']",
        "found in Genace's job list",
    )
    .await;
    press(&page, "#bulk-form button[type='submit']").await;
    browser.wait().for_element(Locator::Id("bulk-outcomes")).await.unwrap();
    let outcomes = browser.find_all(Locator::Css("#bulk-outcomes tbody tr")).await.unwrap();
    assert_eq!(outcomes.len(), 3);
    for row in outcomes {
        assert_eq!(row.attr("data-outcome").await.unwrap().as_deref(), Some("done"));
    }
    for id in [&c, &d, &e] {
        let view = api.get(id).await;
        assert_eq!(view["phase"], "accepted");
        assert_eq!(view["remote_job_id"], format!("job-{}", &id[3..11]));
    }

    // The tenant's endpoint, its attempt log (the events of the decisions
    // above), a replay, and disabling it.
    endpoint_log_and_replay(&browser, &console, &endpoint).await;
    let _ = std::fs::remove_file(&events);

    // An operator limited to one tenant sees that tenant's case only.
    browser.goto(&format!("{console}#/cases")).await.unwrap();
    let left = case_rows(&browser, 2).await;
    assert!(left.contains(&f) && left.contains(&z), "{left:?}");
    browser
        .find(Locator::Id("sign-out"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    sign_in(&browser, "ops-zeta", Some("zeta")).await;
    assert_eq!(case_rows(&browser, 1).await, vec![z.clone()]);

    browser.close().await.unwrap();
    drop(driver);
    running.shutdown().await;
    drop(spans);
    let _ = std::fs::remove_file(&traces);
}

/// Deployed, operators sign in with the issuer the API trusts: the page
/// sends the browser to the issuer's authorization endpoint with a PKCE
/// challenge, the issuer sends it back with a code, and the page redeems the
/// code with its verifier for a token, which it then uses on the API. The
/// issuer here is a stand-in that checks every step, and mints a token the
/// local authorizer accepts. The local sign-in is closed meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_signs_in_with_the_issuer_by_code_and_pkce() {
    let env = LocalAws::fresh().await;
    let issuer = MockServer::start().await;
    let addr = runner::RunnerSettings::for_tests().intake_addr;
    let console = format!("http://{addr}/console");
    let pkce = Pkce::new(&console);
    Mock::given(method("GET"))
        .and(path("/authorize"))
        .respond_with(pkce.clone())
        .mount(&issuer)
        .await;
    Mock::given(method("POST"))
        .and(path("/token"))
        .respond_with(pkce.clone())
        .mount(&issuer)
        .await;
    let settings = runner::RunnerSettings {
        intake_addr: addr,
        console: genace_console::SignIn::Oidc(genace_console::Oidc {
            authorize_url: format!("{}/authorize", issuer.uri()),
            token_url: format!("{}/token", issuer.uri()),
            client_id: "genace-console".into(),
            scope: "openid genace:operator".into(),
        }),
        ..runner::RunnerSettings::for_tests()
    };
    let gconf = GenaceConfig::new("http://127.0.0.1:9", "unused");
    let running = runner::start(&env.sdk, env.config.clone(), gconf, settings)
        .await
        .unwrap();
    let local = reqwest::Client::new()
        .post(format!("{console}/local/sign-in"))
        .json(&json!({"operator": "intruder"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        local.status(),
        405,
        "no local sign-in beside an issuer: the console serves GET only"
    );

    let driver = Driver::start().unwrap();
    let browser = driver.connect().await.unwrap();
    browser.goto(&console).await.unwrap();
    press(&browser.find(Locator::Css("main")).await.unwrap(), "#sign-in").await;
    // Back from the issuer, signed in: the cases page and who is signed in.
    browser.wait().for_element(Locator::Id("no-cases")).await.unwrap();
    assert_eq!(text_of(&browser, "#who").await, "ops-oidc (operator of every tenant)");
    let url = browser.current_url().await.unwrap();
    assert!(url.query().is_none(), "the code is gone from the address: {url}");
    assert_eq!(*pkce.redeemed.lock().unwrap(), 1, "one code, redeemed once");
    browser.close().await.unwrap();
    drop(driver);
    running.shutdown().await;
}

/// A stand-in OIDC issuer's two endpoints: `/authorize` checks the request
/// and sends the browser back with a code and the state; `/token` redeems
/// the code only with the verifier whose SHA-256 is the challenge, for an
/// operator's token.
#[derive(Clone)]
struct Pkce {
    redirect_uri: String,
    challenge: Arc<Mutex<Option<String>>>,
    redeemed: Arc<Mutex<u32>>,
}

impl Pkce {
    fn new(redirect_uri: &str) -> Self {
        Self {
            redirect_uri: redirect_uri.to_owned(),
            challenge: Arc::default(),
            redeemed: Arc::default(),
        }
    }

    fn authorize(&self, q: &HashMap<String, String>) -> ResponseTemplate {
        let expected = [
            ("response_type", "code"),
            ("client_id", "genace-console"),
            ("code_challenge_method", "S256"),
            ("scope", "openid genace:operator"),
            ("redirect_uri", self.redirect_uri.as_str()),
        ];
        if expected.iter().any(|(k, v)| q.get(*k).map(String::as_str) != Some(*v)) {
            return ResponseTemplate::new(400).set_body_string(format!("unexpected request {q:?}"));
        }
        *self.challenge.lock().unwrap() = q.get("code_challenge").cloned();
        let state = q.get("state").cloned().unwrap_or_default();
        ResponseTemplate::new(302).insert_header(
            "Location",
            format!("{}?code=code-1&state={state}", self.redirect_uri).as_str(),
        )
    }

    fn token(&self, form: &HashMap<String, String>) -> ResponseTemplate {
        use base64::Engine;
        use sha2::Digest;
        let verifier = form.get("code_verifier").cloned().unwrap_or_default();
        let digest = sha2::Sha256::digest(verifier.as_bytes());
        let answer = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
        let valid = form.get("grant_type").map(String::as_str) == Some("authorization_code")
            && form.get("code").map(String::as_str) == Some("code-1")
            && form.get("redirect_uri") == Some(&self.redirect_uri)
            && self.challenge.lock().unwrap().as_deref() == Some(answer.as_str());
        let cors = ("Access-Control-Allow-Origin", "*");
        if !valid {
            return ResponseTemplate::new(400)
                .insert_header(cors.0, cors.1)
                .set_body_json(json!({"error": "invalid_grant"}));
        }
        *self.redeemed.lock().unwrap() += 1;
        let token = devauth::issue_operator("ops-oidc", "tenant_id", None, 600).unwrap();
        ResponseTemplate::new(200)
            .insert_header(cors.0, cors.1)
            .set_body_json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 600}))
    }
}

impl Respond for Pkce {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        if request.url.path() == "/authorize" {
            self.authorize(&request.url.query_pairs().into_owned().collect())
        } else {
            let form = reqwest::Url::parse(&format!("http://form/?{}", String::from_utf8_lossy(&request.body)))
                .map(|u| u.query_pairs().into_owned().collect())
                .unwrap_or_default();
            self.token(&form)
        }
    }
}

/// The public API, as the test's own operator sees it.
struct Api {
    operator: genace_client::Client,
}

impl Api {
    async fn create(&self, tenant: &str, key: &str) -> String {
        let user = self
            .operator
            .with_token(&devauth::issue("tenant_id", tenant, 600).unwrap());
        let created = e2e::create(
            &user,
            json!({"operation_key": key, "media_type": "image",
                   "specification": {"model": "genace-image-1", "prompt": key}}),
        )
        .await;
        created["operation_id"].as_str().unwrap().to_owned()
    }

    /// A webhook endpoint of `tenant`'s, created by the operator: its id.
    async fn endpoint(&self, tenant: &str, url: &str) -> String {
        let created = self
            .operator
            .create_endpoint(
                Some(tenant),
                &json!({"url": url, "description": "console test receiver"}),
            )
            .await
            .expect("created, 201");
        created["id"].as_str().unwrap().to_owned()
    }

    async fn get(&self, id: &str) -> Value {
        self.operator.operation(id).await.unwrap().view
    }

    /// The view of `id` once `done` holds for it.
    async fn wait_for(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let view = self.get(id).await;
            if done(&view) {
                return view;
            }
            assert!(Instant::now() < deadline, "{id} never got there: {view}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `action` decided on the version read just before, with `reason`.
    async fn resolve(&self, id: &str, action: &str, job_id: Option<&str>, reason: &str) {
        let version = self.operator.operation(id).await.unwrap().version.expect("an ETag");
        let resolved = self.operator.resolve(id, version, action, reason, job_id).await;
        assert!(resolved.is_ok(), "{resolved:?}");
    }
}

/// Genace's view of any job: still rendering, under the id asked for;
/// `job-erase` failed.
/// Every job renders on, but `job-erase`, which is running at its first
/// look and failed at the next.
#[derive(Default)]
struct StillRendering {
    erase_looks: std::sync::atomic::AtomicU32,
}

impl Respond for StillRendering {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let id = request.url.path().rsplit('/').next().unwrap_or_default().to_owned();
        if id == "job-erase" && self.erase_looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0 {
            return ResponseTemplate::new(200).set_body_json(json!({"id": id, "state": "failed",
                "error": {"code": "generation_failed", "message": "could not render"}, "outputs": null}));
        }
        ResponseTemplate::new(200).set_body_json(json!({"id": id, "state": "running", "error": null, "outputs": null}))
    }
}

/// With the keyboard alone: the page's content has the focus as it shows,
/// Tab walks on to a case's checkbox, and Space selects it (the bulk form
/// appears) and clears it again. Keys are pressed as a person would, on
/// whatever has the focus.
async fn keyboard_alone_selects_a_case(browser: &Client) {
    let press_key = |key: Key| async move {
        let keys = KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value: key.into() })
            .then(KeyAction::Up { value: key.into() });
        browser.perform_actions(keys).await.unwrap();
    };
    let focused = |attr: &'static str| async move {
        let el = browser.active_element().await.unwrap();
        el.attr(attr).await.unwrap().unwrap_or_default()
    };
    // A page puts the focus on its content as it shows.
    browser.refresh().await.unwrap();
    browser.wait().for_element(Locator::Id("cases")).await.unwrap();
    assert_eq!(focused("id").await, "main", "the new content has the focus");
    let mut reached = false;
    for _ in 0..20 {
        press_key(Key::Tab).await;
        if focused("class").await == "pick" {
            reached = true;
            break;
        }
    }
    assert!(reached, "Tab reaches a case's checkbox");
    press_key(Key::Space).await;
    browser.wait().for_element(Locator::Id("bulk-form")).await.unwrap();
    press_key(Key::Space).await;
    assert!(browser.find(Locator::Id("bulk-form")).await.is_err(), "cleared again");
}

/// The endpoint's row on acme's tenant page.
async fn endpoint_row(browser: &Client, console: &str, endpoint: &str) -> Element {
    browser.goto(&format!("{console}#/tenants/acme")).await.unwrap();
    browser
        .wait()
        .for_element(Locator::Css(&format!("#endpoints tr[data-endpoint='{endpoint}']")))
        .await
        .unwrap()
}

/// acme's tenant page lists the endpoint; its log fills with the events of
/// the decisions made above; one replays; the endpoint is disabled.
async fn endpoint_log_and_replay(browser: &Client, console: &str, endpoint: &str) {
    let row = endpoint_row(browser, console, endpoint).await;
    press(&row, "a").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    // The log fills as the events go out; the page is read again until it shows one.
    let first = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(row) = browser.find(Locator::Css("#attempts tbody tr")).await {
            break row;
        }
        assert!(Instant::now() < deadline, "no delivery attempt logged");
        browser.refresh().await.unwrap();
    };
    assert_eq!(first.attr("data-status").await.unwrap().as_deref(), Some("succeeded"));
    press(&first, "button[data-replay]").await;
    let said = text_of(browser, "#endpoint-note .notice.ok").await;
    assert!(said.contains("with its original id"), "{said}");
    let row = endpoint_row(browser, console, endpoint).await;
    press(&row, "button[data-toggle]").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = browser
            .find(Locator::Css(&format!("tr[data-endpoint='{endpoint}'] td[data-state]")))
            .await
            .ok();
        // The table is drawn again as the change lands: a cell found just
        // before may be gone when read (a stale element), which is "not yet".
        if let Some(cell) = state
            && cell.attr("data-state").await.ok().flatten().as_deref() == Some("disabled")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the endpoint was not disabled");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `id`'s job failed, so no delivery can run: its page shows each look
/// of the poll that saw the end on its timeline, and offers the erasure;
/// the operator confirms it and the page shows it done, as the API does.
async fn erase_from_the_operation_page(browser: &Client, console: &str, api: &Api, id: &str) {
    let failed = api.wait_for(id, |v| v["phase"] == "render_failed").await;
    browser.goto(&format!("{console}#/operations/{id}")).await.unwrap();
    // The hash changes from another operation's page: wait for this one.
    let heading = format!("Operation {id}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while text_of(browser, "main h1").await != heading {
        assert!(Instant::now() < deadline, "the page of {id} never showed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let detection = &failed["detection"];
    assert_eq!(
        detection["looks"], 2,
        "running at the first look, failed at the second: {failed}"
    );
    let timeline = text_of(browser, "#timeline").await;
    assert_eq!(timeline.matches(", by poll").count(), 2, "{timeline}");
    assert!(
        timeline.contains("look 1 of 2, by poll: last seen running"),
        "{timeline}"
    );
    assert!(
        timeline.contains("end seen at look 2 of 2, by poll: it ended within the"),
        "{timeline}"
    );
    trace_waterfall(browser, &failed).await;
    let button = browser.wait().for_element(Locator::Id("erase")).await.unwrap();
    button.click().await.unwrap();
    browser.accept_alert().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let said = browser.find(Locator::Css("#erasure p")).await.ok();
        if let Some(p) = said
            && p.text().await.unwrap().starts_with("Erased ")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the erasure is not shown");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let view = api.get(id).await;
    assert!(view["outputs_erased_at"].is_string(), "{view}");
    assert_eq!(view["erased_object_count"], 0, "{view}");
    assert_eq!(view["audit"].as_array().unwrap().last().unwrap()["actor"], "ops-alice");
}

/// The operation page's waterfall: the trace the view names, its root
/// first, then intake, the dispatch with its POST's 202, and the polls,
/// the one that saw the failure last. The page is read again while the
/// last invocations' spans are still on their way to the receiver.
async fn trace_waterfall(browser: &Client, view: &Value) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let caption = text_of(browser, "#waterfall caption").await;
        assert!(caption.contains(view["trace_id"].as_str().unwrap()), "{caption}");
        let mut rows = Vec::new();
        for row in browser.find_all(Locator::Css("#waterfall tbody tr")).await.unwrap() {
            let mut cells = Vec::new();
            for cell in row.find_all(Locator::Css("td")).await.unwrap_or_default() {
                cells.push(cell.text().await.unwrap_or_default());
            }
            rows.push(cells);
        }
        let failed_poll = rows
            .iter()
            .any(|r| r.get(3).is_some_and(|n| n == "poll") && r[4] == "render failed");
        if failed_poll || Instant::now() > deadline {
            break rows;
        }
        browser.refresh().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let names: Vec<&str> = rows.iter().filter_map(|r| r.get(3).map(String::as_str)).collect();
    assert_eq!(names.first(), Some(&"operation"), "{rows:?}");
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no {name}: {rows:?}"))
    };
    assert!(
        at("intake") < at("dispatch") && at("dispatch") < at("genace.post"),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r[3] == "genace.post" && r[4] == "accepted"),
        "{rows:?}"
    );
    let polls: Vec<&str> = rows.iter().filter(|r| r[3] == "poll").map(|r| r[4].as_str()).collect();
    assert_eq!(
        polls.len(),
        2,
        "running at the first look, failed at the second: {rows:?}"
    );
    assert_eq!(polls[1], "render failed", "{polls:?}");
    // Each bar is drawn on the trace's time scale (the CSSOM, which the
    // style policy allows): the root's from the left, the last poll's well
    // to the right.
    let bars: Value = browser
        .execute(
            "return [...document.querySelectorAll('#waterfall .bar')]\
             .map(b => [b.getBoundingClientRect().width, b.getBoundingClientRect().left - b.parentElement.getBoundingClientRect().left])",
            vec![],
        )
        .await
        .unwrap();
    let bars = bars.as_array().unwrap();
    assert_eq!(bars.len(), rows.len());
    assert!(
        bars.iter().all(|b| b[0].as_f64().unwrap() >= 1.0),
        "every bar shows: {bars:?}"
    );
    let last_poll = rows.iter().rposition(|r| r[3] == "poll").unwrap();
    assert!(
        bars[last_poll][1].as_f64().unwrap() > bars[0][1].as_f64().unwrap() + 50.0,
        "the last poll starts to the right of the root: {bars:?}"
    );
    browser
        .execute("document.getElementById('trace').scrollIntoView()", vec![])
        .await
        .unwrap();
    save_screenshot(browser, "trace.png").await;
}

async fn sign_in(browser: &Client, operator: &str, tenant: Option<&str>) {
    let form = browser.wait().for_element(Locator::Id("local-sign-in")).await.unwrap();
    let name = form.find(Locator::Css("input[name='operator']")).await.unwrap();
    name.clear().await.unwrap();
    name.send_keys(operator).await.unwrap();
    if let Some(t) = tenant {
        type_into(&form, "input[name='tenant']", t).await;
    }
    press(&form, "button[type='submit']").await;
}

/// The text of what `css` finds, once it is there. A page that renders
/// again between the find and the read leaves a stale element: find again.
async fn text_of(browser: &Client, css: &str) -> String {
    for _ in 0..20 {
        let found = browser
            .wait()
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        match found.text().await {
            Ok(text) => return text,
            Err(e) if e.is_stale_element_reference() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{css}: {e}"),
        }
    }
    panic!("{css}: stale at every read")
}

/// Types `text` into the field `css` finds within `within`.
async fn type_into(within: &Element, css: &str, text: &str) {
    let field = within
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    field.send_keys(text).await.unwrap();
}

/// Clicks what `css` finds within `within`.
async fn press(within: &Element, css: &str) {
    let target = within
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    target.click().await.unwrap();
}

/// The operation ids of the listed cases, once there are `expected` rows
/// (reloading the list while they change); the ids as listed after 30 s
/// otherwise.
async fn case_rows(browser: &Client, expected: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut ids = Vec::new();
        if browser.find(Locator::Id("cases")).await.is_ok() || browser.find(Locator::Id("no-cases")).await.is_ok() {
            for row in browser.find_all(Locator::Css("#cases tbody tr")).await.unwrap() {
                if let Ok(Some(id)) = row.attr("data-operation").await {
                    ids.push(id);
                }
            }
            if ids.len() == expected || Instant::now() > deadline {
                return ids;
            }
            browser.refresh().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn save_screenshot(browser: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), browser.screenshot().await.unwrap()).unwrap();
}
