//! The cluster's checks: the certificate files the kubelet reads (serving pair, client CA,
//! the kubeconfig's client certificate) readable and unexpired, and the clock against the API
//! server's (a skewed clock makes fresh certificates "not yet valid").

use std::path::Path;
use std::time::Duration;

use super::Finding;
use crate::certificate::{kubeconfig, pem};
use crate::config::Config;

/// Certificates expiring sooner than this are warned about.
const EXPIRY_WARNING: i64 = 30 * 24 * 3600;
/// Skew past which TLS starts failing in practice.
const SKEW_FAIL: i64 = 60;
/// Skew worth a warning.
const SKEW_WARN: i64 = 5;

/// The certificate and API server checks.
pub async fn checks(config: &Config) -> Vec<Finding> {
    let config = config.clone();
    let blocking = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        if let Some(cert) = &config.tls_cert_file {
            out.push(certificate_file("serving certificate", cert));
        }
        if let Some(ca) = &config.authentication.client_ca_file {
            out.push(certificate_file("client CA", ca));
        }
        (out, config)
    })
    .await;
    let Ok((mut out, config)) = blocking else {
        return vec![Finding::fail("Certificates", "the check's task died")];
    };
    let Some(path) = &config.kubeconfig else {
        out.push(Finding::pass(
            "Kubeconfig",
            "standalone mode (no --kubeconfig): no API server to check",
        ));
        return out;
    };
    let path = if path.exists() {
        out.push(kubeconfig_credentials(path).await);
        path.clone()
    } else if let Some(boot) = config.bootstrap_kubeconfig.as_ref().filter(|b| b.exists()) {
        out.push(Finding::pass(
            "Kubeconfig",
            format!(
                "{} does not exist yet: the TLS bootstrap will write it with {}",
                path.display(),
                boot.display()
            ),
        ));
        boot.clone()
    } else {
        out.push(Finding::fail(
            "Kubeconfig",
            format!(
                "{}: no such file, and no --bootstrap-kubeconfig to make it",
                path.display()
            ),
        ));
        return out;
    };
    out.push(clock_skew(&path).await);
    out
}

/// A PEM certificate file: readable, parsed, unexpired.
fn certificate_file(what: &str, path: &Path) -> Finding {
    let name = format!("Certificate-{}", path.display());
    let pem_bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return Finding::fail(name, format!("{what}: {}: {e}", path.display())),
    };
    expiry(name, what, &pem_bytes)
}

fn expiry(name: String, what: &str, pem_bytes: &[u8]) -> Finding {
    let now = pem::unix_now();
    match pem::unexpired(pem_bytes, now) {
        Ok(info) => {
            let until = date(info.not_after);
            let subject = info.common_name.unwrap_or_default();
            if info.not_before > now {
                Finding::fail(
                    name,
                    format!(
                        "{what} {subject:?} is not valid before {}",
                        date(info.not_before)
                    ),
                )
            } else if info.not_after - now < EXPIRY_WARNING {
                Finding::warn(name, format!("{what} {subject:?} expires soon: {until}"))
            } else {
                Finding::pass(name, format!("{what} {subject:?} valid until {until}"))
            }
        }
        Err(e) => Finding::fail(name, format!("{what}: {e}")),
    }
}

/// The kubeconfig's client credentials, as the kubelet's start-up judges them.
async fn kubeconfig_credentials(path: &Path) -> Finding {
    let name = format!("Kubeconfig-{}", path.display());
    let config = match kubeconfig::load(path).await {
        Ok(c) => c,
        Err(e) => return Finding::fail(name, e.to_string()),
    };
    let auth = config.auth_info;
    let checked =
        tokio::task::spawn_blocking(move || match kubeconfig::client_certificate(&auth) {
            Ok(Some(pem_bytes)) => Ok(Some(pem_bytes)),
            Ok(None) => kubeconfig::check_credentials(&auth, pem::unix_now()).map(|()| None),
            Err(e) => Err(e),
        })
        .await;
    match checked {
        Ok(Ok(Some(pem_bytes))) => expiry(name, "client certificate", &pem_bytes),
        Ok(Ok(None)) => Finding::pass(name, "token credentials"),
        Ok(Err(e)) => Finding::fail(name, e),
        Err(e) => Finding::fail(name, e.to_string()),
    }
}

