//! The operator console: one page, five ES modules and one style sheet, embedded
//! in the binary and served under `/console/`. The page calls the same
//! public API as everyone else, with the signed-in operator's bearer token:
//! it has no privileges of its own and no API of its own. Nothing is loaded
//! from elsewhere at run time, and every answer carries a strict
//! Content-Security-Policy.
//!
//! Sign-in is the deployment's OIDC issuer (authorization code with PKCE,
//! run by the page itself), or, on the local stack only, a form that the
//! local runner answers with a development operator token.

use lambda_http::Body;
use lambda_http::http::{Method, Response, StatusCode, header};
use serde_json::json;

/// Where the console is served.
pub const PREFIX: &str = "/console";

const INDEX: &str = include_str!("../assets/index.html");
const STYLE: &str = include_str!("../assets/app.css");

/// The page's scripts, ES modules by name: the router and its pages
/// (`app.js`), which imports the rest; none imports it back.
const SCRIPTS: [(&str, &str); 5] = [
    ("/console/app.js", include_str!("../assets/app.js")),
    ("/console/api.js", include_str!("../assets/api.js")),
    ("/console/dom.js", include_str!("../assets/dom.js")),
    ("/console/tenants.js", include_str!("../assets/tenants.js")),
    ("/console/trace.js", include_str!("../assets/trace.js")),
];

/// How operators sign in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignIn {
    /// Authorization code with PKCE against the issuer the API's JWT
    /// authorizer trusts.
    Oidc(Oidc),
    /// The local stack's development sign-in (`POST /console/local/sign-in`).
    Local,
    /// Not configured: the page says which parameters to set.
    Unconfigured,
}

/// The OIDC client the console is, and the issuer's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oidc {
    pub authorize_url: String,
    pub token_url: String,
    pub client_id: String,
    pub scope: String,
}

/// The claim names the API reads operators by, for the page to say which
/// kind of operator is signed in (`TENANT_CLAIM`, `OPERATOR_CLAIM`,
/// `GLOBAL_OPERATOR_VALUE`, as the API's configuration reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimNames {
    pub tenant: String,
    pub operator: String,
    pub global_operator: String,
}

impl ClaimNames {
    fn from_env() -> Self {
        let var = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        Self {
            tenant: var("TENANT_CLAIM", "tenant_id"),
            operator: var("OPERATOR_CLAIM", "scope"),
            global_operator: var("GLOBAL_OPERATOR_VALUE", "genace:operator:all"),
        }
    }
}

/// The console as served by one deployment.
#[derive(Debug, Clone)]
pub struct Console {
    sign_in: SignIn,
    claims: ClaimNames,
    policy: String,
}

impl Console {
    pub fn new(sign_in: SignIn) -> Self {
        // The page talks to its own origin (the API), and to the issuer's
        // token endpoint to redeem the authorization code; nothing else.
        let token_origin = match &sign_in {
            SignIn::Oidc(o) => origin(&o.token_url).map(|o| format!(" {o}")).unwrap_or_default(),
            SignIn::Local | SignIn::Unconfigured => String::new(),
        };
        let policy = format!(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'{token_origin}; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        );
        Self {
            sign_in,
            claims: ClaimNames::from_env(),
            policy,
        }
    }

    /// How operators sign in.
    pub fn sign_in(&self) -> &SignIn {
        &self.sign_in
    }

    /// From the function's environment: `CONSOLE_CLIENT_ID`,
    /// `CONSOLE_AUTHORIZE_URL`, `CONSOLE_TOKEN_URL` and `CONSOLE_SCOPE`
    /// (default `openid`). Without a client id or either URL the console
    /// says it is not configured.
    pub fn from_env() -> Self {
        Self::new(SignIn::from_env())
    }
}

impl SignIn {
    /// [`Console::from_env`]'s reading of the environment.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        match (
            var("CONSOLE_CLIENT_ID"),
            var("CONSOLE_AUTHORIZE_URL"),
            var("CONSOLE_TOKEN_URL"),
        ) {
            (Some(client_id), Some(authorize_url), Some(token_url)) => SignIn::Oidc(Oidc {
                authorize_url,
                token_url,
                client_id,
                scope: var("CONSOLE_SCOPE").unwrap_or_else(|| "openid".into()),
            }),
            _ => SignIn::Unconfigured,
        }
    }
}

impl Console {
    /// Whether `path` is the console's to answer.
    pub fn owns(path: &str) -> bool {
        path == PREFIX || path.starts_with("/console/")
    }

