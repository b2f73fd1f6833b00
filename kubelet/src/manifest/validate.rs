//! Pod validation: the parts of the API server's `ValidatePodCreate` that matter to a node
//! agent (names, containers, volumes and mounts, ports, resources, env, probes, policies),
//! with its field paths and wording (`spec.containers[0].image: Required value`).

mod container;
mod projection;
mod volume;

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, PodSecurityContext, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names;

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path (`spec.containers[0].image`).
    pub field: String,
    /// What is wrong, as the API server words it (`Required value`, `Invalid value: ...`).
    pub reason: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// The errors as the API server's aggregate prints them: one alone, several in brackets.
pub fn summary(errs: &[FieldError]) -> String {
    match errs {
        [one] => one.to_string(),
        _ => {
            let all: Vec<String> = errs.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        }
    }
}

/// Validates a pod as the API server would on create (after defaulting); every problem is
/// returned, not just the first.
pub fn validate(pod: &Pod) -> Result<(), Vec<FieldError>> {
    let mut errs = Errs::default();
    metadata(&mut errs, &pod.metadata);
    match &pod.spec {
        Some(spec) => pod_spec(&mut errs, spec),
        None => errs.required("spec", ""),
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(errs.0)
    }
}

/// Collects errors with the API's reason wording.
#[derive(Default)]
pub(super) struct Errs(pub(super) Vec<FieldError>);

impl Errs {
    fn push(&mut self, field: &str, reason: String) {
        self.0.push(FieldError {
            field: field.to_string(),
            reason,
        });
    }

    /// `Required value[: detail]`.
    pub(super) fn required(&mut self, field: &str, detail: &str) {
        let reason = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        self.push(field, reason);
    }

    /// `Invalid value: <value>: detail`; `value` is already formatted (see [`quote`]).
    pub(super) fn invalid(&mut self, field: &str, value: &str, detail: &str) {
        self.push(field, format!("Invalid value: {value}: {detail}"));
    }

    /// `Unsupported value: "x": supported values: "a", "b"`.
    pub(super) fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        self.push(
            field,
            format!(
                "Unsupported value: {}: supported values: {}",
                quote(value),
                list.join(", ")
            ),
        );
    }

    /// `Duplicate value: "x"`.
    pub(super) fn duplicate(&mut self, field: &str, value: &str) {
        self.push(field, format!("Duplicate value: {}", quote(value)));
    }

    /// `Not found: "x"`.
    pub(super) fn not_found(&mut self, field: &str, value: &str) {
        self.push(field, format!("Not found: {}", quote(value)));
    }

    /// `Forbidden: detail`.
    pub(super) fn forbidden(&mut self, field: &str, detail: &str) {
        self.push(field, format!("Forbidden: {detail}"));
    }

    /// One `Invalid value` per message of a name check.
    pub(super) fn name_check(&mut self, field: &str, value: &str, messages: Vec<String>) {
        for m in messages {
            self.invalid(field, &quote(value), &m);
        }
    }

    /// A required value from a closed set.
    pub(super) fn one_of(&mut self, field: &str, value: Option<&str>, supported: &[&str]) {
        match value.unwrap_or("") {
            "" => self.required(field, ""),
            v if !supported.contains(&v) => self.not_supported(field, v, supported),
            _ => {}
        }
    }

    /// `must be greater than or equal to 0` for a set, negative number.
    pub(super) fn non_negative(&mut self, field: &str, value: Option<i64>) {
        if let Some(v) = value.filter(|v| *v < 0) {
            self.invalid(field, &v.to_string(), "must be greater than or equal to 0");
        }
    }
}

/// A string value as the API quotes it in messages.
pub(super) fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// Not part of the API's checks for names, but what every path below relies on.
pub(super) fn is_absolute(path: &str) -> bool {
    path.starts_with('/')
}

/// `..` as a whole path element.
pub(super) fn has_backsteps(path: &str) -> bool {
    path.split('/').any(|p| p == "..")
}

const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

