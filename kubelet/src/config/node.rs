//! The settings of API-server mode and node registration (`--kubeconfig`, `--node-ip`,
//! `--node-labels`, `registerWithTaints`, `kubeReserved`, …): their value forms and checks,
//! in the Go kubelet's words.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Taint;

use super::ConfigError;
use super::file::invalid;
use crate::manifest::names;
use crate::manifest::quantity::parse_quantity;

/// The taint the Go kubelet registers with under `--cloud-provider=external`, until the cloud
/// controller manager has initialized the node.
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// `--cloud-provider`: none, or an external cloud controller manager (the in-tree ones are
/// gone from the Go kubelet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloudProvider {
    /// `""`: no cloud provider.
    #[default]
    None,
    /// `external`: a cloud controller manager initializes the node (the registration taint
    /// [`TAINT_EXTERNAL_CLOUD_PROVIDER`]).
    External,
}

impl CloudProvider {
    /// The provider named by the flag; none for an in-tree (or unknown) provider.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "" => Some(Self::None),
            "external" => Some(Self::External),
            _ => None,
        }
    }
}

/// How secret and config map volumes learn of changes
/// (`configMapAndSecretChangeDetectionStrategy`, Watch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChangeDetection {
    /// A GET per pod sync.
    Get,
    /// GETs cached with a TTL.
    Cache,
    /// A watch per referenced object.
    #[default]
    Watch,
}

impl ChangeDetection {
    /// The strategy spelled `s` in the configuration.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Get" => Some(Self::Get),
            "Cache" => Some(Self::Cache),
            "Watch" => Some(Self::Watch),
            _ => None,
        }
    }
}

/// `--node-ip`: one IP, or a dual-stack pair; entries that are not IPs are skipped (returned
/// as warnings), as Go's sloppy parse logs and drops them.
pub fn node_ips(s: &str) -> Result<(Vec<IpAddr>, Vec<String>), ConfigError> {
    let mut ips = Vec::new();
    let mut warnings = Vec::new();
    if !s.is_empty() {
        for part in s.split(',').map(str::trim) {
            match part.parse::<IpAddr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => warnings.push(format!("--node-ip: could not parse {part:?} (ignored)")),
            }
        }
    }
    let field = "--node-ip";
    if ips.len() > 2 || (ips.len() == 2 && ips[0].is_ipv6() == ips[1].is_ipv6()) {
        return Err(invalid(
            field,
            "must contain either a single IP or a dual-stack pair of IPs",
        ));
    }
    if ips.len() == 2 && ips.iter().any(IpAddr::is_unspecified) {
        return Err(invalid(
            field,
            "dual-stack node IP cannot include '0.0.0.0' or '::'",
        ));
    }
    Ok((ips, warnings))
}

/// `k=v,k2=v2` pairs (repeatable, later ones win), as Go's `ConfigurationMap` and
/// `MapStringString` flags read them.
pub fn pairs(field: &str, values: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for pair in values.iter().flat_map(|v| v.split(',')) {
        if pair.trim().is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            invalid(
                field,
                format!("{pair:?}: malformed pair, expect string=string"),
            )
        })?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

/// Labels the kubelet may set on its own node in the `kubernetes.io`/`k8s.io` namespaces.
const KUBELET_LABELS: &[&str] = &[
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];
/// Namespaces (and their subdomains) of labels the kubelet may set.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn in_namespace(ns: &str, base: &str) -> bool {
    ns == base || ns.strip_suffix(base).is_some_and(|p| p.ends_with('.'))
}

