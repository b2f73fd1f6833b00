//! The keyring: registry keys → credentials, and which credentials an image's pull may use, as
//! the Go kubelet's `BasicDockerKeyring` and `UnionDockerKeyring` decide it.
//!
//! A key is a config entry's registry with the scheme, a leading `/v1` or `/v2` and a bare `/`
//! path removed (`https://index.docker.io/v1/` → `index.docker.io`). It matches an image when
//! the host has as many dot-separated labels as the image's registry and each label matches as
//! a glob (`*.example.com`), the ports are equal, and the key's path is a string prefix of the
//! image's repository path. Longer keys sort first, so `quay.io/team` wins over `quay.io`. When
//! nothing matches, a Docker Hub image falls back to the `index.docker.io` key.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use ferrolet_proto::cri;

use super::docker_config::{Credential, DockerConfig};

/// Where a credential came from: named in logs instead of the credential itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A Docker config file on the node.
    File(std::path::PathBuf),
    /// A pod's pull secret.
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Secret { namespace, name } => write!(f, "secret {namespace}/{name}"),
        }
    }
}

#[derive(Clone, Debug)]
struct Stored {
    credential: Credential,
    source: Arc<Source>,
}

/// One credential a pull may try, with the key it matched under and where it came from.
#[derive(Clone, Copy, Debug)]
pub struct Match<'a> {
    /// The keyring key that matched (a registry host, maybe with a path).
    pub registry: &'a str,
    /// The credential.
    pub credential: &'a Credential,
    /// Where it came from.
    pub source: &'a Source,
}

impl Match<'_> {
    /// The credential as CRI's `AuthConfig` (what the Go kubelet sends: no server address).
    pub fn auth_config(&self) -> cri::AuthConfig {
        auth_config(self.credential)
    }
}

/// The CRI `AuthConfig` for a credential.
pub fn auth_config(c: &Credential) -> cri::AuthConfig {
    cri::AuthConfig {
        username: c.username.clone(),
        password: c.password.clone(),
        identity_token: c.identity_token.clone(),
        registry_token: c.registry_token.clone(),
        ..Default::default()
    }
}

/// Registry keys → credentials (Go's `BasicDockerKeyring`).
#[derive(Clone, Debug, Default)]
pub struct DockerKeyring {
    // A BTreeMap walked backwards is Go's reverse-sorted index: most specific key first.
    creds: BTreeMap<String, Vec<Stored>>,
}

/// Docker Hub's key, the fallback for Hub images no other key matched.
const DEFAULT_REGISTRY_KEY: &str = "index.docker.io";

impl DockerKeyring {
    /// An empty keyring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every entry of `config`, supplied by `source`; entries whose registry is not a
    /// usable URL are logged and skipped, as in Go.
    pub fn add(&mut self, source: Source, config: DockerConfig) {
        let source = Arc::new(source);
        for (registry, credential) in config {
            let Some(key) = normalize_key(&registry) else {
                tracing::warn!(%registry, %source, "ignoring an invalid registry entry");
                continue;
            };
            self.creds.entry(key).or_default().push(Stored {
                credential,
                source: source.clone(),
            });
        }
    }

    /// Whether it holds no credentials.
    pub fn is_empty(&self) -> bool {
        self.creds.is_empty()
    }

    /// The keys, most specific first.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.creds.keys().rev().map(String::as_str)
    }

    /// Every credential whose key matches `image`, most specific key first.
    pub fn matches(&self, image: &str) -> Vec<Match<'_>> {
        let repo = repository(image);
        let target = SchemelessUrl::parse(&repo);
        let mut found: Vec<Match<'_>> = self
            .creds
            .iter()
            .rev()
            .filter(|(key, _)| SchemelessUrl::parse(key).matches(&target))
            .flat_map(|(key, stored)| stored.iter().map(move |s| as_match(key, s)))
            .collect();
        if found.is_empty()
            && is_default_registry_match(&repo)
            && let Some((key, stored)) = self.creds.get_key_value(DEFAULT_REGISTRY_KEY)
        {
            found = stored.iter().map(|s| as_match(key, s)).collect();
        }
        found
    }

    /// The credentials to try for `image`, in order, as CRI `AuthConfig`s.
    #[cfg(test)]
    pub fn lookup(&self, image: &str) -> Vec<cri::AuthConfig> {
        self.matches(image).iter().map(Match::auth_config).collect()
    }
}