fn metadata(errs: &mut Errs, meta: &ObjectMeta) {
    match meta.name.as_deref().unwrap_or("") {
        "" => errs.required("metadata.name", "name or generateName is required"),
        name => errs.name_check("metadata.name", name, names::dns1123_subdomain(name)),
    }
    match meta.namespace.as_deref().unwrap_or("") {
        "" => errs.required("metadata.namespace", ""),
        ns => errs.name_check("metadata.namespace", ns, names::dns1123_label(ns)),
    }
    for (k, v) in meta.labels.iter().flatten() {
        errs.name_check("metadata.labels", k, names::qualified_name(k));
        errs.name_check("metadata.labels", v, names::label_value(v));
    }
    let mut size = 0;
    for (k, v) in meta.annotations.iter().flatten() {
        errs.name_check(
            "metadata.annotations",
            k,
            names::qualified_name(&k.to_lowercase()),
        );
        size += k.len() + v.len();
    }
    if size > MAX_ANNOTATIONS_BYTES {
        errs.push(
            "metadata.annotations",
            format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
        );
    }
}

fn pod_spec(errs: &mut Errs, spec: &PodSpec) {
    let volumes = volume::volumes(errs, spec.volumes.as_deref().unwrap_or_default());
    container::all(errs, spec, &volumes);
    errs.one_of(
        "spec.restartPolicy",
        spec.restart_policy.as_deref(),
        &["Always", "OnFailure", "Never"],
    );
    dns(errs, spec);
    errs.non_negative(
        "spec.terminationGracePeriodSeconds",
        spec.termination_grace_period_seconds,
    );
    if let Some(d) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.invalid(
            "spec.activeDeadlineSeconds",
            &d.to_string(),
            "must be between 1 and 2147483647, inclusive",
        );
    }
    for (field, value) in [
        ("spec.hostname", &spec.hostname),
        ("spec.subdomain", &spec.subdomain),
    ] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            errs.name_check(field, v, names::dns1123_label(v));
        }
    }
    if let Some(sc) = &spec.security_context {
        pod_security(errs, sc);
    }
    host_users(errs, spec);
    for (i, alias) in spec.host_aliases.iter().flatten().enumerate() {
        if alias.ip.parse::<IpAddr>().is_err() {
            errs.invalid(
                &format!("spec.hostAliases[{i}].ip"),
                &quote(&alias.ip),
                "must be valid IP address",
            );
        }
        for (j, h) in alias.hostnames.iter().flatten().enumerate() {
            errs.name_check(
                &format!("spec.hostAliases[{i}].hostnames[{j}]"),
                h,
                names::dns1123_subdomain(h),
            );
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.forbidden("spec.ephemeralContainers", "cannot be set on create");
    }
}

/// Go's `validateHostUsers`: a pod in a user namespace cannot share the node's network, PID
/// or IPC namespace (its field paths are the internal API's, `spec.securityContext.*`).
fn host_users(errs: &mut Errs, spec: &PodSpec) {
    if spec.host_users != Some(false) {
        return;
    }
    const WHY: &str = "when `pod.Spec.HostUsers` is false";
    if spec.os.as_ref().is_some_and(|os| os.name == "windows") {
        errs.forbidden(
            "spec.securityContext.hostUsers",
            "cannot be set for a windows pod",
        );
    }
    for (on, field) in [
        (spec.host_network, "spec.securityContext.hostNetwork"),
        (spec.host_pid, "spec.securityContext.HostPID"),
        (spec.host_ipc, "spec.securityContext.HostIPC"),
    ] {
        if on == Some(true) {
            errs.forbidden(field, WHY);
        }
    }
}

const MAX_DNS_NAMESERVERS: usize = 3;
const MAX_DNS_SEARCH_PATHS: usize = 32;
const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;

