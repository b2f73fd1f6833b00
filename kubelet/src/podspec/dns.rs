//! The pod's DNS settings per `dnsPolicy` and its hostname and domain, as the Go kubelet's
//! `network/dns` package and `GeneratePodHostNameAndDomain` make them.
//!
//! - `Default`: the node's resolv.conf (`resolvConf`).
//! - `ClusterFirst` (the API default): `clusterDNS` as the only nameservers, searches
//!   `<ns>.svc.<domain> svc.<domain> <domain>` then the node's, `ndots:5`; without
//!   `clusterDNS`, or on the host network, it falls back to `Default`.
//! - `ClusterFirstWithHostNet`: `ClusterFirst` even on the host network.
//! - `None`: only the pod's `dnsConfig`.
//!
//! `dnsConfig` is merged into any of them, then the libc limits are applied.

use std::io::Read;
use std::net::IpAddr;
use std::path::Path;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption};

use super::{NodeContext, SpecError, host_network, identity, spec_of};
use crate::manifest::names::dns1123_label;
use crate::types::Pod;

/// Libc's limits (Go's `validation.MaxDNSNameservers`, expanded search limits).
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCH_PATHS: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;
/// Longer search domains make some resolvers abort (DNS-1123 subdomain maximum).
const MAX_SEARCH_DOMAIN: usize = 253;
/// The most of resolv.conf we read.
const MAX_RESOLV_CONF: u64 = 10 << 20;
/// Kernel hostnames: 63 characters (64 bytes with the NUL); FQDNs up to 64.
const HOSTNAME_MAX: usize = 63;
const FQDN_MAX: usize = 64;

/// How the pod resolves names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DnsType {
    /// `None`.
    None,
    /// `ClusterFirst`(`WithHostNet`).
    Cluster,
    /// `Default`, and the fallbacks.
    Host,
}

/// The pod's CRI DNS config (Go's `GetPodDNS`). Reads `resolvConf`: a small local file, read
/// per sandbox as Go does so edits to it apply to new pods.
pub fn pod_dns_config(pod: &Pod, node: &NodeContext) -> Result<cri::DnsConfig, SpecError> {
    let host = host_dns_config(&node.resolv_conf)?;
    Ok(dns_config_from(pod, node, host))
}

/// [`pod_dns_config`] with the node's resolver config already read.
fn dns_config_from(pod: &Pod, node: &NodeContext, host: cri::DnsConfig) -> cri::DnsConfig {
    let spec = pod.spec.as_ref();
    let host_net = spec.is_some_and(host_network);
    let dns_type = match spec.and_then(|s| s.dns_policy.as_deref()) {
        Some("None") => DnsType::None,
        Some("ClusterFirstWithHostNet") => DnsType::Cluster,
        Some("ClusterFirst") | None if !host_net => DnsType::Cluster,
        Some("ClusterFirst") | None | Some("Default") => DnsType::Host,
        Some(other) => {
            tracing::warn!(policy = other, "invalid dnsPolicy; using ClusterFirst");
            DnsType::Cluster
        }
    };
    let mut config = host;
    let dns_type = if dns_type == DnsType::Cluster && node.cluster_dns.is_empty() {
        tracing::warn!(
            "kubelet does not have ClusterDNS IP configured and cannot create Pod using \
             \"ClusterFirst\" policy. Falling back to \"Default\" policy."
        );
        DnsType::Host
    } else {
        dns_type
    };
    match dns_type {
        DnsType::None => config = cri::DnsConfig::default(),
        DnsType::Cluster => {
            config.servers = node.cluster_dns.iter().map(IpAddr::to_string).collect();
            config.searches = cluster_searches(&config.searches, pod, &node.cluster_domain);
            config.options = vec!["ndots:5".into()];
        }
        DnsType::Host => {
            if node.resolv_conf.as_os_str().is_empty() {
                // No resolver config: resolve on the local machine, search nothing.
                let v6 = node.host_ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6());
                config.servers = vec![if v6 { "::1" } else { "127.0.0.1" }.into()];
                config.searches = vec![".".into()];
            }
        }
    }
    if let Some(extra) = spec.and_then(|s| s.dns_config.as_ref()) {
        append_dns_config(&mut config, extra);
    }
    fit_limits(config)
}