fn as_match<'a>(key: &'a str, stored: &'a Stored) -> Match<'a> {
    Match {
        registry: key,
        credential: &stored.credential,
        source: &stored.source,
    }
}

/// Several keyrings asked in turn, every match of each kept (Go's `UnionDockerKeyring`): a
/// pod's pull secrets first, then the node's files.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    layers: Vec<Arc<DockerKeyring>>,
}

impl Keyring {
    /// The union of `layers`, asked in this order.
    pub fn new(layers: Vec<Arc<DockerKeyring>>) -> Self {
        Self { layers }
    }

    /// Every matching credential of every layer, layer by layer.
    pub fn matches(&self, image: &str) -> Vec<Match<'_>> {
        self.layers.iter().flat_map(|k| k.matches(image)).collect()
    }

    /// The credentials to try for `image`, in order, as CRI `AuthConfig`s; empty means pull
    /// anonymously.
    #[cfg(test)]
    pub fn lookup(&self, image: &str) -> Vec<cri::AuthConfig> {
        self.matches(image).iter().map(Match::auth_config).collect()
    }
}

/// A registry entry's key: scheme dropped, `/v1/` or `/v2/` prefix of the path dropped, and a
/// bare `/` path dropped. `None` for what Go's `url.Parse` would refuse.
pub fn normalize_key(registry: &str) -> Option<String> {
    let rest = registry
        .strip_prefix("https://")
        .or_else(|| registry.strip_prefix("http://"))
        .unwrap_or(registry);
    let url = SchemelessUrl::parse(rest);
    if url.host.is_empty() || !valid_host(url.host) {
        return None;
    }
    let path = if url.path.starts_with("/v2/") || url.path.starts_with("/v1/") {
        &url.path[3..]
    } else {
        url.path
    };
    if path.is_empty() || path == "/" {
        Some(url.host.to_string())
    } else {
        Some(format!("{}{path}", url.host))
    }
}

fn valid_host(host: &str) -> bool {
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let (_, port) = split_host_port(host);
    port.bytes().all(|b| b.is_ascii_digit())
}

/// An image's repository as the Go kubelet looks credentials up for it (Docker's normalised
/// name without tag or digest): `busybox:1` → `docker.io/library/busybox`,
/// `127.0.0.1:5001/team/app:1` → `127.0.0.1:5001/team/app`.
pub fn repository(image: &str) -> String {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let name = match name[last_slash..].find(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    };
    let (domain, remainder) = match name.split_once('/') {
        Some((first, rest)) if is_domain(first) => (first, rest),
        _ => ("docker.io", name),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    if domain == "docker.io" && !remainder.contains('/') {
        format!("{domain}/library/{remainder}")
    } else {
        format!("{domain}/{remainder}")
    }
}

/// Docker's rule for the first path component being a registry rather than a Hub user.
fn is_domain(first: &str) -> bool {
    first.contains(['.', ':']) || first == "localhost" || first.to_lowercase() != first
}

/// Whether a normalised repository pulls from Docker Hub. Go's `isDefaultRegistryMatch` also
/// says yes for any first component without `.` or `:`, which after normalisation can only be
/// `localhost` (or an upper-case host): a different registry, which must not get Hub
/// credentials, so only `docker.io` counts here.
fn is_default_registry_match(repo: &str) -> bool {
    repo.split_once('/')
        .is_some_and(|(domain, _)| domain == "docker.io")
}

/// A URL without scheme split as Go's `url.Parse("https://" + s)` splits it.
#[derive(Debug, PartialEq, Eq)]
struct SchemelessUrl<'a> {
    host: &'a str,
    path: &'a str,
}

