//! `genace-standin`: a stand-in for Genace on loopback, for local runs (see
//! `genace_local::standin`).
//!
//! Settings (environment): `SIM_PORT` (9400), `SIM_QUEUED_SECONDS` (2),
//! `SIM_RUNNING_SECONDS` (5), `SIM_OUTPUT_BYTES` (1048576), and failure modes
//! in percent of submissions: `SIM_502_PERCENT` (a 502 naming a failed job),
//! `SIM_LOST_PERCENT` (the job is created but the response never arrives),
//! `SIM_FAILED_PERCENT` (the job ends `failed`). `SIM_LOST_DELAY_SECONDS` (120)
//! is how long a lost response hangs.

use std::net::SocketAddr;

use genace_local::standin;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port = standin::env_num("SIM_PORT", 9400) as u16;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("genace-standin listening on http://{addr}");
    let (_sim, task) = standin::serve(listener, standin::Settings::from_env(format!("http://{addr}")));
    task.await.map_err(std::io::Error::other)
}
