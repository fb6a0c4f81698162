//! Headless Chromium driven through ChromeDriver (Debian's `chromium` and
//! `chromium-driver`; `CHROMEDRIVER` and `CHROMIUM` name other binaries),
//! for the console's browser test and its benchmark. Started on a free
//! loopback port with a fresh profile, and stopped when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// ChromeDriver on a free loopback port, stopped when dropped.
pub struct Driver {
    child: Child,
    url: String,
    profile: PathBuf,
}

impl Driver {
    /// Starts ChromeDriver and waits until it listens.
    pub fn start() -> Result<Self, String> {
        let binary = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{binary}: {e} (scripts/test.sh installs chromium-driver)"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("chromedriver did not start".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = std::env::temp_dir().join(format!("genace-console-{}", uuid::Uuid::new_v4().simple()));
        Ok(Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            profile,
        })
    }

    /// A new headless Chromium session.
    pub async fn connect(&self) -> Result<Client, String> {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-quic", "--no-first-run", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                         format!("--user-data-dir={}", self.profile.display())],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .map_err(|e| format!("a Chromium session through chromedriver: {e}"))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A session never closed (a test that failed) leaves its Chromium
        // running: every process of this profile goes too.
        let _ = Command::new("pkill")
            .args(["-f", "--"])
            .arg(format!("--user-data-dir={}", self.profile.display()))
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