/// Go's `ValidateKubeletFlags` for `--node-labels`: keys are qualified names and values label
/// values, and the `kubernetes.io`/`k8s.io` namespaces hold only the kubelet's own labels.
pub fn check_node_labels(labels: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let field = "--node-labels";
    let unknown: Vec<&str> = labels
        .keys()
        .map(String::as_str)
        .filter(|k| {
            let ns = label_namespace(k);
            let kubernetes = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
            let allowed = KUBELET_LABELS.contains(k)
                || KUBELET_LABEL_NAMESPACES
                    .iter()
                    .any(|base| in_namespace(ns, base));
            kubernetes && !allowed
        })
        .collect();
    if !unknown.is_empty() {
        return Err(invalid(
            field,
            format!(
                "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n\
                 --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix \
                 ({}) or be in the specifically allowed set ({})",
                unknown.join(" "),
                KUBELET_LABEL_NAMESPACES.join(", "),
                KUBELET_LABELS.join(", ")
            ),
        ));
    }
    let mut errs = Vec::new();
    for (k, v) in labels {
        let key_errs = names::qualified_name(k);
        if !key_errs.is_empty() {
            errs.push(format!("'{k}' - {}", key_errs.join(", ")));
        }
        let value_errs = names::label_value(v);
        if !value_errs.is_empty() {
            errs.push(format!("'{v}' - {}", value_errs.join(", ")));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("invalid node labels: {}", errs.join("; ")),
        ))
    }
}

const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// One `key[=value]:Effect` of `--register-with-taints`, as Go's `ParseTaints`; a spec ending
/// in `-` (a removal) is none: the flag drops those.
fn taint(spec: &str) -> Result<Option<Taint>, String> {
    let bad = |why: Option<String>| match why {
        Some(w) => format!("invalid taint spec: {spec}, {w}"),
        None => format!("invalid taint spec: {spec}"),
    };
    let (body, removal) = match spec.strip_suffix('-') {
        Some(b) => (b, true),
        None => (spec, false),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let (kv, effect) = match parts.as_slice() {
        [key] => (*key, ""),
        [kv, effect] => {
            if !EFFECTS.contains(effect) {
                return Err(format!(
                    "invalid taint effect: {effect}, unsupported taint effect"
                ));
            }
            (*kv, *effect)
        }
        _ => return Err(bad(None)),
    };
    let kv: Vec<&str> = kv.split('=').collect();
    let (key, value) = match kv.as_slice() {
        [key] => (*key, None),
        [key, value] => {
            let errs = names::label_value(value);
            if !errs.is_empty() {
                return Err(bad(Some(errs.join("; "))));
            }
            // Go's value is a plain string, omitted when empty.
            (*key, Some(value.to_string()).filter(|v| !v.is_empty()))
        }
        _ => return Err(bad(None)),
    };
    let errs = names::qualified_name(key);
    if !errs.is_empty() {
        return Err(bad(Some(errs.join("; "))));
    }
    if removal {
        return Ok(None);
    }
    if effect.is_empty() {
        return Err(bad(None));
    }
    Ok(Some(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    }))
}

/// Taint specs (`key=value:Effect`) as Go's `ParseTaints`: one taint per key and effect.
pub fn taints<'a>(
    field: &str,
    specs: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Taint>, ConfigError> {
    let mut out: Vec<Taint> = Vec::new();
    for spec in specs {
        let Some(t) = taint(spec).map_err(|e| invalid(field, e))? else {
            continue;
        };
        if out.iter().any(|o| o.key == t.key && o.effect == t.effect) {
            return Err(invalid(
                field,
                format!(
                    "duplicated taints with the same key and effect: {}={}:{}",
                    t.key,
                    t.value.as_deref().unwrap_or(""),
                    t.effect
                ),
            ));
        }
        out.push(t);
    }
    Ok(out)
}

/// Resources `kubeReserved`/`systemReserved` may hold.
fn reservable(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pid") || name.starts_with("hugepages-")
}