/// The API server's `Date` against ours, from a `GET /version`.
async fn clock_skew(path: &Path) -> Finding {
    let client = match kubeconfig::load(path)
        .await
        .and_then(|c| kubeconfig::client(c, path))
    {
        Ok(c) => c,
        Err(e) => return Finding::fail("ClockSkew", e.to_string()),
    };
    let request = match hyper::Request::get("/version").body(Vec::<u8>::new().into()) {
        Ok(r) => r,
        Err(e) => return Finding::fail("ClockSkew", e.to_string()),
    };
    let response = match tokio::time::timeout(Duration::from_secs(10), client.send(request)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return Finding::fail("ClockSkew", format!("the API server did not answer: {e}"));
        }
        Err(_) => return Finding::fail("ClockSkew", "the API server did not answer in 10s"),
    };
    let ours = pem::unix_now();
    let theirs = response
        .headers()
        .get(hyper::header::DATE)
        .and_then(|d| d.to_str().ok())
        .and_then(|d| jiff::fmt::rfc2822::parse(d).ok())
        .map(|z| z.timestamp().as_second());
    let Some(theirs) = theirs else {
        return Finding::warn("ClockSkew", "the API server's answer has no Date header");
    };
    let skew = ours - theirs;
    let message = format!("this node's clock is {skew:+} s from the API server's");
    match skew.abs() {
        s if s > SKEW_FAIL => Finding::fail("ClockSkew", message),
        s if s > SKEW_WARN => Finding::warn("ClockSkew", message),
        _ => Finding::pass("ClockSkew", message),
    }
}

/// A Unix time as an RFC 3339 date.
fn date(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| unix.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::check::Level;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    /// A self-signed certificate for `cn` valid from `from` to `to` (Unix seconds).
    fn cert(cn: &str, from: i64, to: i64) -> String {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.not_before = time::OffsetDateTime::from_unix_timestamp(from).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(to).unwrap();
        params
            .self_signed(&KeyPair::generate().unwrap())
            .unwrap()
            .pem()
    }

    #[test]
    fn certificates_pass_warn_and_fail_by_their_validity() {
        let now = pem::unix_now();
        let day = 24 * 3600;
        let check = |pem: &str| expiry("Certificate-x".into(), "client CA", pem.as_bytes());
        let good = check(&cert("kubernetes", now - day, now + 365 * day));
        assert_eq!(good.level, Level::Pass, "{good}");
        assert!(
            good.message
                .starts_with("client CA \"kubernetes\" valid until "),
            "{good}"
        );
        let soon = check(&cert("node", now - day, now + 10 * day));
        assert_eq!(soon.level, Level::Warn, "{soon}");
        assert!(soon.message.contains("expires soon"), "{soon}");
        let expired = check(&cert("old", now - 10 * day, now - day));
        assert_eq!(expired.level, Level::Fail, "{expired}");
        assert!(expired.message.contains("expired"), "{expired}");
        let early = check(&cert("skewed", now + day, now + 10 * day));
        assert_eq!(early.level, Level::Fail, "{early}");
        assert!(early.message.contains("is not valid before"), "{early}");
        assert_eq!(check("not a certificate").level, Level::Fail);
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let f = certificate_file("serving certificate", Path::new("/nonexistent/kubelet.crt"));
        assert_eq!(f.level, Level::Fail);
        assert_eq!(f.name, "Certificate-/nonexistent/kubelet.crt");
        assert!(
            f.message
                .starts_with("serving certificate: /nonexistent/kubelet.crt: "),
            "{f}"
        );
    }
}