    /// The answer to a request for `path` (one the console owns).
    pub fn answer(&self, method: &Method, path: &str) -> Response<Body> {
        if method != Method::GET && method != Method::HEAD {
            return self.plain(StatusCode::METHOD_NOT_ALLOWED, "the console serves GET only");
        }
        let (content_type, body) = match path {
            // The page is `/console` (an HTTP API cannot route the bare
            // `/console/`); it names its files by absolute path.
            PREFIX | "/console/" | "/console/index.html" => ("text/html; charset=utf-8", INDEX.to_owned()),
            "/console/app.css" => ("text/css; charset=utf-8", STYLE.to_owned()),
            "/console/config.json" => ("application/json", self.config().to_string()),
            script => match SCRIPTS.iter().find(|(name, _)| *name == script) {
                Some((_, text)) => ("text/javascript; charset=utf-8", (*text).to_owned()),
                None => return self.plain(StatusCode::NOT_FOUND, "no such page in the console"),
            },
        };
        self.headers(Response::builder().status(StatusCode::OK))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::Text(body))
            .expect("valid response")
    }

    /// What the page needs to know to sign in; never a secret (the console
    /// is a public client: PKCE, no client secret).
    fn config(&self) -> serde_json::Value {
        let mut config = self.sign_in_config();
        config["claims"] = json!({
            "tenant": self.claims.tenant,
            "operator": self.claims.operator,
            "global_operator": self.claims.global_operator,
        });
        config
    }

    fn sign_in_config(&self) -> serde_json::Value {
        match &self.sign_in {
            SignIn::Oidc(o) => json!({
                "sign_in": "oidc",
                "authorize_url": o.authorize_url,
                "token_url": o.token_url,
                "client_id": o.client_id,
                "scope": o.scope,
            }),
            SignIn::Local => json!({"sign_in": "local"}),
            SignIn::Unconfigured => json!({"sign_in": "unconfigured"}),
        }
    }

    fn plain(&self, status: StatusCode, text: &str) -> Response<Body> {
        self.headers(Response::builder().status(status))
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Body::Text(text.to_owned()))
            .expect("valid response")
    }

    fn headers(&self, builder: lambda_http::http::response::Builder) -> lambda_http::http::response::Builder {
        builder
            .header(header::CONTENT_SECURITY_POLICY, &self.policy)
            .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
            .header(header::REFERRER_POLICY, "no-referrer")
            .header(header::X_FRAME_OPTIONS, "DENY")
            .header(header::CACHE_CONTROL, "no-cache")
    }
}

/// `scheme://host[:port]` of an absolute URL.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'a>(r: &'a Response<Body>, name: &str) -> &'a str {
        r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    fn text(r: &Response<Body>) -> String {
        String::from_utf8_lossy(r.body().as_ref()).into_owned()
    }

    /// The modules each script imports, by served name.
    fn imports(text: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("import "))
            .filter_map(|l| l.split("from \"./").nth(1)?.split('"').next())
            .map(|file| format!("{PREFIX}/{file}"))
            .collect()
    }

    #[test]
    fn the_scripts_import_only_served_modules_and_in_no_circle() {
        let served: Vec<&str> = SCRIPTS.iter().map(|(name, _)| *name).collect();
        let graph: Vec<(&str, Vec<String>)> = SCRIPTS.iter().map(|(name, text)| (*name, imports(text))).collect();
        for (name, deps) in &graph {
            for dep in deps {
                assert!(
                    served.contains(&dep.as_str()),
                    "{name} imports {dep}, which is not served"
                );
            }
        }
        assert!(!graph[0].1.is_empty(), "app.js imports the others");
        // No circle: repeatedly take out the modules whose imports are all out.
        let mut left = graph.clone();
        while !left.is_empty() {
            let before = left.len();
            let gone: Vec<&str> = graph
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| !left.iter().any(|(l, _)| l == n))
                .collect();
            left.retain(|(_, deps)| !deps.iter().all(|d| gone.contains(&d.as_str())));
            assert!(left.len() < before, "the scripts import in a circle: {left:?}");
        }
    }

    #[test]
    fn every_answer_carries_a_strict_policy_and_the_page_loads_only_its_own_files() {
        let console = Console::new(SignIn::Local);
        let scripts = SCRIPTS.map(|(name, _)| name);
        for path in ["/console", "/console/app.css", "/console/config.json", "/console/nope"]
            .into_iter()
            .chain(scripts)
        {
            let r = console.answer(&Method::GET, path);
            let csp = header(&r, "content-security-policy");
            assert!(
                csp.starts_with("default-src 'none'; script-src 'self';"),
                "{path}: {csp}"
            );
            assert!(!csp.contains("unsafe"), "{path}: {csp}");
            assert_eq!(header(&r, "x-content-type-options"), "nosniff");
        }
        let page = text(&console.answer(&Method::GET, "/console/"));
        assert!(page.contains("src=\"/console/app.js\"") && page.contains("href=\"/console/app.css\""));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing from elsewhere"
        );
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "no inline script or style"
        );
        for script in scripts {
            let served = console.answer(&Method::GET, script);
            assert_eq!(header(&served, "content-type"), "text/javascript; charset=utf-8");
            assert!(!text(&served).contains("innerHTML"), "{script}");
        }
        assert_eq!(console.answer(&Method::GET, "/console/nope").status(), 404);
        assert_eq!(console.answer(&Method::POST, "/console").status(), 405);
        assert_eq!(
            text(&console.answer(&Method::GET, "/console")),
            page,
            "the page's own address"
        );
    }

    #[test]
    fn an_oidc_console_may_reach_the_token_endpoint_and_shows_no_secret() {
        let console = Console::new(SignIn::Oidc(Oidc {
            authorize_url: "https://login.example.org/oauth2/authorize".into(),
            token_url: "https://login.example.org:8443/oauth2/token?x=1".into(),
            client_id: "console-client".into(),
            scope: "openid genace:operator".into(),
        }));
        let r = console.answer(&Method::GET, "/console/config.json");
        assert!(header(&r, "content-security-policy").contains("connect-src 'self' https://login.example.org:8443;"));
        let config: serde_json::Value = serde_json::from_str(&text(&r)).unwrap();
        assert_eq!(config["sign_in"], "oidc");
        assert_eq!(config["client_id"], "console-client");
        assert_eq!(config.as_object().unwrap().len(), 6, "{config}");
        // The claim names the page says which kind of operator is signed in by.
        assert_eq!(config["claims"]["global_operator"], "genace:operator:all");
        let local = Console::new(SignIn::Local).answer(&Method::GET, "/console/config.json");
        assert!(header(&local, "content-security-policy").contains("connect-src 'self';"));
    }

    #[test]
    fn only_console_paths_are_the_consoles() {
        assert!(Console::owns("/console") && Console::owns("/console/app.js"));
        assert!(!Console::owns("/consoles") && !Console::owns("/v1/operations"));
    }
}
