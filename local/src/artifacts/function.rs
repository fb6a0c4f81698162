//! One function as a pool of emulator instances, one invocation each at
//! a time, and how an instance is started.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, Semaphore};

use super::settings::ArtifactSettings;

/// One function: a pool of emulator instances running its binary.
pub(super) struct Function {
    pub(super) name: String,
    pub(super) timeout: Duration,
    pub(super) free: Mutex<Vec<String>>,
    pub(super) slots: Semaphore,
    pub(super) http: reqwest::Client,
}

/// What one invocation gave.
#[derive(Debug)]
pub(super) enum Invocation {
    /// The function returned this payload.
    Returned(Value),
    /// The function failed (an error payload, a crash or a timeout).
    Failed(String),
}

impl Function {
    /// Invokes the function once, on a free instance.
    pub(super) async fn invoke(&self, payload: &Value) -> Invocation {
        let Ok(_slot) = self.slots.acquire().await else {
            return Invocation::Failed("the pool is closed".into());
        };
        let url = self.free.lock().await.pop().expect("a free instance for each slot");
        let sent = self
            .http
            .post(&url)
            .timeout(self.timeout + Duration::from_secs(10))
            .json(payload)
            .send()
            .await;
        let outcome = match sent {
            Ok(resp) => match resp.json::<Value>().await {
                Ok(v) if v.get("errorType").is_some() && v.get("errorMessage").is_some() => {
                    Invocation::Failed(format!("{}: {}", v["errorType"], v["errorMessage"]))
                }
                Ok(v) => Invocation::Returned(v),
                Err(e) => Invocation::Failed(format!("unreadable response: {e}")),
            },
            Err(e) => Invocation::Failed(e.to_string()),
        };
        if let Invocation::Failed(reason) = &outcome {
            tracing::warn!(function = %self.name, %reason, "invocation failed");
        }
        self.free.lock().await.push(url);
        outcome
    }
}

pub(super) fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Starts one emulator instance running `binary` with exactly `env`. A
/// port taken between choosing and binding it makes the emulator exit at
/// once; that start is tried again on other ports.
pub(super) async fn start_instance(
    settings: &ArtifactSettings,
    binary: &Path,
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Result<(String, Child), String> {
    let mut last = String::new();
    for _ in 0..3 {
        match start_once(settings, binary, env, log).await {
            Ok(started) => return Ok(started),
            Err(e) => last = e,
        }
    }
    Err(last)
}

pub(super) async fn start_once(
    settings: &ArtifactSettings,
    binary: &Path,
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Result<(String, Child), String> {
    let (port, api_port) = (free_port()?, free_port()?);
    let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = Command::new(&settings.rie);
    // The emulator dies with this process, however it ends (kill_on_drop
    // covers only an orderly exit).
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = command
        .arg("--runtime-interface-emulator-address")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--runtime-api-address")
        .arg(format!("127.0.0.1:{api_port}"))
        .arg(binary)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", settings.rie.display()))?;
    // Generous: on a loaded machine an emulator can take seconds to listen.
    for _ in 0..600 {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the emulator for {} exited ({status}); see {}",
                binary.display(),
                log.display()
            ));
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok((
                format!("http://127.0.0.1:{port}/2015-03-31/functions/function/invocations"),
                child,
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "the emulator for {} did not listen on port {port} within 30 s",
        binary.display()
    ))
}
