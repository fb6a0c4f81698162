//! The URL guard's pure half and the policy it applies: which URLs a
//! policy allows before any request is made (scheme, port, host
//! allow-list, literal addresses), and which addresses are public. The
//! HTTP adapters apply it again to every address a name resolves to and to
//! every redirect; the webhook requests apply it when a tenant's URL is
//! saved (`requests`), so a URL that can never be POSTed is refused then,
//! not retried for a day.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

/// Which output URLs may be fetched. Production: https only, public
/// addresses only, optionally an allow-list of hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlPolicy {
    /// `DELIVERY_ALLOW_HTTP`: also plain http (local runs).
    pub allow_http: bool,
    /// `DELIVERY_ALLOW_PRIVATE`: also loopback, private and link-local addresses (local runs).
    pub allow_private: bool,
    /// `OUTPUT_ALLOWED_HOSTS`: comma-separated host names; empty allows any public host.
    pub allowed_hosts: Vec<String>,
    /// `OUTPUT_ALLOWED_PORTS`: comma-separated ports; empty allows 443 (and
    /// 80 where http is allowed).
    pub allowed_ports: Vec<u16>,
}

/// True for addresses on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254.0.0/16, the metadata service among them
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments, 192.0.0.0/24
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    let first = seg[0];
    // Forms that embed or translate to an IPv4 address are refused whole:
    // their IPv4 part could be anything, an internal address included.
    let ipv4_compatible = seg[..6].iter().all(|s| *s == 0); // ::a.b.c.d (and ::, ::1)
    let nat64 = seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0]; // 64:ff9b::/96
    let nat64_local = first == 0x64 && seg[1] == 0xff9b && seg[2] == 1; // 64:ff9b:1::/48
    let six_to_four = first == 0x2002; // 2002::/16
    let teredo = first == 0x2001 && seg[1] == 0; // 2001::/32
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ipv4_compatible
        || nat64
        || nat64_local
        || six_to_four
        || teredo
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link local
        || (first & 0xffc0) == 0xfec0 // site local (deprecated)
        || first == 0x2001 && seg[1] == 0x0db8) // documentation
}

pub fn ip_allowed(ip: IpAddr, policy: &UrlPolicy) -> bool {
    policy.allow_private || is_public(ip)
}

/// Checks what can be checked without DNS: scheme, host allow-list and
/// literal addresses. Host names are checked again after resolution.
pub fn check_url(url: &Url, policy: &UrlPolicy) -> Result<(), String> {
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        other => return Err(format!("scheme {other:?} is not allowed (https only)")),
    }
    let host = url.host_str().ok_or("the URL has no host")?.to_ascii_lowercase();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(0);
    let port_allowed = if policy.allowed_ports.is_empty() {
        // Local runs (private addresses allowed) serve outputs on any port.
        policy.allow_private || port == 443 || (port == 80 && policy.allow_http)
    } else {
        policy.allowed_ports.contains(&port)
    };
    if !port_allowed {
        return Err(format!("port {port} is not allowed"));
    }
    if !policy.allowed_hosts.is_empty() && !policy.allowed_hosts.iter().any(|h| h == bare) {
        return Err(format!("host {bare} is not in the allowed output hosts"));
    }
    if let Ok(ip) = bare.parse::<IpAddr>()
        && !ip_allowed(ip, policy)
    {
        return Err(format!("address {ip} is not public"));
    }
    Ok(())
}

/// [`check_url`] on a URL given as text.
pub fn check_url_text(url: &str, policy: &UrlPolicy) -> Result<(), String> {
    let parsed = Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    check_url(&parsed, policy)
}
