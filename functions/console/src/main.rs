//! Console Lambda: API Gateway HTTP API (no authorizer) -> the operator
//! console's page, script and style sheet. It reads nothing and has no
//! permissions: the page calls the API with the operator's own token.

use lambda_http::{Error, Request, run, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let console = &genace_console::Console::from_env();
    run(service_fn(move |req: Request| async move {
        Ok::<_, Error>(console.answer(req.method(), req.uri().path()))
    }))
    .await
}
