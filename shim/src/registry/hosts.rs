//! Per-registry host configuration: mirrors, plain HTTP, TLS trust and default credentials.
//!
//! Embedded in ferrolet-cri's TOML config as a table keyed by registry domain (the domain of a
//! normalized reference: `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`):
//!
//! ```toml
//! [registry.hosts."docker.io"]
//! mirrors = ["http://127.0.0.1:5000"]
//!
//! [registry.hosts."registry.example.com:5443"]
//! ca_file = "/etc/ferrolet/certs/example-ca.pem"
//! username = "puller"
//! password = "secret"
//! ```
//!
//! For each pull the endpoints are tried in order: every mirror, then the host's own endpoint.
//! The own endpoint is `server` if set, else `https://<domain>` (Docker Hub's API lives at
//! `registry-1.docker.io`), except that it is plain `http://` when `plain_http` is set or the
//! domain is a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`). Loopback goes straight to
//! HTTP rather than trying HTTPS first so a local registry costs no failed handshake per pull;
//! a loopback registry that does speak TLS sets `server = "https://localhost:5000"`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use reqwest::Url;
use serde::Deserialize;

use crate::reference::DOCKER_HUB;
use crate::registry::auth::Credentials;

/// Docker Hub's registry API endpoint; `docker.io` itself serves no registry API.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// Registry hosts, keyed by the reference domain (`docker.io`, `127.0.0.1:5000`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct HostsConfig {
    /// Per-domain settings; a domain not listed uses the defaults in the module doc.
    pub hosts: BTreeMap<String, HostConfig>,
}

/// Settings for one registry domain.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// Endpoints tried before the host's own, in order: `http://host:port`, `https://host`, or a
    /// bare `host:port` (HTTPS unless `plain_http`). A path, if given, is put before `/v2/`.
    pub mirrors: Vec<String>,
    /// Replaces the host's own endpoint (same forms as a mirror).
    pub server: Option<String>,
    /// Use plain HTTP for the host's own endpoint and for mirrors written without a scheme.
    pub plain_http: bool,
    /// Accept any TLS certificate from this host's endpoints (mirrors included).
    pub skip_verify: bool,
    /// PEM file of extra CA certificates trusted for this host's endpoints (mirrors included).
    pub ca_file: Option<PathBuf>,
    /// Default user name, used when a pull carries no credentials.
    pub username: Option<String>,
    /// Default password.
    pub password: Option<String>,
    /// Default `base64("user:pass")`.
    pub auth: Option<String>,
    /// Default OAuth2 refresh token.
    pub identity_token: Option<String>,
}

impl fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("HostConfig")
            .field("mirrors", &self.mirrors)
            .field("server", &self.server)
            .field("plain_http", &self.plain_http)
            .field("skip_verify", &self.skip_verify)
            .field("ca_file", &self.ca_file)
            .field("username", &self.username)
            .field("password", &set(&self.password))
            .field("auth", &set(&self.auth))
            .field("identity_token", &set(&self.identity_token))
            .finish()
    }
}

impl HostConfig {
    /// The default credentials, or `None` if none are configured.
    pub fn credentials(&self) -> Option<Credentials> {
        let c = Credentials {
            username: self.username.clone().unwrap_or_default(),
            password: self.password.clone().unwrap_or_default(),
            auth: self.auth.clone().unwrap_or_default(),
            identity_token: self.identity_token.clone().unwrap_or_default(),
            registry_token: String::new(),
        };
        (!c.is_empty()).then_some(c)
    }

    /// Whether endpoints of this host need their own TLS settings.
    pub(crate) fn custom_tls(&self) -> bool {
        self.skip_verify || self.ca_file.is_some()
    }
}

/// One place to send registry requests for a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `scheme://host[:port][/path]`, no trailing slash; requests go to `<base>/v2/...`.
    pub base: Url,
    /// `host:port`, for messages.
    pub address: String,
    /// A mirror (failures move on to the next endpoint) rather than the host's own endpoint.
    pub mirror: bool,
}