fn dns(errs: &mut Errs, spec: &PodSpec) {
    let policy = spec.dns_policy.as_deref();
    errs.one_of(
        "spec.dnsPolicy",
        policy,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    let config = spec.dns_config.as_ref();
    if policy == Some("None") && config.is_none() {
        errs.required(
            "spec.dnsConfig",
            "must provide `dnsConfig` when `dnsPolicy` is None",
        );
    }
    let Some(config) = config else { return };
    let servers = config.nameservers.as_deref().unwrap_or_default();
    if policy == Some("None") && servers.is_empty() {
        errs.required(
            "spec.dnsConfig.nameservers",
            "must provide at least one DNS nameserver when `dnsPolicy` is None",
        );
    }
    if servers.len() > MAX_DNS_NAMESERVERS {
        errs.invalid(
            "spec.dnsConfig.nameservers",
            &format!("{servers:?}"),
            &format!("must not have more than {MAX_DNS_NAMESERVERS} nameservers"),
        );
    }
    for (i, s) in servers.iter().enumerate() {
        if s.parse::<IpAddr>().is_err() {
            errs.invalid(
                &format!("spec.dnsConfig.nameservers[{i}]"),
                &quote(s),
                "must be valid IP address",
            );
        }
    }
    let searches = config.searches.as_deref().unwrap_or_default();
    if searches.len() > MAX_DNS_SEARCH_PATHS {
        errs.invalid(
            "spec.dnsConfig.searches",
            &format!("{searches:?}"),
            &format!("must not have more than {MAX_DNS_SEARCH_PATHS} search paths"),
        );
    }
    let chars: usize = searches.iter().map(String::len).sum::<usize>() + searches.len();
    if chars > MAX_DNS_SEARCH_LIST_CHARS {
        errs.invalid(
            "spec.dnsConfig.searches",
            &format!("{searches:?}"),
            &format!(
                "must not have more than {MAX_DNS_SEARCH_LIST_CHARS} characters (including spaces) in the search list"
            ),
        );
    }
    for (i, s) in searches.iter().enumerate() {
        // A trailing dot (fully qualified) is allowed.
        let s = s.strip_suffix('.').unwrap_or(s);
        errs.name_check(
            &format!("spec.dnsConfig.searches[{i}]"),
            s,
            names::dns1123_subdomain(s),
        );
    }
}

fn id_range(errs: &mut Errs, field: &str, value: Option<i64>) {
    if let Some(v) = value
        && !(0..=i64::from(i32::MAX)).contains(&v)
    {
        errs.invalid(
            field,
            &v.to_string(),
            "must be between 0 and 2147483647, inclusive",
        );
    }
}

fn pod_security(errs: &mut Errs, sc: &PodSecurityContext) {
    id_range(errs, "spec.securityContext.runAsUser", sc.run_as_user);
    id_range(errs, "spec.securityContext.runAsGroup", sc.run_as_group);
    id_range(errs, "spec.securityContext.fsGroup", sc.fs_group);
    for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
        id_range(
            errs,
            &format!("spec.securityContext.supplementalGroups[{i}]"),
            Some(*g),
        );
    }
}

/// The names of the pod's volumes, for mounts to refer to, and which of them are image
/// volumes (their mounts take no `subPath`).
#[derive(Debug, Default)]
pub(super) struct VolumeNames {
    names: BTreeSet<String>,
    images: BTreeSet<String>,
}

impl VolumeNames {
    /// Adds a volume; false when its name was taken.
    pub(super) fn insert(&mut self, name: &str, image: bool) -> bool {
        if image {
            self.images.insert(name.to_string());
        }
        self.names.insert(name.to_string())
    }

