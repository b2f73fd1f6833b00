//! The secure kubelet API's settings (`enableServer`, `port`, `tlsCertFile`,
//! `tlsPrivateKeyFile`, `authentication`, `authorization`) with the Go kubelet's names, and
//! where standalone mode needs it our own defaults: webhook authentication off and
//! `AlwaysAllow` authorization, since there may be no API server to ask. The webhook modes
//! need `--kubeconfig`.

use std::path::PathBuf;
use std::time::Duration;

use super::file::invalid;
use super::{Config, ConfigError};

/// `authorization.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthorizationMode {
    /// Every authenticated request is allowed (ours, and the Go kubelet flag's, default).
    #[default]
    AlwaysAllow,
    /// A SubjectAccessReview per request, to the API server (needs `--kubeconfig`).
    Webhook,
    /// ferrolet's own: rules from `--authorization-policy-file`.
    Static,
}

impl AuthorizationMode {
    /// The mode named `s`, spelled as in the configuration.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "AlwaysAllow" => Some(Self::AlwaysAllow),
            "Webhook" => Some(Self::Webhook),
            "Static" => Some(Self::Static),
            _ => None,
        }
    }

    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlwaysAllow => "AlwaysAllow",
            Self::Webhook => "Webhook",
            Self::Static => "Static",
        }
    }
}

/// Who may call the secure API (`authentication`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authentication {
    /// CA bundle that signs client certificates (`authentication.x509.clientCAFile`); none =
    /// client certificates are not asked for.
    pub client_ca_file: Option<PathBuf>,
    /// Requests without credentials pass as `system:anonymous`
    /// (`authentication.anonymous.enabled`, false).
    pub anonymous: bool,
    /// Bearer tokens checked by TokenReview (`authentication.webhook.enabled`; false unless
    /// set, since it needs `--kubeconfig`).
    pub webhook: bool,
    /// How long a token's review is reused (`authentication.webhook.cacheTTL`, 2m).
    pub webhook_cache_ttl: Duration,
}

impl Default for Authentication {
    fn default() -> Self {
        Self {
            client_ca_file: None,
            anonymous: false,
            webhook: false,
            webhook_cache_ttl: Duration::from_secs(120),
        }
    }
}

/// What callers may do (`authorization`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    /// `authorization.mode` (`AlwaysAllow`).
    pub mode: AuthorizationMode,
    /// The rules of mode `Static` (`--authorization-policy-file`, ferrolet's own).
    pub policy_file: Option<PathBuf>,
    /// How long an allowed review is reused (`authorization.webhook.cacheAuthorizedTTL`,
    /// 5m).
    pub webhook_cache_authorized_ttl: Duration,
    /// How long a denied review is reused (`authorization.webhook.cacheUnauthorizedTTL`,
    /// 30s).
    pub webhook_cache_unauthorized_ttl: Duration,
}

