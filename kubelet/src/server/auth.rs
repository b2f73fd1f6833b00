//! Who calls the secure API and what they may do, as the Go kubelet decides it.
//!
//! Authentication, in Go's union order: a client certificate that chains to `clientCAFile`
//! names the user (its common name) and groups (its organizations, plus
//! `system:authenticated`); else a bearer token, when webhook authentication is on, names
//! the user its `TokenReview` gives ([`webhook`](super::webhook)); without either, the
//! request is `system:anonymous` in `system:unauthenticated` when anonymous requests are on,
//! and 401 otherwise. A certificate that does not verify, or a token the API server does not
//! accept, is 401 even then (Go fails on the error before trying anonymous), unless the other
//! credential authenticates; a certificate that verifies but has no common name counts as no
//! credential.
//!
//! Authorization sees the request as Go's node attributes: verb from the method (`get`,
//! `create`, …), resource `nodes`, and a subresource from the path, fine-grained first with
//! `proxy` as the fallback (`KubeletFineGrainedAuthz`, on by default since 1.33): `/pods`,
//! `/runningpods/` and ferrolet's `/debug/pods/…/timeline` → `pods`, `/healthz` → `healthz`,
//! `/configz` → `configz`, `/stats/` → `stats`, `/metrics` → `metrics`, `/logs/` → `log`,
//! `/checkpoint/` → `checkpoint`, anything else → `proxy`. `AlwaysAllow` allows all; `Static` (ferrolet's own, [`Policy`]) allows
//! what one of its rules grants for any of those subresources; `Webhook` asks a
//! `SubjectAccessReview` for each in turn until one is allowed. A denial is 403 with Go's
//! message; a review that fails is 500 with Go's `Authorization error (…)`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::Method;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use serde::Deserialize;

use super::extra::is_subpath;
use super::webhook::{TokenAuthenticator, WebhookAuthorizer};
use crate::certificate::pem;

/// The user of requests without credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of requests without credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// Its groups.
    pub groups: Vec<String>,
}

impl User {
    /// The anonymous user.
    pub fn anonymous() -> Self {
        User {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
        }
    }
}

/// Why a request is not authenticated (all are 401 Unauthorized).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthnError {
    /// No credential, and anonymous requests are off.
    #[error("no credentials, and anonymous requests are not allowed")]
    NoCredentials,
    /// The client certificate does not verify against the client CAs.
    #[error("verifying the client certificate: {0}")]
    BadCertificate(String),
    /// The API server does not authenticate the bearer token.
    #[error("invalid bearer token")]
    InvalidToken,
    /// The token could not be reviewed.
    #[error("reviewing the bearer token: {0}")]
    TokenReview(String),
}

/// Identifies callers from their TLS client certificates and, with webhook authentication,
/// their bearer tokens.
#[derive(Clone)]
pub struct Authenticator {
    clients: Option<Arc<dyn ClientCertVerifier>>,
    anonymous: bool,
    tokens: Option<Arc<TokenAuthenticator>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("client_cas", &self.clients.is_some())
            .field("anonymous", &self.anonymous)
            .field("token_webhook", &self.tokens.is_some())
            .finish()
    }
}

impl Authenticator {
    /// Certificates checked by `clients` (the client CAs), if any; anonymous requests let in
    /// when `anonymous`.
    pub fn new(clients: Option<Arc<dyn ClientCertVerifier>>, anonymous: bool) -> Self {
        Self {
            clients,
            anonymous,
            tokens: None,
        }
    }

    /// Bearer tokens checked by `tokens` too (webhook authentication).
    pub fn with_tokens(mut self, tokens: Arc<TokenAuthenticator>) -> Self {
        self.tokens = Some(tokens);
        self
    }