    /// Whether the pod has volume `name`.
    pub(super) fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Whether volume `name` is an image volume.
    pub(super) fn is_image(&self, name: &str) -> bool {
        self.images.contains(name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::manifest::{defaults, parse};

    /// A defaulted pod from YAML (name and namespace set, as static_pod would).
    pub(super) fn pod(yaml: &str) -> Pod {
        let mut p = parse(yaml.as_bytes()).unwrap().remove(0);
        defaults::apply(&mut p);
        p.metadata.namespace.get_or_insert_with(|| "default".into());
        p
    }

    pub(super) fn errors(yaml: &str) -> Vec<String> {
        match validate(&pod(yaml)) {
            Ok(()) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    pub(super) fn has(errs: &[String], want: &str) -> bool {
        errs.iter().any(|e| e.contains(want))
    }

    pub(super) const GOOD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web-node, labels: {app: web, example.com/tier: front}}
spec:
  initContainers:
  - name: init
    image: busybox:1
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: httpd
    image: httpd:1
    ports: [{name: http, containerPort: 80, hostPort: 8080}]
    env: [{name: MY_POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}, {name: X, value: "1"}]
    resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: "1", memory: 64Mi}}
    volumeMounts: [{name: data, mountPath: /usr/share/data, readOnly: true}, {name: host, mountPath: /host, subPath: sub}]
    livenessProbe: {httpGet: {port: 80}}
  volumes:
  - name: data
    emptyDir: {medium: Memory, sizeLimit: 16Mi}
  - name: host
    hostPath: {path: /var/tmp, type: DirectoryOrCreate}
"#;

    #[test]
    fn a_good_pod_passes() {
        assert_eq!(errors(GOOD), Vec::<String>::new());
    }

    #[test]
    fn metadata_rules() {
        let e = errors(&GOOD.replace("name: web-node,", "name: Web_Node,"));
        assert!(
            has(
                &e,
                "metadata.name: Invalid value: \"Web_Node\": a lowercase RFC 1123 subdomain"
            ),
            "{e:?}"
        );
        let e = errors(&GOOD.replace("app: web,", "app: -web-,"));
        assert!(
            has(
                &e,
                "metadata.labels: Invalid value: \"-web-\": a valid label"
            ),
            "{e:?}"
        );
        let mut p = pod(GOOD);
        p.metadata.name = None;
        p.metadata.namespace = Some("Bad".into());
        let e: Vec<String> = validate(&p)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            has(
                &e,
                "metadata.name: Required value: name or generateName is required"
            ),
            "{e:?}"
        );
        assert!(
            has(&e, "metadata.namespace: Invalid value: \"Bad\""),
            "{e:?}"
        );
    }

    #[test]
    fn policies() {
        let e = errors(&GOOD.replace(
            "spec:\n",
            "spec:\n  restartPolicy: Sometimes\n  dnsPolicy: None\n",
        ));
        assert!(
            has(
                &e,
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
            ),
            "{e:?}"
        );
        assert!(has(&e, "spec.dnsConfig: Required value"), "{e:?}");
        let e = errors(&GOOD.replace(
            "spec:\n",
            "spec:\n  dnsPolicy: None\n  dnsConfig: {nameservers: [1.1.1.1, 8.8.8.8, 9.9.9.9, 1.0.0.1, x], searches: [a.b., Bad]}\n  terminationGracePeriodSeconds: -1\n",
        ));
        assert!(has(&e, "must not have more than 3 nameservers"), "{e:?}");
        assert!(
            has(&e, "spec.dnsConfig.nameservers[4]: Invalid value: \"x\""),
            "{e:?}"
        );
        assert!(has(&e, "spec.dnsConfig.searches[1]"), "{e:?}");
        assert!(!has(&e, "spec.dnsConfig.searches[0]"), "{e:?}");
        assert!(
            has(&e, "spec.terminationGracePeriodSeconds: Invalid value: -1"),
            "{e:?}"
        );
    }

    #[test]
    fn a_user_namespaced_pod_keeps_the_nodes_namespaces_out() {
        let e = errors(&GOOD.replace(
            "spec:\n",
            "spec:\n  hostUsers: false\n  hostNetwork: true\n  hostPID: true\n  hostIPC: true\n",
        ));
        for f in ["hostNetwork", "HostPID", "HostIPC"] {
            let want =
                format!("spec.securityContext.{f}: Forbidden: when `pod.Spec.HostUsers` is false");
            assert!(has(&e, &want), "{e:?}");
        }
        assert!(errors(&GOOD.replace("spec:\n", "spec:\n  hostUsers: false\n")).is_empty());
    }

    #[test]
    fn summary_like_go() {
        let one = FieldError {
            field: "a".into(),
            reason: "Required value".into(),
        };
        assert_eq!(summary(std::slice::from_ref(&one)), "a: Required value");
        assert_eq!(
            summary(&[one.clone(), one]),
            "[a: Required value, a: Required value]"
        );
    }
}