impl<'a> SchemelessUrl<'a> {
    fn parse(s: &'a str) -> Self {
        // The query and fragment are no part of a registry key or a repository.
        let s = s.split(['?', '#']).next().unwrap_or("");
        let (authority, path) = match s.find('/') {
            Some(i) => (&s[..i], &s[i..]),
            None => (s, ""),
        };
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        Self { host, path }
    }

    /// Go's `URLsMatch` with `self` as the glob.
    fn matches(&self, target: &SchemelessUrl<'_>) -> bool {
        let (glob_host, glob_port) = split_host_port(self.host);
        let (target_host, target_port) = split_host_port(target.host);
        if glob_port != target_port || !target.path.starts_with(self.path) {
            return false;
        }
        let globs: Vec<&str> = glob_host.split('.').collect();
        let labels: Vec<&str> = target_host.split('.').collect();
        globs.len() == labels.len()
            && globs
                .iter()
                .zip(&labels)
                .all(|(g, l)| glob_match(g.as_bytes(), l.as_bytes()))
    }
}

/// Go's `net.SplitHostPort`, falling back to (whole, "") where it fails.
fn split_host_port(host: &str) -> (&str, &str) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once("]:") {
            Some((h, port)) if !port.contains(':') => (h, port),
            _ => (host, ""),
        };
    }
    match host.split_once(':') {
        Some((h, port)) if !port.contains(':') => (h, port),
        _ => (host, ""),
    }
}

/// Go's `filepath.Match` on one host label: `*`, `?`, `[...]` classes (ranges, `^`) and `\`
/// escapes. A malformed pattern matches nothing (Go reports an error, which `URLsMatch`'s
/// callers treat as no match).
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // After a mismatch, the last `*` takes one more byte: (pattern after it, name index).
    let mut resume: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() {
            if pattern[p] == b'*' {
                resume = Some((p + 1, n));
                p += 1;
                continue;
            }
            match token_match(&pattern[p..], name[n]) {
                Some((true, width)) => {
                    p += width;
                    n += 1;
                    continue;
                }
                Some((false, _)) => {}
                None => return false,
            }
        }
        match resume {
            Some((after_star, covered)) => {
                resume = Some((after_star, covered + 1));
                p = after_star;
                n = covered + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|b| *b == b'*')
}

/// Matches `c` against the token at the start of `pattern`: (hit, token width), `None` when
/// the token is malformed.
fn token_match(pattern: &[u8], c: u8) -> Option<(bool, usize)> {
    match pattern.first()? {
        b'?' => Some((true, 1)),
        b'\\' => pattern.get(1).map(|lit| (*lit == c, 2)),
        b'[' => class_match(pattern, c),
        lit => Some((*lit == c, 1)),
    }
}

/// A `[...]` class (at `pattern[0]`) against `c`, with Go's rules: at least one range, `-` and
/// `]` only escaped inside it.
fn class_match(pattern: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = pattern.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut hit = false;
    let mut ranges = 0;
    loop {
        if pattern.get(i) == Some(&b']') && ranges > 0 {
            return Some((hit != negated, i + 1));
        }
        let lo = class_char(pattern, &mut i)?;
        let hi = if pattern.get(i) == Some(&b'-') {
            i += 1;
            class_char(pattern, &mut i)?
        } else {
            lo
        };
        hit |= lo <= c && c <= hi;
        ranges += 1;
    }
}