    /// The user of a request whose connection presented `peer` and whose `Authorization`
    /// header is `authorization`: certificate, then bearer token, then anonymous.
    pub async fn authenticate_request(
        &self,
        peer: &[CertificateDer<'_>],
        authorization: Option<&[u8]>,
    ) -> Result<User, AuthnError> {
        let mut error = match self.certificate_at(peer, UnixTime::now()) {
            Ok(Some(user)) => return Ok(user),
            Ok(None) => None,
            Err(e) => Some(e),
        };
        if let (Some(tokens), Some(token)) = (&self.tokens, authorization.and_then(bearer_token)) {
            match tokens.authenticate(token).await {
                Ok(Some(user)) => return Ok(user),
                Ok(None) => error = Some(AuthnError::InvalidToken),
                Err(e) => error = Some(AuthnError::TokenReview(e.to_string())),
            }
        }
        self.anonymous_or(error)
    }

    /// The user of a request whose connection presented `peer` (leaf first), now.
    #[cfg(test)]
    pub fn authenticate(&self, peer: &[CertificateDer<'_>]) -> Result<User, AuthnError> {
        self.authenticate_at(peer, UnixTime::now())
    }

    /// [`Authenticator::authenticate`] at time `now`.
    #[cfg(test)]
    pub fn authenticate_at(
        &self,
        peer: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<User, AuthnError> {
        match self.certificate_at(peer, now) {
            Ok(Some(user)) => Ok(user),
            Ok(None) => self.anonymous_or(None),
            Err(e) => self.anonymous_or(Some(e)),
        }
    }

    /// The user a verified client certificate names, if one was presented and has a name.
    fn certificate_at(
        &self,
        peer: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<Option<User>, AuthnError> {
        let (Some(clients), Some((leaf, intermediates))) = (&self.clients, peer.split_first())
        else {
            return Ok(None);
        };
        clients
            .verify_client_cert(leaf, intermediates, now)
            .map_err(|e| match pem::unsupported_version(leaf) {
                // webpki's own words for it are `Other(OtherError(UnsupportedCertVersion))`.
                Some(reason) => AuthnError::BadCertificate(format!(
                    "the client certificate{} is {reason}",
                    pem::info(leaf)
                        .ok()
                        .and_then(|i| i.common_name)
                        .map(|cn| format!(" (CN={cn})"))
                        .unwrap_or_default()
                )),
                None => AuthnError::BadCertificate(e.to_string()),
            })?;
        let subject = pem::info(leaf).map_err(AuthnError::BadCertificate)?;
        Ok(subject.common_name.filter(|n| !n.is_empty()).map(|name| {
            let mut groups = subject.organizations;
            groups.push(AUTHENTICATED_GROUP.into());
            User { name, groups }
        }))
    }

    /// After no credential authenticated: the first error, else anonymous if allowed.
    fn anonymous_or(&self, error: Option<AuthnError>) -> Result<User, AuthnError> {
        match error {
            Some(e) => Err(e),
            None if self.anonymous => Ok(User::anonymous()),
            None => Err(AuthnError::NoCredentials),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header as Go's bearer-token authenticator
/// reads it: the scheme case-insensitive, one space before the token, anything after a
/// further space ignored; none for another scheme or an empty token.
pub fn bearer_token(header: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(header).ok()?.trim();
    let mut parts = header.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A request as the authorizer sees it (resource `nodes`, this node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// The API verb of the method (`get`, `create`, `update`, `patch`, `delete`; "" for
    /// others, as in Go).
    pub verb: &'static str,
    /// The subresources to try in order: fine-grained first, then `proxy`.
    pub subresources: Vec<&'static str>,
}

/// The attributes of a `method` request for `path`.
pub fn attributes(method: &Method, path: &str) -> Attributes {
    let verb = match *method {
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let only = |s: &'static str| vec![s];
    let or_proxy = |s: &'static str| vec![s, "proxy"];
    let subresources = if is_subpath(path, "/stats/") {
        only("stats")
    } else if is_subpath(path, "/metrics") {
        only("metrics")
    } else if is_subpath(path, "/logs/") {
        only("log")
    } else if is_subpath(path, "/checkpoint/") {
        only("checkpoint")
    } else if is_subpath(path, "/pods")
        || is_subpath(path, "/runningpods/")
        || is_subpath(path, "/debug/pods")
    {
        or_proxy("pods")
    } else if is_subpath(path, "/healthz") {
        or_proxy("healthz")
    } else if is_subpath(path, "/configz") {
        or_proxy("configz")
    } else {
        only("proxy")
    };
    Attributes { verb, subresources }
}

/// A request that is not allowed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Denied {
    /// 403 with Go's `Forbidden (user=…, verb=…, resource=nodes, subresource(s)=[…])`.
    #[error("{0}")]
    Forbidden(String),
    /// 500 with Go's `Authorization error (user=…, verb=…, resource=nodes, subresource=…)`:
    /// the decision could not be had; `cause` is for the log.
    #[error("{message}")]
    Error {
        /// The response's text.
        message: String,
        /// Why.
        cause: String,
    },
}

/// Decides what authenticated callers may do.
#[derive(Clone, Debug)]
pub enum Authorizer {
    /// Everything (`authorization.mode: AlwaysAllow`).
    AlwaysAllow,
    /// What a rule of the policy grants (`authorization.mode: Static`).
    Static(Policy),
    /// What the API server's SubjectAccessReviews allow (`authorization.mode: Webhook`).
    Webhook(Arc<WebhookAuthorizer>),
}

impl Authorizer {
    /// Allowed, or why not in the Go kubelet's words. The subresources are asked in order
    /// (fine-grained first, then `proxy`) until one is allowed; an error stops at once.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<(), Denied> {
        let allowed = match self {
            Authorizer::AlwaysAllow => true,
            Authorizer::Static(policy) => attrs
                .subresources
                .iter()
                .any(|sub| policy.allows(user, attrs.verb, sub)),
            Authorizer::Webhook(webhook) => {
                let mut allowed = false;
                for sub in &attrs.subresources {
                    match webhook.allows(user, attrs.verb, sub).await {
                        Ok(true) => {
                            allowed = true;
                            break;
                        }
                        Ok(false) => {}
                        Err(e) => {
                            return Err(Denied::Error {
                                message: format!(
                                    "Authorization error (user={}, verb={}, resource=nodes, \
                                     subresource={sub})",
                                    user.name, attrs.verb
                                ),
                                cause: e.to_string(),
                            });
                        }
                    }
                }
                allowed
            }
        };
        if allowed {
            return Ok(());
        }
        Err(Denied::Forbidden(format!(
            "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])",
            user.name,
            attrs.verb,
            attrs.subresources.join(" ")
        )))
    }
}

/// The subresources a policy may name.
const SUBRESOURCES: &[&str] = &[
    "proxy",
    "pods",
    "healthz",
    "configz",
    "stats",
    "metrics",
    "log",
    "checkpoint",
];
/// The verbs a policy may name.
const VERBS: &[&str] = &["get", "create", "update", "patch", "delete"];

/// The rules of `authorization.mode: Static` (ferrolet's own, from
/// `--authorization-policy-file`, YAML or JSON):
///
/// ```yaml
/// rules:
/// - groups: [system:masters]        # or users: [alice]; "*" in users = anyone
///   verbs: ["*"]                    # get, create, update, patch, delete
///   subresources: ["*"]             # nodes/<subresource>: pods, healthz, configz, stats,
///                                   # metrics, log, checkpoint, proxy (everything else)
/// - users: [prometheus]
///   verbs: [get]
///   subresources: [metrics, healthz]
/// ```
///
/// A request is allowed when one rule names its user (or one of its groups), its verb and
/// one of its subresources; nothing else is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The rules, any of which may allow a request.
    pub rules: Vec<Rule>,
}

/// One grant of a [`Policy`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// User names it applies to; `*` = any (anonymous included).
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups it applies to.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Verbs it allows; `*` = all.
    pub verbs: Vec<String>,
    /// Subresources of `nodes` it allows; `*` = all.
    pub subresources: Vec<String>,
}

/// A policy file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// It cannot be read.
    #[error("reading the authorization policy {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// It is not a policy.
    #[error("the authorization policy {path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl Policy {
    /// Reads and checks the policy at `path`. Blocking.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::parse(&text).map_err(|reason| PolicyError::Invalid {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses and checks a policy (YAML or JSON).
    pub fn parse(text: &str) -> Result<Policy, String> {
        let policy: Policy = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        for (i, rule) in policy.rules.iter().enumerate() {
            let bad = |what: String| Err(format!("rules[{i}]: {what}"));
            if rule.users.is_empty() && rule.groups.is_empty() {
                return bad("names no users and no groups".into());
            }
            if rule.verbs.is_empty() {
                return bad("names no verbs".into());
            }
            if rule.subresources.is_empty() {
                return bad("names no subresources".into());
            }
            if let Some(v) = rule
                .verbs
                .iter()
                .find(|v| *v != "*" && !VERBS.contains(&v.as_str()))
            {
                return bad(format!(
                    "unknown verb {v:?} (want one of {VERBS:?} or \"*\")"
                ));
            }
            if let Some(s) = rule
                .subresources
                .iter()
                .find(|s| *s != "*" && !SUBRESOURCES.contains(&s.as_str()))
            {
                return bad(format!(
                    "unknown subresource {s:?} (want one of {SUBRESOURCES:?} or \"*\")"
                ));
            }
        }
        Ok(policy)
    }

    /// Whether a rule lets `user` do `verb` on `nodes/<subresource>`.
    pub fn allows(&self, user: &User, verb: &str, subresource: &str) -> bool {
        let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        self.rules.iter().any(|r| {
            let who = r.users.iter().any(|u| u == "*" || *u == user.name)
                || r.groups.iter().any(|g| user.groups.contains(g));
            who && any(&r.verbs, verb) && any(&r.subresources, subresource)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, Issuer, KeyPair,
    };

    /// A CA (its PEM) and its issuer.
    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(params, key))
    }

    /// A client certificate from `issuer` with `cn` (none if empty) and organizations.
    fn client(
        issuer: &Issuer<'_, KeyPair>,
        cn: &str,
        orgs: &[&str],
        eku: ExtendedKeyUsagePurpose,
    ) -> CertificateDer<'static> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        for (i, o) in orgs.iter().enumerate() {
            // rcgen keeps one value per attribute type; the same OID under another key is a
            // second O.
            let ty = if i == 0 {
                DnType::OrganizationName
            } else {
                DnType::CustomDnType(vec![2, 5, 4, 10])
            };
            params.distinguished_name.push(ty, *o);
        }
        if !cn.is_empty() {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.extended_key_usages = vec![eku];
        let key = KeyPair::generate().unwrap();
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    fn verifier(ca_pem: &str) -> Arc<dyn ClientCertVerifier> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, ca_pem).unwrap();
        super::super::tls::client_verifier(&path).unwrap()
    }

    #[test]
    fn client_certificates_name_users_and_groups() {
        let (ca_cert, issuer) = ca("clients");
        let authn = Authenticator::new(Some(verifier(&ca_cert)), false);
        let cert = client(
            &issuer,
            "alice",
            &["system:masters", "ops"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let user = authn.authenticate(&[cert]).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, ["system:masters", "ops", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn anonymous_only_when_allowed() {
        let (ca_cert, _) = ca("clients");
        let strict = Authenticator::new(Some(verifier(&ca_cert)), false);
        assert_eq!(strict.authenticate(&[]), Err(AuthnError::NoCredentials));
        let open = Authenticator::new(Some(verifier(&ca_cert)), true);
        assert_eq!(open.authenticate(&[]).unwrap(), User::anonymous());
        // Without client CAs, certificates are not asked for: everyone is anonymous.
        let no_cas = Authenticator::new(None, false);
        assert_eq!(no_cas.authenticate(&[]), Err(AuthnError::NoCredentials));
    }

    #[test]
    fn certificates_that_do_not_verify_are_refused_even_with_anonymous_on() {
        let (ca_cert, _) = ca("clients");
        let (_, other) = ca("someone else");
        let stranger = client(&other, "mallory", &[], ExtendedKeyUsagePurpose::ClientAuth);
        for anonymous in [false, true] {
            let authn = Authenticator::new(Some(verifier(&ca_cert)), anonymous);
            assert!(matches!(
                authn.authenticate(std::slice::from_ref(&stranger)),
                Err(AuthnError::BadCertificate(_))
            ));
        }
        // A server certificate is not a client certificate.
        let (ca_cert, issuer) = ca("clients");
        let server = client(&issuer, "web", &[], ExtendedKeyUsagePurpose::ServerAuth);
        let authn = Authenticator::new(Some(verifier(&ca_cert)), false);
        assert!(matches!(
            authn.authenticate(&[server]),
            Err(AuthnError::BadCertificate(_))
        ));
        // Garbage.
        assert!(matches!(
            authn.authenticate(&[CertificateDer::from(vec![0x30, 0x00])]),
            Err(AuthnError::BadCertificate(_))
        ));
    }

    /// openssl's certificates: a v3 one from a v1 CA (webpki takes v1 trust anchors) names its
    /// user; a v1 one is refused saying why, naming its CN.
    #[test]
    fn openssl_certificates_v1_refused_with_the_reason() {
        use crate::certificate::fixtures::{self, der};
        let authn = Authenticator::new(Some(verifier(fixtures::CA_V1)), false);
        let user = authn.authenticate(&[der(fixtures::CLIENT_V3)]).unwrap();
        assert_eq!(user.name, "system:node:n1");
        assert_eq!(user.groups, ["system:nodes", AUTHENTICATED_GROUP]);

        let authn = Authenticator::new(Some(verifier(fixtures::CA_V3)), true);
        let err = authn.authenticate(&[der(fixtures::CLIENT_V1)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "verifying the client certificate: the client certificate (CN=alice) is an X.509 v1 \
             certificate; rustls accepts only v3 end-entity certificates: reissue it with \
             extensions (openssl x509 -req … -extfile …)"
        );
    }

    #[test]
    fn expired_certificates_are_refused() {
        let (ca_cert, issuer) = ca("clients");
        let cert = client(&issuer, "alice", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let authn = Authenticator::new(Some(verifier(&ca_cert)), false);
        // rcgen's default validity ends in 4096.
        let far = UnixTime::since_unix_epoch(std::time::Duration::from_secs(70_000_000_000));
        assert!(matches!(
            authn.authenticate_at(&[cert], far),
            Err(AuthnError::BadCertificate(_))
        ));
    }

    #[test]
    fn no_common_name_is_no_credential() {
        let (ca_cert, issuer) = ca("clients");
        let cert = client(&issuer, "", &["ops"], ExtendedKeyUsagePurpose::ClientAuth);
        let strict = Authenticator::new(Some(verifier(&ca_cert)), false);
        assert_eq!(
            strict.authenticate(std::slice::from_ref(&cert)),
            Err(AuthnError::NoCredentials)
        );
        let open = Authenticator::new(Some(verifier(&ca_cert)), true);
        assert_eq!(open.authenticate(&[cert]).unwrap(), User::anonymous());
    }

    #[test]
    fn attributes_follow_go_s_paths() {
        let a = |m: Method, p: &str| attributes(&m, p);
        assert_eq!(
            a(Method::GET, "/pods"),
            Attributes {
                verb: "get",
                subresources: vec!["pods", "proxy"]
            }
        );
        assert_eq!(a(Method::GET, "/pods/").subresources, ["pods", "proxy"]);
        assert_eq!(a(Method::GET, "/podsx").subresources, ["proxy"]);
        assert_eq!(
            a(Method::GET, "/debug/pods/ns/p/timeline").subresources,
            ["pods", "proxy"]
        );
        assert_eq!(a(Method::GET, "/debug/flags/v").subresources, ["proxy"]);
        assert_eq!(
            a(Method::GET, "/runningpods/").subresources,
            ["pods", "proxy"]
        );
        assert_eq!(
            a(Method::GET, "/healthz/ping").subresources,
            ["healthz", "proxy"]
        );
        assert_eq!(
            a(Method::GET, "/configz").subresources,
            ["configz", "proxy"]
        );
        assert_eq!(a(Method::GET, "/stats/summary").subresources, ["stats"]);
        assert_eq!(a(Method::GET, "/stats").subresources, ["stats"]);
        assert_eq!(a(Method::GET, "/metrics").subresources, ["metrics"]);
        assert_eq!(a(Method::GET, "/metrics/probes").subresources, ["metrics"]);
        assert_eq!(a(Method::GET, "/logs/syslog").subresources, ["log"]);
        assert_eq!(
            a(Method::GET, "/containerLogs/ns/p/c").subresources,
            ["proxy"]
        );
        let exec = a(Method::POST, "/exec/ns/p/c");
        assert_eq!((exec.verb, exec.subresources), ("create", vec!["proxy"]));
        assert_eq!(a(Method::PUT, "/x").verb, "update");
        assert_eq!(a(Method::PATCH, "/x").verb, "patch");
        assert_eq!(a(Method::DELETE, "/x").verb, "delete");
        assert_eq!(a(Method::HEAD, "/x").verb, "");
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[tokio::test]
    async fn always_allow_allows() {
        let attrs = attributes(&Method::DELETE, "/anything");
        assert!(
            Authorizer::AlwaysAllow
                .authorize(&User::anonymous(), &attrs)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn static_policy() {
        let policy = Policy::parse(
            "rules:\n\
             - groups: [system:masters]\n  verbs: ['*']\n  subresources: ['*']\n\
             - users: [prometheus]\n  verbs: [get]\n  subresources: [metrics, healthz]\n\
             - users: ['*']\n  verbs: [get]\n  subresources: [healthz]\n",
        )
        .unwrap();
        let authz = Authorizer::Static(policy);
        let get = |p: &str| attributes(&Method::GET, p);
        let admin = user("root", &["system:masters", AUTHENTICATED_GROUP]);
        let prom = user("prometheus", &[AUTHENTICATED_GROUP]);
        assert!(authz.authorize(&admin, &get("/pods")).await.is_ok());
        assert!(
            authz
                .authorize(&admin, &attributes(&Method::POST, "/exec/a/b/c"))
                .await
                .is_ok()
        );
        assert!(authz.authorize(&prom, &get("/metrics")).await.is_ok());
        assert!(authz.authorize(&prom, &get("/healthz")).await.is_ok());
        assert!(
            authz
                .authorize(&User::anonymous(), &get("/healthz"))
                .await
                .is_ok()
        );
        assert_eq!(
            authz.authorize(&prom, &get("/pods")).await,
            Err(Denied::Forbidden(
                "Forbidden (user=prometheus, verb=get, resource=nodes, subresource(s)=[pods proxy])"
                    .into()
            ))
        );
        assert_eq!(
            authz
                .authorize(&User::anonymous(), &get("/stats/summary"))
                .await
                .unwrap_err()
                .to_string(),
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[stats])"
        );
        // `proxy` is the fallback of the fine-grained paths.
        let proxy_only = Authorizer::Static(
            Policy::parse(
                r#"{"rules": [{"users": ["ops"], "verbs": ["get"], "subresources": ["proxy"]}]}"#,
            )
            .unwrap(),
        );
        let ops = user("ops", &[]);
        assert!(proxy_only.authorize(&ops, &get("/pods")).await.is_ok());
        assert!(proxy_only.authorize(&ops, &get("/configz")).await.is_ok());
        assert!(proxy_only.authorize(&ops, &get("/metrics")).await.is_err());
    }

    #[test]
    fn bearer_tokens_as_go_reads_them() {
        for (header, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("  Bearer abc  ", Some("abc")),
            ("Bearer abc extra", Some("abc")),
            ("Bearer ", None),
            ("Bearer", None),
            ("Bearer  abc", None),
            ("Basic abc", None),
            ("", None),
        ] {
            assert_eq!(bearer_token(header.as_bytes()), want, "{header:?}");
        }
        assert_eq!(bearer_token(b"Bearer \xff"), None);
    }

    fn token_authn(clients: Option<Arc<dyn ClientCertVerifier>>, anonymous: bool) -> Authenticator {
        let mut reviews = super::super::webhook::tests::Reviews::default();
        reviews.tokens.insert("good".into(), user("bob", &["dev"]));
        let tokens = TokenAuthenticator::new(Arc::new(reviews), std::time::Duration::from_secs(60));
        Authenticator::new(clients, anonymous).with_tokens(Arc::new(tokens))
    }

    #[tokio::test]
    async fn certificate_then_token_then_anonymous() {
        let (ca_cert, issuer) = ca("clients");
        let alice = client(&issuer, "alice", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let (_, other) = ca("someone else");
        let stranger = client(&other, "mallory", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let good = Some(&b"Bearer good"[..]);
        let bad = Some(&b"Bearer bad"[..]);
        for anonymous in [false, true] {
            let authn = token_authn(Some(verifier(&ca_cert)), anonymous);
            let who = |r: Result<User, AuthnError>| r.map(|u| u.name);
            // The certificate comes first.
            let cert = std::slice::from_ref(&alice);
            assert_eq!(
                who(authn.authenticate_request(cert, good).await),
                Ok("alice".into())
            );
            // Then the token, whose user gains system:authenticated.
            let bob = authn.authenticate_request(&[], good).await.unwrap();
            assert_eq!(bob.groups, ["dev", AUTHENTICATED_GROUP]);
            // A bad certificate still lets a good token in, as Go's union does.
            let strange = std::slice::from_ref(&stranger);
            assert_eq!(
                who(authn.authenticate_request(strange, good).await),
                Ok("bob".into())
            );
            // A rejected token is 401 even with anonymous requests on.
            assert_eq!(
                authn.authenticate_request(&[], bad).await,
                Err(AuthnError::InvalidToken)
            );
            assert!(matches!(
                authn.authenticate_request(strange, None).await,
                Err(AuthnError::BadCertificate(_))
            ));
            // No credential at all (another scheme is none): anonymous, if allowed.
            let basic = Some(&b"Basic good"[..]);
            let none = authn.authenticate_request(&[], basic).await;
            if anonymous {
                assert_eq!(none, Ok(User::anonymous()));
            } else {
                assert_eq!(none, Err(AuthnError::NoCredentials));
            }
        }
        // Without webhook authentication a token is no credential.
        let plain = Authenticator::new(None, true);
        assert_eq!(
            plain.authenticate_request(&[], good).await,
            Ok(User::anonymous())
        );
    }

    #[tokio::test]
    async fn webhook_authorization_falls_back_to_proxy() {
        use super::super::webhook::tests::Reviews;
        let mut reviews = Reviews::default();
        for (u, sub) in [("ops", "proxy"), ("prom", "metrics"), ("dash", "pods")] {
            reviews.allowed.push((u.into(), "get".into(), sub.into()));
        }
        reviews.failing.push("broken".into());
        let webhook = WebhookAuthorizer::new(
            Arc::new(reviews),
            "node-a",
            std::time::Duration::from_secs(300),
            std::time::Duration::from_secs(30),
        );
        let authz = Authorizer::Webhook(Arc::new(webhook));
        let get = |p: &str| attributes(&Method::GET, p);
        let ops = user("ops", &[]);
        assert!(
            authz.authorize(&ops, &get("/pods")).await.is_ok(),
            "pods, then proxy"
        );
        assert!(
            authz
                .authorize(&ops, &get("/containerLogs/a/b/c"))
                .await
                .is_ok()
        );
        assert_eq!(
            authz.authorize(&ops, &get("/metrics")).await,
            Err(Denied::Forbidden(
                "Forbidden (user=ops, verb=get, resource=nodes, subresource(s)=[metrics])".into()
            ))
        );
        let prom = user("prom", &[]);
        assert!(
            authz
                .authorize(&prom, &get("/metrics/cadvisor"))
                .await
                .is_ok()
        );
        assert!(authz.authorize(&prom, &get("/pods")).await.is_err());
        let dash = user("dash", &[]);
        assert!(authz.authorize(&dash, &get("/runningpods/")).await.is_ok());
        match authz.authorize(&user("broken", &[]), &get("/pods")).await {
            Err(Denied::Error { message, .. }) => assert_eq!(
                message,
                "Authorization error (user=broken, verb=get, resource=nodes, subresource=pods)"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_policies_are_refused() {
        for (text, want) in [
            (
                "rules: [{verbs: [get], subresources: [pods]}]",
                "rules[0]: names no users",
            ),
            (
                "rules: [{users: [a], verbs: [], subresources: [pods]}]",
                "no verbs",
            ),
            (
                "rules: [{users: [a], verbs: [get], subresources: []}]",
                "no subresources",
            ),
            (
                "rules: [{users: [a], verbs: [list], subresources: [pods]}]",
                "unknown verb \"list\"",
            ),
            (
                "rules: [{users: [a], verbs: [get], subresources: [secrets]}]",
                "unknown subresource",
            ),
            (
                "rules: [{users: [a], verbs: [get], subresources: [pods], extra: 1}]",
                "unknown field",
            ),
            ("rulez: []", "unknown field"),
        ] {
            let err = Policy::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
        assert!(matches!(
            Policy::load(Path::new("/nonexistent/policy.yaml")),
            Err(PolicyError::Read { .. })
        ));
    }
}
