//! Output downloads over HTTP, behind the output URL guard: the scheme, the
//! host allow-list, the port and every address (literal, resolved, or a
//! redirect's) must pass before a byte is fetched. Implements the
//! `genace_stages::ports::downloads` port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use genace_core::urlguard::UrlPolicy;
use genace_stages::ports::downloads::{Download, DownloadBody, DownloadError, Downloads};
use reqwest::Url;

use genace_core::urlguard::ip_allowed;
pub use genace_core::urlguard::{check_url, is_public};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tracing::warn;

/// Resolves host names for downloads and drops every address the policy
/// refuses, so neither a DNS answer nor a redirect can reach an internal address.
#[derive(Debug, Clone)]
struct GuardedResolver {
    policy: UrlPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found.iter().copied().filter(|a| ip_allowed(a.ip(), &policy)).collect();
            if allowed.is_empty() {
                let addrs: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                // The addresses go to the log only, never into a stored error.
                warn!(host, addresses = %addrs.join(", "), "an output host resolves only to refused addresses");
                return Err(Box::new(GuardRefused(format!(
                    "host {host} resolves only to addresses that are not allowed"
                ))) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client that fetches outputs under `policy`.
pub fn download_client(policy: &UrlPolicy) -> Result<reqwest::Client, reqwest::Error> {
    let redirect_policy = policy.clone();
    guarded_client(policy)
        .redirect(reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                attempt.error("too many redirects")
            } else if let Err(why) = check_url(attempt.url(), &redirect_policy) {
                attempt.error(why)
            } else {
                attempt.follow()
            }
        }))
        .read_timeout(Duration::from_secs(60))
        .build()
}

/// A client whose every name resolution passes the URL guard, with no proxy
/// (a proxy from the environment would resolve names itself, past the guard).
pub fn guarded_client(policy: &UrlPolicy) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { policy: policy.clone() }))
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
}

/// The URL guard refused an address after DNS resolution.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct GuardRefused(String);

/// A download error as text without the URL (it may carry a signed query
/// string), and whether the URL guard caused it (a refused redirect target
/// or resolved address), which no retry can change.
pub(crate) fn transport(e: reqwest::Error) -> (String, bool) {
    let mut refused = e.is_redirect();
    let timeout = e.is_timeout();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        refused |= inner.downcast_ref::<GuardRefused>().is_some();
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    if timeout && !text.contains("timed out") {
        text.push_str(" (timed out)");
    }
    (text, refused)
}

/// Downloads through [`download_client`]: the deployed [`Downloads`].
#[derive(Debug, Clone)]
pub struct HttpDownloads {
    client: reqwest::Client,
    policy: UrlPolicy,
}

impl HttpDownloads {
    pub fn new(policy: &UrlPolicy) -> Result<Self, reqwest::Error> {
        Ok(Self {
            client: download_client(policy)?,
            policy: policy.clone(),
        })
    }
}

/// A response body being read.
#[derive(Debug)]
pub struct HttpBody(reqwest::Response);

impl DownloadBody for HttpBody {
    async fn chunk(&mut self) -> Result<Option<Vec<u8>>, DownloadError> {
        match self.0.chunk().await {
            Ok(chunk) => Ok(chunk.map(|b| b.to_vec())),
            Err(e) => Err(DownloadError::Failed(transport(e).0)),
        }
    }
}

impl Downloads for HttpDownloads {
    type Body = HttpBody;

    async fn open(&self, url: &str) -> Result<Download<HttpBody>, DownloadError> {
        let url = Url::parse(url).map_err(|e| DownloadError::Refused(format!("bad URL: {e}")))?;
        check_url(&url, &self.policy).map_err(DownloadError::Refused)?;
        let response = self.client.get(url).send().await.map_err(|e| match transport(e) {
            (text, true) => DownloadError::Refused(text),
            (text, false) => DownloadError::Failed(text),
        })?;
        Ok(Download {
            status: response.status().as_u16(),
            content_length: response.content_length(),
            content_type: response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: HttpBody(response),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> UrlPolicy {
        UrlPolicy::default()
    }

    #[test]
    fn only_https_public_urls_pass_by_default() {
        let ok = |u: &str| check_url(&Url::parse(u).unwrap(), &policy());
        assert!(ok("https://cdn.genace.example/out/1.mp4").is_ok());
        for bad in [
            "http://cdn.genace.example/1.mp4",
            "ftp://cdn.genace.example/1.mp4",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://192.168.0.10/x",
            "https://172.16.5.5/x",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.64.0.1/x",
            "https://0.0.0.0/x",
            "https://[::1]/x",
            "https://[fd00::1]/x",
            "https://[fe80::1]/x",
            "https://[::ffff:127.0.0.1]/x",
        ] {
            assert!(ok(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn embedded_ipv4_forms_odd_ranges_and_ports_are_refused() {
        let ok = |u: &str| check_url(&Url::parse(u).unwrap(), &policy());
        for bad in [
            "https://[64:ff9b::a9fe:a9fe]/x",    // NAT64 of 169.254.169.254
            "https://[64:ff9b:1::a00:1]/x",      // local-use NAT64
            "https://[2002:a9fe:a9fe::1]/x",     // 6to4 of 169.254.169.254
            "https://[::a9fe:a9fe]/x",           // IPv4-compatible
            "https://[2001:0:4136:e378::1]/x",   // Teredo
            "https://[fec0::1]/x",               // site local
            "https://192.0.0.8/x",               // IETF protocol assignments
            "https://cdn.genace.example:8443/x", // not 443
            "https://cdn.genace.example:80/x",   // 80 without http allowed
        ] {
            assert!(ok(bad).is_err(), "{bad} must be refused");
        }
        assert!(ok("https://[2606:4700::1111]/x").is_ok(), "a public IPv6 address");
        assert!(ok("https://8.8.8.8/x").is_ok());
        let http = UrlPolicy {
            allow_http: true,
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("http://cdn.genace.example/x").unwrap(), &http).is_ok());
        assert!(check_url(&Url::parse("http://cdn.genace.example:8080/x").unwrap(), &http).is_err());
        let ports = UrlPolicy {
            allowed_ports: vec![8443],
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("https://cdn.genace.example:8443/x").unwrap(), &ports).is_ok());
        assert!(check_url(&Url::parse("https://cdn.genace.example/x").unwrap(), &ports).is_err());
    }

    #[test]
    fn local_flags_and_the_allow_list() {
        let local = UrlPolicy {
            allow_http: true,
            allow_private: true,
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("http://127.0.0.1:9000/o.mp4").unwrap(), &local).is_ok());
        let listed = UrlPolicy {
            allowed_hosts: vec!["cdn.genace.example".into()],
            ..UrlPolicy::default()
        };
        assert!(check_url(&Url::parse("https://cdn.genace.example/a").unwrap(), &listed).is_ok());
        assert!(check_url(&Url::parse("https://evil.example/a").unwrap(), &listed).is_err());
    }

    #[tokio::test]
    async fn names_resolving_to_internal_addresses_are_refused() {
        let resolver = GuardedResolver { policy: policy() };
        let name: Name = "localhost".parse().unwrap();
        assert!(resolver.resolve(name).await.is_err());
        let allowing = GuardedResolver {
            policy: UrlPolicy {
                allow_private: true,
                ..UrlPolicy::default()
            },
        };
        let name: Name = "localhost".parse().unwrap();
        assert!(allowing.resolve(name).await.is_ok());
    }
}