/// Go's `ParseResourceList` of a reservation: known resources, non-negative quantities.
pub fn check_reserved(field: &str, map: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (name, value) in map {
        if !reservable(name) {
            return Err(invalid(field, format!("cannot reserve {name:?} resource")));
        }
        let q = parse_quantity(value).map_err(|e| invalid(field, format!("{value:?}: {e}")))?;
        if q.is_negative() {
            return Err(invalid(
                field,
                format!("resource quantity for {name:?} cannot be negative: {value}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn node_ips_single_and_dual_stack() {
        let (ips, w) = node_ips("10.0.0.5").unwrap();
        assert_eq!(ips, ["10.0.0.5".parse::<IpAddr>().unwrap()]);
        assert!(w.is_empty());
        let (ips, _) = node_ips("10.0.0.5, fd00::5").unwrap();
        assert_eq!(ips.len(), 2);
        let (ips, w) = node_ips("10.0.0.5,nonsense").unwrap();
        assert_eq!((ips.len(), w.len()), (1, 1));
        assert!(node_ips("10.0.0.5,10.0.0.6").is_err());
        assert!(node_ips("10.0.0.5,fd00::5,fd00::6").is_err());
        assert!(node_ips("0.0.0.0,fd00::5").is_err());
        assert_eq!(node_ips("").unwrap().0, Vec::<IpAddr>::new());
        assert_eq!(node_ips("::").unwrap().0.len(), 1);
    }

    #[test]
    fn pairs_accumulate() {
        let m = pairs("--node-labels", &["a=1,b=2".into(), "b=3, c = x".into()]).unwrap();
        assert_eq!(m, labels(&[("a", "1"), ("b", "3"), ("c", "x")]));
        assert!(pairs("--node-labels", &["a".into()]).is_err());
    }

    #[test]
    fn node_labels_as_go() {
        for ok in [
            labels(&[("role", "worker"), ("example.com/tier", "")]),
            labels(&[(
                "node.kubernetes.io/exclude-from-external-load-balancers",
                "",
            )]),
            labels(&[("node-role.kubelet.kubernetes.io/worker", "")]),
            labels(&[
                ("kubernetes.io/hostname", "n1"),
                ("topology.kubernetes.io/zone", "a"),
            ]),
        ] {
            check_node_labels(&ok).unwrap();
        }
        for (bad, want) in [
            (
                labels(&[("node-role.kubernetes.io/worker", "")]),
                "unknown 'kubernetes.io' or 'k8s.io' labels",
            ),
            (labels(&[("x.k8s.io/a", "b")]), "unknown 'kubernetes.io'"),
            (
                labels(&[("bad key", "v")]),
                "invalid node labels: 'bad key'",
            ),
            (
                labels(&[("k", "bad value")]),
                "invalid node labels: 'bad value'",
            ),
        ] {
            match check_node_labels(&bad) {
                Err(ConfigError::Invalid { field, reason }) => {
                    assert_eq!(field, "--node-labels");
                    assert!(reason.contains(want), "{reason}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn taints_as_go() {
        let t = taints(
            "--register-with-taints",
            [
                "a=b:NoSchedule",
                "c:NoExecute",
                "example.com/d=:PreferNoSchedule",
                "e:NoSchedule-",
            ],
        )
        .unwrap();
        let got: Vec<(&str, Option<&str>, &str)> = t
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("a", Some("b"), "NoSchedule"),
                ("c", None, "NoExecute"),
                ("example.com/d", None, "PreferNoSchedule"),
            ]
        );
        for bad in [
            "a=b",
            "a=b:Sometimes",
            "a=b=c:NoSchedule",
            "a:b:NoSchedule",
            "bad key:NoSchedule",
            "a=bad value:NoSchedule",
        ] {
            assert!(taints("f", [bad]).is_err(), "{bad}");
        }
        assert!(taints("f", ["a=1:NoSchedule", "a=2:NoSchedule"]).is_err());
        assert_eq!(
            taints("f", ["a=1:NoSchedule", "a=2:NoExecute"])
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn reservations() {
        check_reserved(
            "kubeReserved",
            &labels(&[("cpu", "100m"), ("memory", "1Gi"), ("pid", "100")]),
        )
        .unwrap();
        assert!(check_reserved("kubeReserved", &labels(&[("gpu", "1")])).is_err());
        assert!(check_reserved("kubeReserved", &labels(&[("cpu", "-1")])).is_err());
        assert!(check_reserved("kubeReserved", &labels(&[("cpu", "lots")])).is_err());
    }
}