impl Endpoint {
    /// The URL of `path` (which starts with `/v2/`) on this endpoint.
    pub fn url(&self, path: &str) -> Result<Url, String> {
        let base = self.base.as_str().trim_end_matches('/');
        Url::parse(&format!("{base}{path}")).map_err(|e| format!("bad URL {base}{path}: {e}"))
    }
}

/// Canonical key for a domain: lowercase, `index.docker.io` folded into `docker.io`.
fn domain_key(domain: &str) -> String {
    let d = domain.to_ascii_lowercase();
    if d == "index.docker.io" {
        DOCKER_HUB.to_string()
    } else {
        d
    }
}

/// Whether a domain (with or without port) names this machine.
pub fn is_loopback(domain: &str) -> bool {
    let host = if let Some(rest) = domain.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        domain.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost")
        || host == "::1"
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

fn parse_endpoint(raw: &str, plain_http: bool, mirror: bool) -> Result<Endpoint, String> {
    let raw = raw.trim();
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else if plain_http {
        format!("http://{raw}")
    } else {
        format!("https://{raw}")
    };
    let base = Url::parse(&with_scheme).map_err(|e| format!("endpoint {raw:?}: {e}"))?;
    if base.scheme() != "http" && base.scheme() != "https" {
        return Err(format!("endpoint {raw:?}: scheme must be http or https"));
    }
    let host = base
        .host_str()
        .ok_or_else(|| format!("endpoint {raw:?} has no host"))?;
    if base.query().is_some() || base.fragment().is_some() {
        return Err(format!("endpoint {raw:?}: no query or fragment allowed"));
    }
    let port = base
        .port_or_known_default()
        .ok_or_else(|| format!("endpoint {raw:?} has no port"))?;
    Ok(Endpoint {
        address: format!("{host}:{port}"),
        base,
        mirror,
    })
}

impl HostsConfig {
    /// Settings for `domain`, if configured.
    pub fn get(&self, domain: &str) -> Option<&HostConfig> {
        self.entry(domain).map(|(_, v)| v)
    }

    /// The configured key and settings for `domain` (keys match case-insensitively, and
    /// `index.docker.io` is `docker.io`).
    pub fn entry(&self, domain: &str) -> Option<(&String, &HostConfig)> {
        let key = domain_key(domain);
        self.hosts.iter().find(|(k, _)| domain_key(k) == key)
    }

    /// The endpoints for `domain` in the order they are tried.
    pub fn endpoints(&self, domain: &str) -> Result<Vec<Endpoint>, String> {
        let default = HostConfig::default();
        let cfg = self.get(domain).unwrap_or(&default);
        let mut out = Vec::with_capacity(cfg.mirrors.len() + 1);
        for m in &cfg.mirrors {
            out.push(parse_endpoint(m, cfg.plain_http, true)?);
        }
        let own = match &cfg.server {
            Some(s) => parse_endpoint(s, cfg.plain_http, false)?,
            None => {
                let key = domain_key(domain);
                let api = if key == DOCKER_HUB {
                    DOCKER_HUB_API
                } else {
                    key.as_str()
                };
                parse_endpoint(api, cfg.plain_http || is_loopback(&key), false)?
            }
        };
        out.push(own);
        Ok(out)
    }

    /// Checks every configured host: endpoints parse, CA files exist.
    pub fn validate(&self) -> Result<(), String> {
        for (domain, cfg) in &self.hosts {
            self.endpoints(domain)
                .map_err(|e| format!("registry host {domain:?}: {e}"))?;
            if let Some(ca) = &cfg.ca_file
                && !ca.is_file()
            {
                return Err(format!(
                    "registry host {domain:?}: ca_file {} is not a readable file",
                    ca.display()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(h: &HostsConfig, domain: &str) -> Vec<String> {
        h.endpoints(domain)
            .unwrap()
            .into_iter()
            .map(|e| format!("{}{}", e.base, if e.mirror { " (mirror)" } else { "" }))
            .collect()
    }

    #[test]
    fn defaults() {
        let h = HostsConfig::default();
        assert_eq!(urls(&h, "docker.io"), ["https://registry-1.docker.io/"]);
        assert_eq!(urls(&h, "registry.k8s.io"), ["https://registry.k8s.io/"]);
        assert_eq!(urls(&h, "127.0.0.1:5000"), ["http://127.0.0.1:5000/"]);
        assert_eq!(urls(&h, "localhost:5000"), ["http://localhost:5000/"]);
        assert_eq!(urls(&h, "[::1]:5000"), ["http://[::1]:5000/"]);
        assert_eq!(urls(&h, "my.host:5443"), ["https://my.host:5443/"]);
        let e = &h.endpoints("docker.io").unwrap()[0];
        assert_eq!(e.address, "registry-1.docker.io:443");
        assert_eq!(
            e.url("/v2/library/busybox/manifests/1").unwrap().as_str(),
            "https://registry-1.docker.io/v2/library/busybox/manifests/1"
        );
    }

    #[test]
    fn from_toml_shape() {
        // The lead embeds this under [registry.hosts]; the JSON equivalent exercises serde.
        let h: HostsConfig = serde_json::from_value(serde_json::json!({
            "docker.io": {"mirrors": ["http://127.0.0.1:5000", "mirror.example:8443/prefix"]},
            "insecure.example": {"plain_http": true, "username": "u", "password": "p"},
            "tls.example": {"server": "https://tls.example:9443", "skip_verify": true},
        }))
        .unwrap();
        assert_eq!(
            urls(&h, "docker.io"),
            [
                "http://127.0.0.1:5000/ (mirror)",
                "https://mirror.example:8443/prefix (mirror)",
                "https://registry-1.docker.io/",
            ]
        );
        assert_eq!(
            h.endpoints("docker.io").unwrap()[1]
                .url("/v2/x/blobs/y")
                .unwrap()
                .as_str(),
            "https://mirror.example:8443/prefix/v2/x/blobs/y"
        );
        assert_eq!(urls(&h, "index.docker.io").len(), 3);
        assert_eq!(urls(&h, "insecure.example"), ["http://insecure.example/"]);
        assert_eq!(urls(&h, "tls.example"), ["https://tls.example:9443/"]);
        let creds = h.get("insecure.example").unwrap().credentials().unwrap();
        assert_eq!(creds.username, "u");
        assert!(h.get("docker.io").unwrap().credentials().is_none());
        assert!(h.validate().is_ok());
        assert!(!format!("{:?}", h).contains("\"p\""));
    }

    #[test]
    fn embeds_in_toml() {
        #[derive(Deserialize)]
        struct Config {
            registry: Registry,
        }
        #[derive(Deserialize)]
        struct Registry {
            hosts: HostsConfig,
        }
        let c: Config = toml::from_str(
            r#"
            [registry.hosts."docker.io"]
            mirrors = ["http://127.0.0.1:5000"]
            [registry.hosts."127.0.0.1:5001"]
            username = "u"
            password = "p"
            "#,
        )
        .unwrap();
        assert_eq!(
            urls(&c.registry.hosts, "docker.io"),
            [
                "http://127.0.0.1:5000/ (mirror)",
                "https://registry-1.docker.io/"
            ]
        );
        assert!(
            c.registry
                .hosts
                .get("127.0.0.1:5001")
                .unwrap()
                .credentials()
                .is_some()
        );
    }

    #[test]
    fn rejects_bad_config() {
        let unknown = serde_json::from_value::<HostsConfig>(serde_json::json!({
            "docker.io": {"insecure": true}
        }));
        assert!(unknown.is_err(), "unknown keys are refused, not ignored");
        let h: HostsConfig = serde_json::from_value(serde_json::json!({
            "docker.io": {"mirrors": ["ftp://x"]},
        }))
        .unwrap();
        assert!(h.validate().is_err());
        let h: HostsConfig = serde_json::from_value(serde_json::json!({
            "x.io": {"ca_file": "/nonexistent/ca.pem"},
        }))
        .unwrap();
        assert!(h.validate().unwrap_err().contains("/nonexistent/ca.pem"));
    }

    #[test]
    fn loopback() {
        for d in [
            "localhost",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.1.2.3:5000",
            "[::1]:80",
        ] {
            assert!(is_loopback(d), "{d}");
        }
        for d in ["localhost.example", "10.0.0.1:5000", "docker.io", "[::2]"] {
            assert!(!is_loopback(d), "{d}");
        }
    }
}
