//! The output URL guard: never panics, and whatever it lets through under
//! the production policy is https on port 443 to a public address or name.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use reqwest::Url;
use genace_core::urlguard::UrlPolicy;
use genace_outbound::download::check_url;
use genace_outbound::download::is_public;

fuzz_target!(|data: &[u8]| {
    if data.len() >= 16 {
        let mut v6 = [0u8; 16];
        v6.copy_from_slice(&data[..16]);
        let ip = std::net::Ipv6Addr::from(v6);
        let public = is_public(IpAddr::V6(ip));
        if let Some(v4) = ip.to_ipv4_mapped() {
            assert_eq!(
                public,
                is_public(IpAddr::V4(v4)),
                "a mapped address is judged as its IPv4"
            );
        }
        if let Some(v4) = ip.to_ipv4() {
            // Every form that carries an IPv4 address is refused when that address is not public.
            if !is_public(IpAddr::V4(v4)) {
                assert!(!public, "{ip} carries the non-public {v4}");
            }
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = Url::parse(text) else {
        return;
    };
    let production = UrlPolicy::default();
    if check_url(&url, &production).is_ok() {
        assert_eq!(url.scheme(), "https");
        assert_eq!(url.port_or_known_default(), Some(443));
        let host = url.host_str().expect("an allowed URL has a host");
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            assert!(is_public(ip), "{ip} passed the guard");
        }
    }
    let listed = UrlPolicy {
        allowed_hosts: vec!["cdn.genace.example".into()],
        ..UrlPolicy::default()
    };
    if check_url(&url, &listed).is_ok() {
        assert_eq!(url.host_str(), Some("cdn.genace.example"));
    }
    let local = UrlPolicy {
        allow_http: true,
        allow_private: true,
        ..UrlPolicy::default()
    };
    let _ = check_url(&url, &local);
});
