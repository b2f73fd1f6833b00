//! A container's environment, as the Go kubelet's `makeEnvironmentVariables` makes it:
//! `value` (with `$(VAR)` references to earlier variables), `fieldRef` (the downward API),
//! `resourceFieldRef` (limits default to the node's allocatable), and the secrets and
//! configMaps of `envFrom`, `configMapKeyRef` and `secretKeyRef` (fetched by the caller, read
//! through [`env_sources`](super::env_sources)). Also the `$(VAR)` expansion of command and
//! args.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::{Container, ObjectFieldSelector, ResourceFieldSelector};

use super::env_sources::{EnvObjects, SkippedKeys, is_env_var_name, lookup, missing_key};
use super::resources::{self, Allocatable};
use super::{NodeContext, SpecError, host_network, identity, spec_of};
use crate::manifest::names::qualified_name;
use crate::manifest::quantity::{ParsedQuantity, parse_quantity};
use crate::objects::ObjectKind;
use crate::types::Pod;

/// Expands `$(NAME)` references in `input` with Go's rules: `$$` is an escaped `$`, a name
/// `lookup` does not know is left as `$(NAME)`, an unclosed `$(` and a `$` before anything
/// else are kept as written.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < b.len() {
        if b[cursor] == b'$' && cursor + 1 < b.len() {
            out.extend_from_slice(&b[checkpoint..cursor]);
            let rest = &b[cursor + 1..];
            // How many bytes after the `$` the reference (or non-reference) took.
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|&c| c == b')') {
                    Some(close) => {
                        let name = String::from_utf8_lossy(&rest[1..close]);
                        match lookup(&name) {
                            Some(v) => out.extend_from_slice(v.as_bytes()),
                            None => {
                                out.extend_from_slice(b"$(");
                                out.extend_from_slice(name.as_bytes());
                                out.push(b')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.extend_from_slice(&b[checkpoint.min(b.len())..]);
    // Only whole runes of the input and whole values were copied, so this is valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The container's command and args with `$(VAR)` references to its environment expanded
/// (Go's `ExpandContainerCommandAndArgs`).
pub fn expand_command_and_args(
    container: &Container,
    envs: &[cri::KeyValue],
) -> (Vec<String>, Vec<String>) {
    let map: HashMap<&str, &str> = envs
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect();
    let lookup = |name: &str| map.get(name).map(|v| v.to_string());
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|s| expand(s, lookup)).collect()
    };
    (expand_all(&container.command), expand_all(&container.args))
}

/// A container's environment as [`container_env`] builds it.
#[derive(Debug)]
pub struct ContainerEnv {
    /// The variables, or why they cannot be made (the container's
    /// `CreateContainerConfigError` message).
    pub vars: Result<Vec<cri::KeyValue>, SpecError>,
    /// `envFrom` keys left out as invalid names, one entry per source; reported even when
    /// `vars` failed later, as Go records its event before it fails.
    pub skipped: Vec<SkippedKeys>,
}

/// The container's environment as Go's `makeEnvironmentVariables` makes it: `envFrom`
/// sources first (`prefix`, `optional`, invalid keys skipped), then `env` in declaration
/// order, whose values override them. The order is first declaration (`envFrom` keys first,
/// each source in key order); a name set twice keeps its first place and its last value.
/// `objects` holds the secrets and configMaps [`env_references`](super::env_references)
/// named, fetched by the caller.
pub fn container_env(
    pod: &Pod,
    container: &Container,
    node: &NodeContext,
    pod_ip: &str,
    pod_ips: &[String],
    objects: &EnvObjects,
) -> ContainerEnv {
    let mut skipped = Vec::new();
    let vars = build_env(
        pod,
        container,
        node,
        (pod_ip, pod_ips),
        objects,
        &mut skipped,
    );
    ContainerEnv { vars, skipped }
}

/// Variables being built: first-declaration order and current values.
#[derive(Default)]
struct Vars {
    order: Vec<String>,
    values: HashMap<String, String>,
}

impl Vars {
    fn set(&mut self, name: &str, value: String) {
        if self.values.insert(name.to_string(), value).is_none() {
            self.order.push(name.to_string());
        }
    }

    fn into_key_values(mut self) -> Vec<cri::KeyValue> {
        self.order
            .into_iter()
            .map(|key| {
                let value = self.values.remove(&key).unwrap_or_default();
                cri::KeyValue { key, value }
            })
            .collect()
    }
}

fn build_env(
    pod: &Pod,
    container: &Container,
    node: &NodeContext,
    (pod_ip, pod_ips): (&str, &[String]),
    objects: &EnvObjects,
    skipped: &mut Vec<SkippedKeys>,
) -> Result<Vec<cri::KeyValue>, SpecError> {
    let id = identity(pod)?;
    spec_of(pod)?;
    let namespace = id.namespace;
    let field = |what: &str| format!("spec.containers[{}].{what}", container.name);
    let mut vars = Vars::default();

    // envFrom first, so that env overrides it.
    for from in container.env_from.iter().flatten() {
        let (kind, name, optional) = if let Some(cm) = &from.config_map_ref {
            (ObjectKind::ConfigMap, &cm.name, cm.optional)
        } else if let Some(s) = &from.secret_ref {
            (ObjectKind::Secret, &s.name, s.optional)
        } else {
            continue;
        };
        let optional = optional.unwrap_or(false);
        let Some(data) =
            lookup(objects, kind, namespace, name, optional).map_err(SpecError::EnvSource)?
        else {
            continue;
        };
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let mut invalid = Vec::new();
        for (key, value) in data.entries() {
            let key = format!("{prefix}{key}");
            if is_env_var_name(&key) {
                vars.set(&key, value);
            } else {
                invalid.push(key);
            }
        }
        if !invalid.is_empty() {
            invalid.sort();
            skipped.push(SkippedKeys {
                kind,
                namespace: namespace.to_string(),
                name: name.clone(),
                keys: invalid,
            });
        }
    }

    let ips = pod_ips_for_env(spec_is_host_network(pod), node, pod_ip, pod_ips);
    let primary_ip = ips.first().cloned().unwrap_or_default();
    let mut allocatable: Option<Allocatable> = None;
    for var in container.env.iter().flatten() {
        let f = || field(&format!("env[{}]", var.name));
        let mut value = var.value.clone().unwrap_or_default();
        if !value.is_empty() {
            value = expand(&value, |name| vars.values.get(name).cloned());
        } else if let Some(from) = &var.value_from {
            if let Some(fs) = &from.field_ref {
                value = field_ref_value(fs, pod, node, &primary_ip, &ips)
                    .map_err(|reason| SpecError::invalid(f(), reason))?;
            } else if let Some(rs) = &from.resource_field_ref {
                let alloc =
                    *allocatable.get_or_insert_with(|| Allocatable::node(node.memory_capacity));
                value = resource_field_value(rs, pod, container, &alloc).map_err(|e| match e {
                    FieldError::Reason(reason) => SpecError::invalid(f(), reason),
                    FieldError::Spec(e) => e,
                })?;
            } else if let Some(r) = from
                .config_map_key_ref
                .as_ref()
                .map(|r| (ObjectKind::ConfigMap, &r.name, &r.key, r.optional))
                .or_else(|| {
                    let r = from.secret_key_ref.as_ref()?;
                    Some((ObjectKind::Secret, &r.name, &r.key, r.optional))
                })
            {
                let (kind, name, key, optional) = r;
                let optional = optional.unwrap_or(false);
                let data = lookup(objects, kind, namespace, name, optional)
                    .map_err(SpecError::EnvSource)?;
                // A missing optional object or key leaves the variable unset (an envFrom
                // value of the same name stays).
                let Some(data) = data else { continue };
                match data.get(key) {
                    Some(v) => value = v,
                    None if optional => continue,
                    None => {
                        let message = missing_key(kind, key, namespace, name);
                        return Err(SpecError::EnvSource(message));
                    }
                }
            }
        }
        vars.set(&var.name, value);
    }
    Ok(vars.into_key_values())
}

fn spec_is_host_network(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(host_network)
}

/// The pod IPs as the downward API shows them: at most one per family, the node's family
/// first (Go's `sortPodIPs`); a host-network pod has the node's IP.
fn pod_ips_for_env(
    host_net: bool,
    node: &NodeContext,
    pod_ip: &str,
    pod_ips: &[String],
) -> Vec<String> {
    let mut all: Vec<&str> = pod_ips.iter().map(String::as_str).collect();
    if all.iter().all(|ip| ip.is_empty()) {
        all = vec![pod_ip];
    }
    if host_net && all.iter().all(|ip| ip.is_empty()) {
        all = vec![node.host_ip.as_str()];
    }
    let node_v6 = node.host_ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv6());
    let family = |want_v6: bool| {
        all.iter()
            .find(|ip| ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6() == want_v6))
            .map(|ip| ip.to_string())
    };
    let mut sorted: Vec<String> = Vec::new();
    sorted.extend(family(node_v6));
    sorted.extend(family(!node_v6));
    if sorted.is_empty() && !pod_ip.is_empty() {
        // Not an IP we can parse: pass it on as given.
        sorted.push(pod_ip.to_string());
    }
    sorted
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`) (Go's `SplitMaybeSubscriptedPath`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let s = path.strip_suffix("']")?;
    let (p, key) = s.split_once("['")?;
    (!p.is_empty()).then_some((p, key))
}

/// The value of a `fieldRef` (Go's `podFieldSelectorRuntimeValue`).
fn field_ref_value(
    fs: &ObjectFieldSelector,
    pod: &Pod,
    node: &NodeContext,
    pod_ip: &str,
    pod_ips: &[String],
) -> Result<String, String> {
    let version = fs.api_version.as_deref().unwrap_or("v1");
    if version != "v1" && !version.is_empty() {
        return Err(format!("unsupported pod version: {version}"));
    }
    let path = fs.field_path.as_str();
    // Go's ConvertDownwardAPIFieldLabel: the labels the v1 downward API knows.
    let path = match split_subscript(path) {
        Some((p, _)) if p == "metadata.annotations" || p == "metadata.labels" => path,
        Some(_) => return Err(format!("field label does not support subscript: {path}")),
        None => match path {
            "spec.host" => "spec.nodeName",
            "metadata.annotations"
            | "metadata.labels"
            | "metadata.name"
            | "metadata.namespace"
            | "metadata.uid"
            | "spec.nodeName"
            | "spec.restartPolicy"
            | "spec.serviceAccountName"
            | "spec.schedulerName"
            | "status.phase"
            | "status.hostIP"
            | "status.hostIPs"
            | "status.podIP"
            | "status.podIPs" => path,
            _ => return Err(format!("field label not supported: {path}")),
        },
    };
    let spec = pod.spec.as_ref();
    match path {
        "spec.nodeName" => {
            let name = spec.and_then(|s| s.node_name.as_deref()).unwrap_or("");
            // Sources set it to the node; an unset one means this node.
            Ok(if name.is_empty() {
                node.node_name.clone()
            } else {
                name.to_string()
            })
        }
        "spec.serviceAccountName" => Ok(spec
            .and_then(|s| {
                s.service_account_name
                    .as_deref()
                    .or(s.service_account.as_deref())
            })
            .unwrap_or("")
            .to_string()),
        "status.hostIP" | "status.hostIPs" => Ok(node.host_ip.clone()),
        "status.podIP" => Ok(pod_ip.to_string()),
        "status.podIPs" => Ok(pod_ips.join(",")),
        other => extract_field_path(pod, other),
    }
}

/// Go's `fieldpath.ExtractFieldPathAsString` for a pod's metadata (also the downward API
/// volumes' `fieldRef`).
pub(crate) fn extract_field_path(pod: &Pod, path: &str) -> Result<String, String> {
    let m = &pod.metadata;
    let empty = BTreeMap::new();
    let annotations = m.annotations.as_ref().unwrap_or(&empty);
    let labels = m.labels.as_ref().unwrap_or(&empty);
    if let Some((p, key)) = split_subscript(path) {
        let (map, check) = match p {
            "metadata.annotations" => (annotations, key.to_lowercase()),
            "metadata.labels" => (labels, key.to_string()),
            _ => return Err(format!("fieldPath {path:?} does not support subscript")),
        };
        let errs = qualified_name(&check);
        if !errs.is_empty() {
            return Err(format!(
                "invalid key subscript in {path}: {}",
                errs.join(";")
            ));
        }
        return Ok(map.get(key).cloned().unwrap_or_default());
    }
    match path {
        "metadata.annotations" => Ok(format_map(annotations)),
        "metadata.labels" => Ok(format_map(labels)),
        "metadata.name" => Ok(m.name.clone().unwrap_or_default()),
        "metadata.namespace" => Ok(m.namespace.clone().unwrap_or_else(|| "default".into())),
        "metadata.uid" => Ok(m.uid.clone().unwrap_or_default()),
        _ => Err(format!("unsupported fieldPath: {path}")),
    }
}

/// `key="value"` lines in key order, values quoted as Go's `%q` (Go's `FormatMap`).
fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string quoted as Go's `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n < 0x10000 {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A `resourceFieldRef` failure: a reason about the reference, or a bad quantity.
pub(crate) enum FieldError {
    /// What is wrong with the reference, in Go's words.
    Reason(String),
    /// A quantity of the pod's spec that does not parse.
    Spec(SpecError),
}

impl From<SpecError> for FieldError {
    fn from(e: SpecError) -> Self {
        FieldError::Spec(e)
    }
}

/// The value of a `resourceFieldRef` (Go's `containerResourceRuntimeValue` over the pod with
/// unset cpu, memory and ephemeral-storage limits defaulted to the node's allocatable; also
/// the downward API volumes' `resourceFieldRef`).
pub(crate) fn resource_field_value(
    rs: &ResourceFieldSelector,
    pod: &Pod,
    current: &Container,
    alloc: &Allocatable,
) -> Result<String, FieldError> {
    let container = match rs.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => current,
        Some(name) => {
            let spec = pod.spec.as_ref();
            spec.into_iter()
                .flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                })
                .find(|c| c.name == name)
                .ok_or_else(|| FieldError::Reason(format!("container {name} not found")))?
        }
    };
    let divisor = match &rs.divisor {
        Some(d) => parse_quantity(&d.0)
            .map_err(|e| FieldError::Reason(format!("divisor {:?}: {e}", d.0)))?,
        None => ParsedQuantity::default(),
    };
    // A zero (or unset) divisor means 1.
    let divisor = if divisor.nanos() == 0 {
        ParsedQuantity::from_units(1)
    } else {
        divisor
    };
    let (kind, name) = rs
        .resource
        .split_once('.')
        .ok_or_else(|| unsupported(&rs.resource))?;
    let amount: Option<ParsedQuantity> = match kind {
        "limits" => resources::limit(container, name)?,
        "requests" => resources::request(container, name)?,
        _ => return Err(unsupported(&rs.resource)),
    };
    let units = |q: Option<ParsedQuantity>| q.map_or(0, |q| q.value_ceil());
    let defaulted =
        |default: i64| -> i128 { amount.map_or(i128::from(default), |q| q.value_ceil()) };
    let value: i128 = match (kind, name) {
        ("limits", "cpu") | ("requests", "cpu") => {
            let milli = match (kind, amount) {
                ("limits", None) => i128::from(alloc.cpu_milli),
                (_, q) => q.map_or(0, |q| q.milli_ceil()),
            };
            return Ok(ceil_div(milli, divisor.milli_ceil()).to_string());
        }
        ("limits", "memory") => defaulted(alloc.memory),
        ("limits", "ephemeral-storage") => defaulted(alloc.ephemeral_storage),
        ("requests", "memory") | ("requests", "ephemeral-storage") => units(amount),
        (_, n) if n.starts_with("hugepages-") => units(amount),
        _ => return Err(unsupported(&rs.resource)),
    };
    Ok(ceil_div(value, divisor.value_ceil()).to_string())
}