/// The node's resolver config; empty when `resolvConf` is "".
fn host_dns_config(path: &Path) -> Result<cri::DnsConfig, SpecError> {
    if path.as_os_str().is_empty() {
        return Ok(cri::DnsConfig::default());
    }
    let err = |source| SpecError::ResolvConf {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(MAX_RESOLV_CONF + 1)
        .read_to_string(&mut text)
        .map_err(err)?;
    if text.len() as u64 > MAX_RESOLV_CONF {
        return Err(err(std::io::Error::other("the read limit is reached")));
    }
    let (servers, searches, options) = parse_resolv_conf(&text);
    Ok(cri::DnsConfig {
        servers,
        searches,
        options,
    })
}

/// Nameservers (accumulated), searches (last line wins; trailing dots dropped, `.` skipped)
/// and options (accumulated, the last of a name wins) of a resolv.conf.
pub fn parse_resolv_conf(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut servers = Vec::new();
    let mut searches = Vec::new();
    let mut options = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["nameserver", server, ..] => servers.push(server.to_string()),
            ["search", domains @ ..] => {
                searches = domains
                    .iter()
                    .filter(|d| **d != ".")
                    .map(|d| d.trim_end_matches('.').to_string())
                    .collect();
            }
            ["options", opts @ ..] => {
                for o in opts {
                    set_option(&mut options, o.to_string());
                }
            }
            _ => {}
        }
    }
    (servers, searches, options)
}

/// Adds an option, replacing one of the same name in place.
fn set_option(options: &mut Vec<String>, option: String) {
    let name = |o: &str| o.split(':').next().unwrap_or_default().to_string();
    let n = name(&option);
    match options.iter_mut().find(|o| name(o) == n) {
        Some(existing) => *existing = option,
        None => options.push(option),
    }
}