fn class_char(pattern: &[u8], i: &mut usize) -> Option<u8> {
    let mut b = *pattern.get(*i)?;
    if b == b'-' || b == b']' {
        return None;
    }
    if b == b'\\' {
        *i += 1;
        b = *pattern.get(*i)?;
    }
    *i += 1;
    // A class that ends right after a character is unclosed.
    pattern.get(*i)?;
    Some(b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn cred(user: &str) -> Credential {
        Credential {
            username: user.into(),
            password: format!("{user}-pw"),
            ..Default::default()
        }
    }

    fn keyring(entries: &[(&str, &str)]) -> DockerKeyring {
        let mut k = DockerKeyring::new();
        k.add(
            Source::File(PathBuf::from("/test/config.json")),
            entries
                .iter()
                .map(|(r, u)| (r.to_string(), cred(u)))
                .collect(),
        );
        k
    }

    fn users(k: &DockerKeyring, image: &str) -> Vec<String> {
        k.lookup(image).into_iter().map(|a| a.username).collect()
    }

    #[test]
    fn keys_lose_scheme_version_path_and_bare_slash() {
        for (raw, key) in [
            ("https://index.docker.io/v1/", "index.docker.io"),
            ("http://registry.example.com", "registry.example.com"),
            ("registry.example.com/", "registry.example.com"),
            ("https://quay.io/v2/team", "quay.io/team"),
            ("quay.io/team/", "quay.io/team/"),
            ("127.0.0.1:5001", "127.0.0.1:5001"),
            ("*.example.com:443/x", "*.example.com:443/x"),
            // As Go's url.Parse: `?` starts a query, so it cannot be a host glob.
            ("reg?.corp.io", "reg"),
        ] {
            assert_eq!(normalize_key(raw).as_deref(), Some(key), "{raw}");
        }
        for bad in ["", "https://", "/path", "host:port", "bad host"] {
            assert_eq!(normalize_key(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn repositories_are_normalised_like_docker() {
        for (image, repo) in [
            ("busybox", "docker.io/library/busybox"),
            ("busybox:1.36", "docker.io/library/busybox"),
            ("team/app@sha256:abc", "docker.io/team/app"),
            ("docker.io/busybox", "docker.io/library/busybox"),
            ("index.docker.io/team/app:1", "docker.io/team/app"),
            (
                "127.0.0.1:5001/ferrolet/busybox:1",
                "127.0.0.1:5001/ferrolet/busybox",
            ),
            ("localhost/app", "localhost/app"),
            ("localhost:5000/app:tag@sha256:00", "localhost:5000/app"),
            ("quay.io/coreos/etcd:v3", "quay.io/coreos/etcd"),
        ] {
            assert_eq!(repository(image), repo, "{image}");
        }
    }

    #[test]
    fn host_port_and_path_must_match() {
        let k = keyring(&[("127.0.0.1:5001", "auth"), ("quay.io/team", "team")]);
        assert_eq!(users(&k, "127.0.0.1:5001/ferrolet/busybox:1"), ["auth"]);
        assert!(users(&k, "127.0.0.1:5000/ferrolet/busybox:1").is_empty());
        assert!(users(&k, "127.0.0.1/ferrolet/busybox:1").is_empty());
        assert_eq!(users(&k, "quay.io/team/app"), ["team"]);
        // The path is a string prefix, as in Go.
        assert_eq!(users(&k, "quay.io/teamwork/app"), ["team"]);
        assert!(users(&k, "quay.io/other/app").is_empty());
        assert!(users(&k, "quay.io/app").is_empty());
        // A key with a port does not match the host without one, nor the reverse.
        let k = keyring(&[("quay.io:443", "p")]);
        assert!(users(&k, "quay.io/app").is_empty());
    }

    #[test]
    fn host_labels_match_as_globs_one_for_one() {
        let k = keyring(&[
            ("*.example.com", "star"),
            ("reg[0-9].corp.io", "digit"),
            ("[a-c]x.io", "cls"),
        ]);
        assert_eq!(users(&k, "a.example.com/app"), ["star"]);
        assert!(users(&k, "example.com/app").is_empty());
        assert!(users(&k, "a.b.example.com/app").is_empty());
        assert_eq!(users(&k, "reg1.corp.io/app"), ["digit"]);
        assert!(users(&k, "reg12.corp.io/app").is_empty());
        assert_eq!(users(&k, "bx.io/app"), ["cls"]);
        assert!(users(&k, "dx.io/app").is_empty());
    }

    #[test]
    fn most_specific_key_first_and_all_matches_kept() {
        let k = keyring(&[
            ("quay.io", "host"),
            ("quay.io/team", "team"),
            ("quay.io/team/app", "app"),
            ("*.io", "glob"),
        ]);
        assert_eq!(
            users(&k, "quay.io/team/app:1"),
            ["app", "team", "host", "glob"]
        );
        assert_eq!(users(&k, "quay.io/team/other"), ["team", "host", "glob"]);
    }

    #[test]
    fn docker_hub_images_use_docker_io_keys_or_fall_back_to_the_index() {
        let hub = keyring(&[("https://index.docker.io/v1/", "hub")]);
        for image in [
            "busybox",
            "library/busybox:1",
            "docker.io/team/app",
            "index.docker.io/x/y",
        ] {
            assert_eq!(users(&hub, image), ["hub"], "{image}");
        }
        assert!(users(&hub, "quay.io/team/app").is_empty());
        assert!(users(&hub, "localhost/app").is_empty());
        // A direct match keeps the index's credentials out.
        let both = keyring(&[("docker.io", "direct"), ("index.docker.io", "index")]);
        assert_eq!(users(&both, "busybox"), ["direct"]);
        assert_eq!(users(&both, "docker.io/team/app"), ["direct"]);
    }

    #[test]
    fn union_keeps_layer_order_and_sources() {
        let mut secret = DockerKeyring::new();
        secret.add(
            Source::Secret {
                namespace: "ns".into(),
                name: "pull".into(),
            },
            vec![("127.0.0.1:5001".into(), cred("from-secret"))],
        );
        let file = keyring(&[("127.0.0.1:5001/ferrolet", "from-file")]);
        let union = Keyring::new(vec![Arc::new(secret), Arc::new(file)]);
        let found = union.matches("127.0.0.1:5001/ferrolet/busybox:1");
        let summary: Vec<(String, String, String)> = found
            .iter()
            .map(|m| {
                (
                    m.registry.to_string(),
                    m.credential.username.clone(),
                    m.source.to_string(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (
                    "127.0.0.1:5001".to_string(),
                    "from-secret".to_string(),
                    "secret ns/pull".to_string()
                ),
                (
                    "127.0.0.1:5001/ferrolet".to_string(),
                    "from-file".to_string(),
                    "file /test/config.json".to_string()
                ),
            ]
        );
        let auth = union.lookup("127.0.0.1:5001/ferrolet/busybox:1");
        assert_eq!(auth[0].password, "from-secret-pw");
        assert!(auth[0].server_address.is_empty());
        assert!(Keyring::default().lookup("busybox").is_empty());
    }

    #[test]
    fn same_key_from_two_sources_keeps_both_in_order() {
        let mut k = keyring(&[("r.io", "first")]);
        k.add(
            Source::File(PathBuf::from("/other")),
            vec![("https://r.io/".into(), cred("second"))],
        );
        assert_eq!(users(&k, "r.io/app"), ["first", "second"]);
        assert_eq!(k.registries().collect::<Vec<_>>(), ["r.io"]);
    }

    #[test]
    fn split_host_port_like_go() {
        assert_eq!(split_host_port("a.io:5000"), ("a.io", "5000"));
        assert_eq!(split_host_port("a.io"), ("a.io", ""));
        assert_eq!(split_host_port("[::1]:5000"), ("::1", "5000"));
        assert_eq!(split_host_port("[::1]"), ("[::1]", ""));
        assert_eq!(split_host_port("a:b:c"), ("a:b:c", ""));
    }

    #[test]
    fn globs_like_filepath_match() {
        let m = |p: &str, n: &str| glob_match(p.as_bytes(), n.as_bytes());
        for (p, n, want) in [
            ("*", "anything", true),
            ("*", "", true),
            ("a*c", "abbbc", true),
            ("a*c", "abbbd", false),
            ("*b*", "abc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[^a-c]x", "dx", true),
            ("[^a-c]x", "bx", false),
            ("[ab]", "b", true),
            ("[\\]]", "]", true),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("exact", "exact", true),
            ("exact", "exacT", false),
            // Malformed patterns match nothing.
            ("[a-", "a", false),
            ("[a-]", "a", false),
            ("[]a]", "a", false),
            ("a\\", "a", false),
        ] {
            assert_eq!(m(p, n), want, "{p:?} vs {n:?}");
        }
    }
}