fn unsupported(resource: &str) -> FieldError {
    FieldError::Reason(format!("unsupported container resource : {resource}"))
}

/// `a / b` rounded up (Go divides as floats and takes the ceiling); a non-positive divisor
/// gives 0 rather than a panic.
fn ceil_div(a: i128, b: i128) -> i128 {
    if b <= 0 {
        return 0;
    }
    let q = a / b;
    if a % b > 0 { q + 1 } else { q }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::{node, pod};

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn expansion_follows_go() {
        let lookup = vars(&[("VAR_A", "A"), ("VAR_B", "B"), ("EMPTY", "")]);
        let table = [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_B)", "A-B"),
            ("$(EMPTY)x", "x"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("$$", "$"),
            ("$", "$"),
            ("x$", "x$"),
            ("$x", "$x"),
            ("$(VAR_A", "$(VAR_A"),
            ("$()", "$()"),
            ("$(VAR_A)$(", "A$("),
            ("f$(VAR_A)o$$o", "fAo$o"),
            ("$é$(VAR_B)", "$éB"),
            ("no refs", "no refs"),
            ("", ""),
        ];
        for (input, want) in table {
            assert_eq!(expand(input, &lookup), want, "{input:?}");
        }
    }

    const POD: &str = "metadata:
  name: web
  namespace: prod
  uid: 1234
  labels: {app: web, tier: front}
  annotations: {note: \"say \\\"hi\\\"\\n\"}
spec:
  serviceAccountName: sa
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo $(GREETING) $(MISSING) $$(ESCAPED)']
    args: ['$(POD_NAME)']
    resources:
      requests: {cpu: 250m, memory: 64Mi}
      limits: {memory: 128Mi}
    env:
    - {name: GREETING, value: hello}
    - {name: TWICE, value: '$(GREETING) $(GREETING)'}
    - {name: LATER_REF, value: '$(POD_NAME)'}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: NS
      valueFrom: {fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}
    - name: UID
      valueFrom: {fieldRef: {fieldPath: metadata.uid}}
    - name: APP
      valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}
    - name: NOPE
      valueFrom: {fieldRef: {fieldPath: \"metadata.labels['nope']\"}}
    - name: LABELS
      valueFrom: {fieldRef: {fieldPath: metadata.labels}}
    - name: ANNOTATIONS
      valueFrom: {fieldRef: {fieldPath: metadata.annotations}}
    - name: NOTE
      valueFrom: {fieldRef: {fieldPath: \"metadata.annotations['note']\"}}
    - name: NODE
      valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
    - name: SA
      valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}
    - name: HOST_IP
      valueFrom: {fieldRef: {fieldPath: status.hostIP}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: POD_IPS
      valueFrom: {fieldRef: {fieldPath: status.podIPs}}
    - name: CPU_REQ
      valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: 1m}}
    - name: CPU_REQ_CORES
      valueFrom: {resourceFieldRef: {resource: requests.cpu}}
    - name: MEM_LIMIT_MI
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
    - name: MEM_REQ
      valueFrom: {resourceFieldRef: {containerName: c, resource: requests.memory}}
    - name: CPU_LIMIT
      valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}
    - name: OTHER_MEM
      valueFrom: {resourceFieldRef: {containerName: other, resource: limits.memory, divisor: 1Mi}}
    - {name: GREETING, value: bye}
  - name: other
    image: busybox
    resources: {limits: {memory: 1Gi}}
";

    fn env_of(p: &Pod, ips: &[String]) -> Result<Vec<(String, String)>, SpecError> {
        let c = &p.spec.as_ref().unwrap().containers[0];
        let ip = ips.first().cloned().unwrap_or_default();
        Ok(
            container_env(p, c, &node(), &ip, ips, &EnvObjects::default())
                .vars?
                .into_iter()
                .map(|kv| (kv.key, kv.value))
                .collect(),
        )
    }

    #[test]
    fn env_resolution_table() {
        let p = pod(POD);
        let ips = vec!["fd00::5".to_string(), "10.88.0.5".to_string()];
        let env = env_of(&p, &ips).unwrap();
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{k} missing"))
        };
        let cpus = Allocatable::node(8 << 30).cpu_milli;
        let table = [
            // Redeclared: first place, last value.
            ("GREETING", "bye".to_string()),
            ("TWICE", "hello hello".into()),
            // Only earlier variables expand.
            ("LATER_REF", "$(POD_NAME)".into()),
            ("POD_NAME", "web".into()),
            ("NS", "prod".into()),
            ("UID", "1234".into()),
            ("APP", "web".into()),
            ("NOPE", String::new()),
            ("LABELS", "app=\"web\"\ntier=\"front\"".into()),
            ("ANNOTATIONS", "note=\"say \\\"hi\\\"\\n\"".into()),
            ("NOTE", "say \"hi\"\n".into()),
            ("NODE", "node1".into()),
            ("SA", "sa".into()),
            ("HOST_IP", "192.168.1.10".into()),
            // The node is IPv4, so the v4 address comes first.
            ("POD_IP", "10.88.0.5".into()),
            ("POD_IPS", "10.88.0.5,fd00::5".into()),
            ("CPU_REQ", "250".into()),
            ("CPU_REQ_CORES", "1".into()),
            ("MEM_LIMIT_MI", "128".into()),
            ("MEM_REQ", (64 << 20).to_string()),
            ("CPU_LIMIT", cpus.to_string()),
            ("OTHER_MEM", "1024".into()),
        ];
        for (name, want) in &table {
            assert_eq!(&get(name), want, "{name}");
        }
        assert_eq!(env.len(), table.len());
        assert_eq!(env[0].0, "GREETING");

        let c = &p.spec.as_ref().unwrap().containers[0];
        let kv: Vec<cri::KeyValue> = env
            .iter()
            .map(|(k, v)| cri::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        let (command, args) = expand_command_and_args(c, &kv);
        assert_eq!(command, ["sh", "-c", "echo bye $(MISSING) $(ESCAPED)"]);
        assert_eq!(args, ["web"]);
    }

    #[test]
    fn unset_memory_limit_defaults_to_allocatable() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  containers:
  - name: c
    image: x
    env:
    - name: M
      valueFrom: {resourceFieldRef: {resource: limits.memory}}");
        let env = env_of(&p, &[]).unwrap();
        assert_eq!(env[0].1, ((8i64 << 30) - (100 << 20)).to_string());
    }

    #[test]
    fn host_network_pods_see_the_node_ip() {
        let p = pod("metadata: {name: p, uid: u}
spec:
  hostNetwork: true
  containers:
  - name: c
    image: x
    env:
    - name: IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}");
        assert_eq!(env_of(&p, &[]).unwrap()[0].1, "192.168.1.10");
    }

    #[test]
    fn refusals() {
        let base = "metadata: {name: p, namespace: ns, uid: u}
spec:
  containers:
  - name: c
    image: x
";
        let table = [
            (
                "    env: [{name: A, valueFrom: {fieldRef: {fieldPath: spec.nope}}}]",
                "field label not supported: spec.nope",
            ),
            (
                "    env: [{name: A, valueFrom: {fieldRef: {fieldPath: spec.restartPolicy}}}]",
                "unsupported fieldPath: spec.restartPolicy",
            ),
            (
                "    env: [{name: A, valueFrom: {fieldRef: {apiVersion: v2, fieldPath: metadata.name}}}]",
                "unsupported pod version: v2",
            ),
            (
                "    env: [{name: A, valueFrom: {fieldRef: {fieldPath: \"metadata.name['x']\"}}}]",
                "field label does not support subscript",
            ),
            (
                "    env: [{name: A, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['a b']\"}}}]",
                "invalid key subscript in metadata.labels['a b']",
            ),
            (
                "    env: [{name: A, valueFrom: {resourceFieldRef: {resource: limits.gpu}}}]",
                "unsupported container resource : limits.gpu",
            ),
            (
                "    env: [{name: A, valueFrom: {resourceFieldRef: {containerName: zz, resource: limits.cpu}}}]",
                "container zz not found",
            ),
        ];
        for (env, want) in table {
            let p = pod(&format!("{base}{env}"));
            let err = env_of(&p, &[]).unwrap_err().to_string();
            assert!(err.contains(want), "{env}: {err}");
            assert!(err.starts_with("spec.containers[c]."), "{err}");
        }
    }

    use std::sync::Arc;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    use crate::objects::ObjectError;
    use crate::podspec::env_sources::env_references;

    fn config_map(pairs: &[(&str, &str)]) -> Fetched<ConfigMap> {
        let data = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Some(Arc::new(ConfigMap {
            data: Some(data),
            ..Default::default()
        })))
    }

    fn secret(pairs: &[(&str, &[u8])]) -> Fetched<Secret> {
        let data = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect();
        Ok(Some(Arc::new(Secret {
            data: Some(data),
            ..Default::default()
        })))
    }

    type Fetched<T> = crate::podspec::env_sources::Fetched<T>;

    /// The environment of the pod's first container with `objects`.
    fn resolve(p: &Pod, objects: &EnvObjects) -> ContainerEnv {
        let c = &p.spec.as_ref().unwrap().containers[0];
        container_env(p, c, &node(), "10.88.0.5", &["10.88.0.5".into()], objects)
    }

    fn pairs(env: &ContainerEnv) -> Vec<(String, String)> {
        let vars = env.vars.as_ref().unwrap();
        vars.iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect()
    }

    fn owned(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const FROM_POD: &str = "metadata: {name: p, namespace: ns, uid: u}
spec:
  containers:
  - name: c
    image: x
    envFrom:
    - configMapRef: {name: cm}
    - {prefix: S_, secretRef: {name: s}}
    - configMapRef: {name: absent, optional: true}
    - {prefix: P_, configMapRef: {name: cm}}
    env:
    - {name: DUPE, value: from-env}
    - {name: EXPANDED, value: '$(FROM_CM)/$(S_TOKEN)/$(P_FROM_CM)'}
    - {name: KEY, valueFrom: {configMapKeyRef: {name: other, key: k}}}
    - {name: SKEY, valueFrom: {secretKeyRef: {name: s, key: TOKEN}}}
    - {name: FROM_CM, valueFrom: {configMapKeyRef: {name: other, key: missing, optional: true}}}
    - {name: S_TOKEN, valueFrom: {secretKeyRef: {name: absent, key: k, optional: true}}}
";

    fn from_objects() -> EnvObjects {
        let mut objects = EnvObjects::default();
        objects.config_maps.insert(
            "cm".into(),
            config_map(&[
                ("FROM_CM", "cm-value"),
                ("DUPE", "from-cm"),
                ("1bad", "x"),
                ("a b", "y"),
            ]),
        );
        objects
            .config_maps
            .insert("other".into(), config_map(&[("k", "v")]));
        objects.config_maps.insert("absent".into(), Ok(None));
        objects.secrets.insert(
            "s".into(),
            secret(&[
                ("TOKEN", b"t0k3n"),
                ("bin", &[0xff, b'a', 0xc3, 0xa9, b'\n', 0]),
            ]),
        );
        objects.secrets.insert("absent".into(), Ok(None));
        objects
    }

    #[test]
    fn env_from_and_key_refs_follow_go() {
        let p = pod(FROM_POD);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let refs = env_references(c);
        let objects = from_objects();
        // Everything the environment reads was named for fetching.
        assert!(
            refs.config_maps
                .iter()
                .all(|n| objects.config_maps.contains_key(n))
        );
        assert!(refs.secrets.iter().all(|n| objects.secrets.contains_key(n)));

        let env = resolve(&p, &objects);
        assert_eq!(
            pairs(&env),
            owned(&[
                // envFrom first, each source in key order; env overrides in place.
                ("DUPE", "from-env"),
                ("FROM_CM", "cm-value"),
                ("S_TOKEN", "t0k3n"),
                // Secret bytes as text; what is not UTF-8 becomes U+FFFD.
                ("S_bin", "\u{fffd}aé\n\0"),
                // The prefix makes `1bad` a valid name.
                ("P_1bad", "x"),
                ("P_DUPE", "from-cm"),
                ("P_FROM_CM", "cm-value"),
                ("EXPANDED", "cm-value/t0k3n/cm-value"),
                ("KEY", "v"),
                ("SKEY", "t0k3n"),
            ])
        );
        // Invalid names are skipped per source, sorted, prefixed as they would have been.
        let skipped: Vec<(ObjectKind, &str, Vec<String>)> = env
            .skipped
            .iter()
            .map(|s| (s.kind, s.name.as_str(), s.keys.clone()))
            .collect();
        assert_eq!(
            skipped,
            [
                (
                    ObjectKind::ConfigMap,
                    "cm",
                    vec!["1bad".to_string(), "a b".into()]
                ),
                (ObjectKind::ConfigMap, "cm", vec!["P_a b".to_string()]),
            ]
        );
        assert_eq!(
            env.skipped[0].message(),
            "Keys [1bad, a b] from the EnvFrom configMap ns/cm were skipped since they are considered invalid environment variable names."
        );
    }

    #[test]
    fn failures_carry_gos_messages() {
        let base = "metadata: {name: p, namespace: ns, uid: u}
spec:
  containers:
  - name: c
    image: x
";
        let table = [
            (
                "    envFrom: [{configMapRef: {name: nope}}]",
                "configmap \"nope\" not found",
            ),
            (
                "    envFrom: [{secretRef: {name: nope}}]",
                "secret \"nope\" not found",
            ),
            (
                "    env: [{name: A, valueFrom: {configMapKeyRef: {name: nope, key: k}}}]",
                "configmap \"nope\" not found",
            ),
            (
                "    env: [{name: A, valueFrom: {secretKeyRef: {name: nope, key: k}}}]",
                "secret \"nope\" not found",
            ),
            (
                "    env: [{name: A, valueFrom: {configMapKeyRef: {name: cm, key: k}}}]",
                "couldn't find key k in ConfigMap ns/cm",
            ),
            (
                "    env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
                "couldn't find key k in Secret ns/s",
            ),
            (
                // binaryData never reaches the environment.
                "    env: [{name: A, valueFrom: {configMapKeyRef: {name: bin, key: b}}}]",
                "couldn't find key b in ConfigMap ns/bin",
            ),
            (
                "    env: [{name: A, valueFrom: {secretKeyRef: {name: down, key: k, optional: true}}}]",
                "etcdserver: request timed out",
            ),
            (
                "    envFrom: [{secretRef: {name: unfetched}}]",
                "object ns/unfetched not registered",
            ),
        ];
        let mut objects = EnvObjects::default();
        objects.config_maps.insert("nope".into(), Ok(None));
        objects.secrets.insert("nope".into(), Ok(None));
        objects
            .config_maps
            .insert("cm".into(), config_map(&[("other", "v")]));
        objects
            .secrets
            .insert("s".into(), secret(&[("other", b"v")]));
        objects.config_maps.insert(
            "bin".into(),
            Ok(Some(Arc::new(ConfigMap {
                binary_data: Some([("b".to_string(), ByteString(vec![1]))].into()),
                ..Default::default()
            }))),
        );
        objects.secrets.insert(
            "down".into(),
            Err(ObjectError::Api("etcdserver: request timed out".into())),
        );
        for (env, want) in table {
            let p = pod(&format!("{base}{env}"));
            let got = resolve(&p, &objects);
            let err = got.vars.unwrap_err();
            assert!(matches!(err, SpecError::EnvSource(_)), "{env}");
            // The message is Go's as it is: no field path in front.
            assert_eq!(err.to_string(), want, "{env}");
        }
    }

    #[test]
    fn standalone_refuses_every_object_reference() {
        let base = "metadata: {name: p, namespace: ns, uid: u}
spec:
  containers:
  - name: c
    image: x
";
        let table = [
            (
                "    env: [{name: A, valueFrom: {configMapKeyRef: {name: cm, key: k}}}]",
                "couldn't get configMap ns/cm, no kubeClient defined",
            ),
            (
                // Go fails before it looks at optional.
                "    env: [{name: A, valueFrom: {configMapKeyRef: {name: cm, key: k, optional: true}}}]",
                "couldn't get configMap ns/cm, no kubeClient defined",
            ),
            (
                "    env: [{name: A, valueFrom: {secretKeyRef: {name: s, key: k}}}]",
                "couldn't get secret ns/s, no kubeClient defined",
            ),
            (
                "    envFrom: [{configMapRef: {name: cm, optional: true}}]",
                "couldn't get configMap ns/cm, no kubeClient defined",
            ),
            (
                "    envFrom: [{secretRef: {name: s}}]",
                "couldn't get secret ns/s, no kubeClient defined",
            ),
        ];
        for (env, want) in table {
            let p = pod(&format!("{base}{env}"));
            // What the kubelet fetches standalone: every read fails with NoApiServer.
            let refs = env_references(&p.spec.as_ref().unwrap().containers[0]);
            let objects = EnvObjects {
                config_maps: refs
                    .config_maps
                    .into_iter()
                    .map(|n| (n, Err(ObjectError::NoApiServer)))
                    .collect(),
                secrets: refs
                    .secrets
                    .into_iter()
                    .map(|n| (n, Err(ObjectError::NoApiServer)))
                    .collect(),
            };
            let err = resolve(&p, &objects).vars.unwrap_err().to_string();
            assert_eq!(err, want, "{env}");
        }
    }

    #[test]
    fn skipped_keys_are_reported_even_when_a_later_reference_fails() {
        let p = pod("metadata: {name: p, namespace: ns, uid: u}
spec:
  containers:
  - name: c
    image: x
    envFrom: [{secretRef: {name: s}}, {configMapRef: {name: nope}}]");
        let mut objects = EnvObjects::default();
        objects
            .secrets
            .insert("s".into(), secret(&[("ok", b"1"), ("9lives", b"2")]));
        objects.config_maps.insert("nope".into(), Ok(None));
        let env = resolve(&p, &objects);
        assert_eq!(
            env.vars.unwrap_err().to_string(),
            "configmap \"nope\" not found"
        );
        assert_eq!(env.skipped.len(), 1);
        assert_eq!(env.skipped[0].kind, ObjectKind::Secret);
        assert_eq!(env.skipped[0].keys, ["9lives"]);
        assert!(
            env.skipped[0]
                .message()
                .contains("from the EnvFrom secret ns/s")
        );
    }

    #[test]
    fn optional_misses_leave_earlier_values() {
        // A missing optional key or object sets nothing: the envFrom value stays.
        let p = pod("metadata: {name: p, namespace: ns, uid: u}
spec:
  containers:
  - name: c
    image: x
    envFrom: [{configMapRef: {name: cm}}]
    env:
    - {name: A, valueFrom: {configMapKeyRef: {name: cm, key: nokey, optional: true}}}
    - {name: B, valueFrom: {secretKeyRef: {name: nosecret, key: k, optional: true}}}
    - {name: C, valueFrom: {secretKeyRef: {name: nosecret, key: k, optional: true}}}");
        let mut objects = EnvObjects::default();
        objects
            .config_maps
            .insert("cm".into(), config_map(&[("A", "a"), ("B", "b")]));
        objects.secrets.insert("nosecret".into(), Ok(None));
        let env = resolve(&p, &objects);
        assert_eq!(pairs(&env), owned(&[("A", "a"), ("B", "b")]));
        assert!(env.skipped.is_empty());
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(go_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(go_quote("\t\u{1}\u{7f}é"), "\"\\t\\x01\\x7fé\"");
    }
}
