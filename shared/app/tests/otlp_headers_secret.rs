//! The exports' headers from Secrets Manager (moto): a deployed function
//! reads the secret its settings name once, at start, and the template
//! never puts the headers themselves in a function's settings. One test
//! in its own binary: it sets a process-wide variable.

use genace_app::telemetry::{HEADERS_SECRET_VARIABLE, Tracing, with_secret_headers};
use genace_localaws::LocalAws;

fn exporting(headers: Option<genace_app::telemetry::HeaderList>) -> Option<Tracing> {
    Some(Tracing {
        endpoint: "https://otlp.example".into(),
        service: "genace-test".into(),
        rate: 1.0,
        headers,
    })
}

#[tokio::test]
async fn the_headers_come_from_the_secret_the_settings_name() {
    let env = LocalAws::fresh().await;
    let name = format!("genace/otlp-headers/{}", env.names.table);
    genace_aws::clients::secrets(&env.sdk)
        .create_secret()
        .name(&name)
        .secret_string("x-api-key=k%2Cey\n")
        .send()
        .await
        .unwrap();
    // SAFETY: the only test of this binary; nothing else reads the
    // environment while it runs.
    unsafe { std::env::set_var(HEADERS_SECRET_VARIABLE, &name) };
    let read = with_secret_headers(exporting(None)).await.unwrap().headers.unwrap();
    assert_eq!(
        (read.variable, read.text.as_str()),
        (HEADERS_SECRET_VARIABLE, "x-api-key=k%2Cey")
    );
    // Headers the environment lists win, and the secret is not read.
    let listed = genace_app::telemetry::HeaderList {
        variable: "OTEL_EXPORTER_OTLP_HEADERS",
        text: "x-team=a".into(),
    };
    let kept = with_secret_headers(exporting(Some(listed)))
        .await
        .unwrap()
        .headers
        .unwrap();
    assert_eq!(kept.text, "x-team=a");
    // No receiver named: nothing read.
    let layer = Some(Tracing {
        endpoint: String::new(),
        ..exporting(None).unwrap()
    });
    assert!(with_secret_headers(layer).await.unwrap().headers.is_none());
    // A secret that cannot be read: the spans go without headers.
    unsafe { std::env::set_var(HEADERS_SECRET_VARIABLE, "genace/otlp-headers/missing") };
    assert!(with_secret_headers(exporting(None)).await.unwrap().headers.is_none());
}