/// `ClusterFirst` searches: the cluster's, then the node's, without duplicates.
fn cluster_searches(host: &[String], pod: &Pod, domain: &str) -> Vec<String> {
    if domain.is_empty() {
        return host.to_vec();
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut all = vec![
        format!("{ns}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    all.extend(host.iter().cloned());
    omit_duplicates(all)
}

fn omit_duplicates(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// Merges the pod's `dnsConfig` (Go's `appendDNSConfig`); its options override same-named
/// ones.
fn append_dns_config(config: &mut cri::DnsConfig, extra: &PodDNSConfig) {
    let mut servers = std::mem::take(&mut config.servers);
    servers.extend(extra.nameservers.iter().flatten().cloned());
    config.servers = omit_duplicates(servers);
    let mut searches = std::mem::take(&mut config.searches);
    searches.extend(extra.searches.iter().flatten().cloned());
    config.searches = omit_duplicates(searches);
    for PodDNSConfigOption { name, value } in extra.options.iter().flatten() {
        let name = name.clone().unwrap_or_default();
        let option = match value.as_deref() {
            Some(v) if !v.is_empty() => format!("{name}:{v}"),
            _ => name,
        };
        set_option(&mut config.options, option);
    }
}

/// Keeps the config within what libc resolvers take, dropping what does not fit as Go does.
fn fit_limits(mut config: cri::DnsConfig) -> cri::DnsConfig {
    if config.servers.len() > MAX_NAMESERVERS {
        config.servers.truncate(MAX_NAMESERVERS);
        tracing::warn!(
            applied = config.servers.join(" "),
            "Nameserver limits were exceeded, some nameservers have been omitted"
        );
    }
    let mut exceeded = false;
    if config.searches.len() > MAX_SEARCH_PATHS {
        config.searches.truncate(MAX_SEARCH_PATHS);
        exceeded = true;
    }
    let before = config.searches.len();
    config.searches.retain(|s| s.len() <= MAX_SEARCH_DOMAIN);
    exceeded |= config.searches.len() != before;
    let mut line_len = config.searches.join(" ").len();
    while line_len > MAX_SEARCH_CHARS {
        let Some(last) = config.searches.pop() else {
            break;
        };
        line_len = line_len.saturating_sub(last.len() + 1);
        exceeded = true;
    }
    if exceeded {
        tracing::warn!(
            applied = config.searches.join(" "),
            "Search Line limits were exceeded, some search paths have been omitted"
        );
    }
    config
}

/// The pod's hostname (`spec.hostname` or its name, cut to 63 characters) and domain
/// (`<subdomain>.<namespace>.svc.<clusterDomain>` when it has a subdomain, else "").
pub fn hostname_and_domain(pod: &Pod, node: &NodeContext) -> Result<(String, String), SpecError> {
    let id = identity(pod)?;
    let spec = spec_of(pod)?;
    let hostname = pod_hostname(pod)?;
    let mut domain = String::new();
    if let Some(sub) = spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
        let errs = dns1123_label(sub);
        if !errs.is_empty() {
            return Err(SpecError::invalid(
                "spec.subdomain",
                format!(
                    "pod Subdomain {sub:?} is not a valid DNS label: {}",
                    errs.join(";")
                ),
            ));
        }
        domain = format!("{sub}.{}.svc.{}", id.namespace, node.cluster_domain);
    }
    Ok((hostname, domain))
}

/// The pod's hostname alone: `spec.hostname` (a DNS label) or the pod's name, cut to 63
/// characters without a trailing `-` or `.`.
pub fn pod_hostname(pod: &Pod) -> Result<String, SpecError> {
    let id = identity(pod)?;
    let spec = spec_of(pod)?;
    let mut hostname = id.name.to_string();
    if let Some(h) = spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        let errs = dns1123_label(h);
        if !errs.is_empty() {
            return Err(SpecError::invalid(
                "spec.hostname",
                format!(
                    "pod Hostname {h:?} is not a valid DNS label: {}",
                    errs.join(";")
                ),
            ));
        }
        hostname = h.to_string();
    }
    if hostname.len() > HOSTNAME_MAX {
        let cut: String = hostname.chars().take(HOSTNAME_MAX).collect();
        let cut = cut.trim_end_matches(['-', '.']).to_string();
        tracing::warn!(truncated = %cut, "hostname for pod was too long, truncated it");
        if cut.is_empty() {
            return Err(SpecError::invalid(
                "spec.hostname",
                format!("hostname for pod {:?} was invalid: {hostname:?}", id.name),
            ));
        }
        hostname = cut;
    }
    Ok(hostname)
}

/// The name the kernel gets (Go's `GetNodenameForKernel`): the FQDN with
/// `setHostnameAsFQDN`, else the short hostname.
pub(crate) fn kernel_hostname(
    hostname: &str,
    domain: &str,
    set_fqdn: Option<bool>,
) -> Result<String, SpecError> {
    if domain.is_empty() || set_fqdn != Some(true) {
        return Ok(hostname.to_string());
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > FQDN_MAX {
        return Err(SpecError::invalid(
            "spec.setHostnameAsFQDN",
            format!(
                "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is \
                 too long ({FQDN_MAX} characters is the max, {} characters requested)",
                fqdn.len()
            ),
        ));
    }
    Ok(fqdn)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::{node, pod};

    const RESOLV: &str = "# comment
nameserver 10.0.0.1
nameserver 10.0.0.2
search corp.example. example.com .
options timeout:2 ndots:1
options ndots:3
";

    fn host() -> cri::DnsConfig {
        let (servers, searches, options) = parse_resolv_conf(RESOLV);
        cri::DnsConfig {
            servers,
            searches,
            options,
        }
    }

    /// The DNS config of a pod with `spec`, the node's resolv.conf being [`RESOLV`].
    fn dns(spec: &str, node: &NodeContext) -> cri::DnsConfig {
        let mut node = node.clone();
        node.resolv_conf = "/etc/resolv.conf".into();
        let node = &node;
        let p = pod(&format!(
            "metadata: {{name: web, namespace: prod, uid: u}}\nspec:\n  containers: [{{name: c}}]\n{spec}"
        ));
        dns_config_from(&p, node, host())
    }

    #[test]
    fn resolv_conf_parsing() {
        let h = host();
        assert_eq!(h.servers, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(h.searches, ["corp.example", "example.com"]);
        assert_eq!(h.options, ["timeout:2", "ndots:3"]);
    }

    #[test]
    fn cluster_first() {
        for spec in ["", "  dnsPolicy: ClusterFirst\n"] {
            let d = dns(spec, &node());
            assert_eq!(d.servers, ["10.96.0.10"]);
            assert_eq!(
                d.searches,
                [
                    "prod.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local",
                    "corp.example",
                    "example.com"
                ]
            );
            assert_eq!(d.options, ["ndots:5"]);
        }
    }

    #[test]
    fn cluster_first_falls_back_to_default() {
        // Without clusterDNS.
        let mut n = node();
        n.cluster_dns.clear();
        let d = dns("", &n);
        assert_eq!(d, host());
        // On the host network.
        let d = dns("  hostNetwork: true\n", &node());
        assert_eq!(d, host());
        // ...unless asked for.
        let d = dns(
            "  hostNetwork: true\n  dnsPolicy: ClusterFirstWithHostNet\n",
            &node(),
        );
        assert_eq!(d.servers, ["10.96.0.10"]);
    }

    #[test]
    fn default_and_none() {
        let d = dns("  dnsPolicy: Default\n", &node());
        assert_eq!(d, host());
        let d = dns(
            "  dnsPolicy: None
  dnsConfig:
    nameservers: [1.1.1.1, 1.1.1.1, 8.8.8.8]
    searches: [a.example]
    options: [{name: ndots, value: '2'}, {name: edns0}]
",
            &node(),
        );
        assert_eq!(d.servers, ["1.1.1.1", "8.8.8.8"]);
        assert_eq!(d.searches, ["a.example"]);
        assert_eq!(d.options, ["ndots:2", "edns0"]);
        // dnsConfig merges into ClusterFirst, its options overriding.
        let d = dns(
            "  dnsConfig: {options: [{name: ndots, value: '1'}], searches: [x.example]}\n",
            &node(),
        );
        assert_eq!(d.options, ["ndots:1"]);
        assert_eq!(d.searches.last().map(String::as_str), Some("x.example"));
        // No resolvConf: the local machine.
        let mut n = node();
        n.cluster_dns.clear();
        let p = pod("metadata: {name: w, uid: u}\nspec: {containers: [{name: c}]}");
        let d = pod_dns_config(&p, &n).unwrap();
        assert_eq!(d.servers, ["127.0.0.1"]);
        assert_eq!(d.searches, ["."]);
    }

    #[test]
    fn limits_apply() {
        let d = dns(
            "  dnsPolicy: None\n  dnsConfig: {nameservers: [1.0.0.1, 1.0.0.2, 1.0.0.3, 1.0.0.4]}\n",
            &node(),
        );
        assert_eq!(d.servers.len(), 3);
        let many: Vec<String> = (0..40).map(|i| format!("s{i}.example")).collect();
        let d = fit_limits(cri::DnsConfig {
            searches: many,
            ..Default::default()
        });
        assert_eq!(d.searches.len(), 32);
        let long: Vec<String> = (0..20).map(|i| format!("{i}{}", "x".repeat(200))).collect();
        let d = fit_limits(cri::DnsConfig {
            searches: long,
            ..Default::default()
        });
        assert!(d.searches.join(" ").len() <= 2048);
        assert_eq!(d.searches.len(), 10);
    }

    #[test]
    fn missing_resolv_conf_is_an_error() {
        let mut n = node();
        n.resolv_conf = "/nonexistent/resolv.conf".into();
        let p = pod("metadata: {name: w, uid: u}\nspec: {containers: [{name: c}]}");
        let err = pod_dns_config(&p, &n).unwrap_err();
        assert!(matches!(err, SpecError::ResolvConf { .. }), "{err}");
    }

    #[test]
    fn hostnames() {
        let n = node();
        let hd = |spec: &str| {
            let p = pod(&format!(
                "metadata: {{name: web-node1, namespace: prod, uid: u}}\nspec: {{containers: [{{name: c}}]{spec}}}"
            ));
            hostname_and_domain(&p, &n)
        };
        assert_eq!(hd("").unwrap(), ("web-node1".into(), String::new()));
        assert_eq!(
            hd(", hostname: db, subdomain: sub").unwrap(),
            ("db".into(), "sub.prod.svc.cluster.local".into())
        );
        assert!(hd(", hostname: Bad_Name").is_err());
        assert!(hd(", subdomain: 'a.b'").is_err());
        let long = format!("{}-x", "a".repeat(62));
        let p = pod(&format!(
            "metadata: {{name: {long}, uid: u}}\nspec: {{containers: [{{name: c}}]}}"
        ));
        // Cut to 63, then the trailing '-' dropped.
        assert_eq!(hostname_and_domain(&p, &n).unwrap().0, "a".repeat(62));
        assert_eq!(
            kernel_hostname("db", "sub.prod.svc.cluster.local", Some(true)).unwrap(),
            "db.sub.prod.svc.cluster.local"
        );
        assert_eq!(
            kernel_hostname("db", "sub.prod.svc.cluster.local", None).unwrap(),
            "db"
        );
        assert!(kernel_hostname(&"a".repeat(40), &"b".repeat(30), Some(true)).is_err());
    }
}