impl Default for Authorization {
    fn default() -> Self {
        Self {
            mode: AuthorizationMode::AlwaysAllow,
            policy_file: None,
            webhook_cache_authorized_ttl: Duration::from_secs(300),
            webhook_cache_unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

/// The start-up checks of the secure API's settings.
pub(super) fn check(c: &Config) -> Result<(), ConfigError> {
    if !c.enable_server {
        return Ok(());
    }
    if c.port == 0 {
        return Err(invalid(
            "port (--port)",
            "0 must be between 1 and 65535, inclusive",
        ));
    }
    match (&c.tls_cert_file, &c.tls_private_key_file) {
        (Some(_), None) => {
            return Err(invalid(
                "tlsPrivateKeyFile (--tls-private-key-file)",
                "must be set when tlsCertFile is",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "tlsCertFile (--tls-cert-file)",
                "must be set when tlsPrivateKeyFile is",
            ));
        }
        _ => {}
    }
    // Go's words when it builds the authenticator without an API client.
    if c.authentication.webhook && !c.api_server_mode() {
        return Err(invalid(
            "authentication.webhook.enabled (--authentication-token-webhook)",
            "no client provided, cannot use webhook authentication (it needs --kubeconfig)",
        ));
    }
    match (c.authorization.mode, &c.authorization.policy_file) {
        (AuthorizationMode::Webhook, _) if !c.api_server_mode() => Err(invalid(
            "authorization.mode (--authorization-mode)",
            "no client provided, cannot use webhook authorization (it needs --kubeconfig)",
        )),
        (AuthorizationMode::Static, None) => Err(invalid(
            "authorization.mode (--authorization-mode)",
            "Static needs --authorization-policy-file",
        )),
        (AuthorizationMode::AlwaysAllow | AuthorizationMode::Webhook, Some(_)) => Err(invalid(
            "--authorization-policy-file",
            "is only read with authorization.mode Static",
        )),
        _ => Ok(()),
    }
}

impl Config {
    /// Where the self-signed serving certificate is kept: `--cert-dir`, else
    /// `<root-dir>/pki`.
    pub fn cert_dir(&self) -> PathBuf {
        self.cert_dir
            .clone()
            .unwrap_or_else(|| self.root_dir.join("pki"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::Flags;
    use clap::Parser;
    use std::io::Write;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn load(yaml: Option<&str>, args: &[&str]) -> Result<(Config, Vec<String>), ConfigError> {
        let mut all = vec![
            "ferrolet".to_string(),
            "--hostname-override=node-a".to_string(),
        ];
        let file = yaml.map(|y| {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(format!("{HEAD}{y}").as_bytes()).unwrap();
            f
        });
        if let Some(f) = &file {
            all.push(format!("--config={}", f.path().display()));
        }
        all.extend(args.iter().map(|a| a.to_string()));
        Config::load(&Flags::try_parse_from(all).unwrap())
    }

    fn refused(r: Result<(Config, Vec<String>), ConfigError>) -> (String, String) {
        match r {
            Err(ConfigError::Invalid { field, reason }) => (field, reason),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let (c, _) = load(None, &[]).unwrap();
        assert!(c.enable_server);
        assert_eq!(c.port, 10250);
        assert_eq!(c.read_only_port, 0, "the read-only port is off");
        assert_eq!((&c.tls_cert_file, &c.tls_private_key_file), (&None, &None));
        assert_eq!(c.authentication, Authentication::default());
        assert!(!c.authentication.anonymous && !c.authentication.webhook);
        assert_eq!(c.authorization.mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(c.cert_dir(), c.root_dir.join("pki"));
    }

    #[test]
    fn from_the_file() {
        let yaml = "port: 10260\ntlsCertFile: /etc/k/tls.crt\ntlsPrivateKeyFile: /etc/k/tls.key\n\
                    authentication:\n  x509: {clientCAFile: /etc/k/ca.crt}\n  anonymous: {enabled: true}\n  \
                    webhook: {enabled: false, cacheTTL: 2m0s}\n  oidc: {issuer: x}\n\
                    authorization:\n  mode: AlwaysAllow\n  webhook: {cacheAuthorizedTTL: 5m0s}\n";
        let (c, warnings) = load(Some(yaml), &[]).unwrap();
        assert_eq!(c.port, 10260);
        assert_eq!(c.tls_cert_file, Some("/etc/k/tls.crt".into()));
        assert_eq!(c.tls_private_key_file, Some("/etc/k/tls.key".into()));
        assert_eq!(
            c.authentication.client_ca_file,
            Some("/etc/k/ca.crt".into())
        );
        assert!(c.authentication.anonymous);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("unknown field \"authentication.oidc\""),
            "{warnings:?}"
        );
        let yaml = "authentication: {webhook: {enabled: true, cacheTTL: 10s}}\n\
                    authorization: {mode: Webhook, webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 5s}}\n";
        let (c, warnings) = load(Some(yaml), &["--kubeconfig=/k.conf"]).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(c.authentication.webhook);
        assert_eq!(c.authentication.webhook_cache_ttl, Duration::from_secs(10));
        assert_eq!(c.authorization.mode, AuthorizationMode::Webhook);
        assert_eq!(
            c.authorization.webhook_cache_authorized_ttl,
            Duration::from_secs(60)
        );
        assert_eq!(
            c.authorization.webhook_cache_unauthorized_ttl,
            Duration::from_secs(5)
        );
        let (c, _) = load(Some("enableServer: false\nport: 0\n"), &[]).unwrap();
        assert!(!c.enable_server);
    }

    #[test]
    fn flags_win() {
        let yaml = "authentication: {anonymous: {enabled: true}, x509: {clientCAFile: /a}}\n";
        let (c, _) = load(
            Some(yaml),
            &[
                "--port=12345",
                "--anonymous-auth=false",
                "--client-ca-file=/b",
                "--tls-cert-file=/c.crt",
                "--tls-private-key-file=/c.key",
                "--cert-dir=/pki",
            ],
        )
        .unwrap();
        assert_eq!(c.port, 12345);
        assert!(!c.authentication.anonymous);
        assert_eq!(c.authentication.client_ca_file, Some("/b".into()));
        assert_eq!(c.tls_cert_file, Some("/c.crt".into()));
        assert_eq!(c.cert_dir(), PathBuf::from("/pki"));
        let (c, _) = load(None, &["--anonymous-auth"]).unwrap();
        assert!(
            c.authentication.anonymous,
            "a bare bool flag is true, as in Go"
        );
        let (c, _) = load(
            None,
            &[
                "--authorization-mode=Static",
                "--authorization-policy-file=/p.yaml",
            ],
        )
        .unwrap();
        assert_eq!(c.authorization.mode, AuthorizationMode::Static);
        assert_eq!(c.authorization.policy_file, Some("/p.yaml".into()));
        // Go's bool flags take their value only with `=`.
        assert!(Flags::try_parse_from(["ferrolet", "--anonymous-auth", "false"]).is_err());
    }

    #[test]
    fn refusals_name_the_field() {
        let (field, reason) = refused(load(
            Some("authentication: {webhook: {enabled: true}}\n"),
            &[],
        ));
        assert_eq!(
            field,
            "authentication.webhook.enabled (--authentication-token-webhook)"
        );
        assert!(
            reason.starts_with("no client provided, cannot use webhook authentication"),
            "{reason}"
        );
        let (field, reason) = refused(load(Some("authorization: {mode: Webhook}\n"), &[]));
        assert_eq!(field, "authorization.mode (--authorization-mode)");
        assert!(
            reason.starts_with("no client provided, cannot use webhook authorization"),
            "{reason}"
        );
        let (field, _) = refused(load(None, &["--authentication-token-webhook"]));
        assert!(
            field.starts_with("authentication.webhook.enabled"),
            "{field}"
        );
        let (field, _) = refused(load(None, &["--authorization-mode=Webhook"]));
        assert!(field.starts_with("authorization.mode"), "{field}");

        for (yaml, args, want) in [
            (
                "authorization: {mode: RBAC}\n",
                &[][..],
                "authorization.mode",
            ),
            (
                "",
                &["--authorization-mode=Node"][..],
                "authorization.mode (--authorization-mode)",
            ),
            ("port: 0\n", &[], "port (--port)"),
            ("port: 70000\n", &[], "port"),
            (
                "tlsCertFile: /a.crt\n",
                &[],
                "tlsPrivateKeyFile (--tls-private-key-file)",
            ),
            (
                "tlsPrivateKeyFile: /a.key\n",
                &[],
                "tlsCertFile (--tls-cert-file)",
            ),
            (
                "authorization: {mode: Static}\n",
                &[],
                "authorization.mode (--authorization-mode)",
            ),
            (
                "",
                &["--authorization-policy-file=/p"],
                "--authorization-policy-file",
            ),
            (
                "authentication: {x509: /ca.crt}\n",
                &[],
                "authentication.x509",
            ),
            (
                "authentication: {anonymous: {enabled: maybe}}\n",
                &[],
                "authentication.anonymous.enabled",
            ),
            ("authentication: [1]\n", &[], "authentication"),
            ("enableServer: yes please\n", &[], "enableServer"),
        ] {
            let (field, _) = refused(load(Some(yaml), args));
            assert_eq!(field, want, "{yaml} {args:?}");
        }
    }
}
