//! Container validation: names unique across init and app containers, image and policies,
//! ports and host-port conflicts, env, volume mounts, resources, probes, lifecycle and
//! security context.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, LifecycleHandler, PodSpec, Probe, ResourceRequirements, SecurityContext,
};

use super::{Errs, VolumeNames, has_backsteps, id_range, is_absolute, quote};
use crate::manifest::names;
use crate::manifest::quantity::{ParsedQuantity, parse_quantity};

const FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

const RESOURCE_FIELDS: &[&str] = &[
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
];

/// Validates init containers, then app containers, as one name space.
pub(super) fn all(errs: &mut Errs, spec: &PodSpec, volumes: &VolumeNames) {
    let host_network = spec.host_network.unwrap_or(false);
    let mut names = BTreeSet::new();
    // App container names first: a clash is reported on the init container, as Go does.
    for c in &spec.containers {
        names.insert(c.name.clone());
    }
    let mut app_names = BTreeSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        if let Some(p) = c.restart_policy.as_deref()
            && p != "Always"
        {
            errs.not_supported(&format!("{path}.restartPolicy"), p, &["Always"]);
        }
        if !sidecar {
            for (field, set) in [
                ("lifecycle", c.lifecycle.is_some()),
                ("livenessProbe", c.liveness_probe.is_some()),
                ("readinessProbe", c.readiness_probe.is_some()),
                ("startupProbe", c.startup_probe.is_some()),
            ] {
                if set {
                    errs.forbidden(
                        &format!("{path}.{field}"),
                        "may not be set for init containers without restartPolicy=Always",
                    );
                }
            }
        } else if c.readiness_probe.is_some() {
            errs.forbidden(
                &format!("{path}.readinessProbe"),
                "may not be set for init containers",
            );
        }
        if !c.name.is_empty() && !names.insert(c.name.clone()) {
            errs.duplicate(&format!("{path}.name"), &c.name);
        }
        common(errs, &path, c, volumes, host_network);
    }
    let mut host_ports = BTreeSet::new();
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        if !c.name.is_empty() && !app_names.insert(c.name.clone()) {
            errs.duplicate(&format!("{path}.name"), &c.name);
        }
        if c.restart_policy.is_some() {
            errs.forbidden(
                &format!("{path}.restartPolicy"),
                "may not be set for non-init containers",
            );
        }
        common(errs, &path, c, volumes, host_network);
        host_port_conflicts(errs, &path, c, &mut host_ports);
    }
    if spec.containers.is_empty() {
        errs.required("spec.containers", "");
    }
}

/// What every container must satisfy.
fn common(errs: &mut Errs, path: &str, c: &Container, volumes: &VolumeNames, host_network: bool) {
    let name_path = format!("{path}.name");
    if c.name.is_empty() {
        errs.required(&name_path, "");
    } else {
        errs.name_check(&name_path, &c.name, names::dns1123_label(&c.name));
    }
    let image = c.image.as_deref().unwrap_or("");
    if image.is_empty() {
        errs.required(&format!("{path}.image"), "");
    } else if image.trim() != image {
        errs.invalid(
            &format!("{path}.image"),
            &quote(image),
            "must not have leading or trailing whitespace",
        );
    }
    errs.one_of(
        &format!("{path}.imagePullPolicy"),
        c.image_pull_policy.as_deref(),
        &["Always", "IfNotPresent", "Never"],
    );
    errs.one_of(
        &format!("{path}.terminationMessagePolicy"),
        c.termination_message_policy.as_deref(),
        &["File", "FallbackToLogsOnError"],
    );
    ports(errs, path, c, host_network);
    for (i, e) in c.env.iter().flatten().enumerate() {
        env(errs, &format!("{path}.env[{i}]"), e);
    }
    mounts(errs, path, c, volumes);
    if let Some(r) = &c.resources {
        resources(errs, &format!("{path}.resources"), r);
    }
    for (field, p, liveness_like) in [
        ("livenessProbe", &c.liveness_probe, true),
        ("readinessProbe", &c.readiness_probe, false),
        ("startupProbe", &c.startup_probe, true),
    ] {
        if let Some(p) = p {
            probe(errs, &format!("{path}.{field}"), p, liveness_like);
        }
    }
    if let Some(lc) = &c.lifecycle {
        for (field, h) in [("postStart", &lc.post_start), ("preStop", &lc.pre_stop)] {
            if let Some(h) = h {
                handler(errs, &format!("{path}.lifecycle.{field}"), h);
            }
        }
    }
    if let Some(sc) = &c.security_context {
        security(errs, &format!("{path}.securityContext"), sc);
    }
}

fn ports(errs: &mut Errs, path: &str, c: &Container, host_network: bool) {
    let mut port_names = BTreeSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let pp = format!("{path}.ports[{i}]");
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            errs.name_check(&format!("{pp}.name"), name, names::iana_svc_name(name));
            if !port_names.insert(name.to_string()) {
                errs.duplicate(&format!("{pp}.name"), name);
            }
        }
        if !(1..=65535).contains(&p.container_port) {
            errs.invalid(
                &format!("{pp}.containerPort"),
                &p.container_port.to_string(),
                "must be between 1 and 65535, inclusive",
            );
        }
        let host_port = p.host_port.unwrap_or(0);
        if host_port != 0 && !(1..=65535).contains(&host_port) {
            errs.invalid(
                &format!("{pp}.hostPort"),
                &host_port.to_string(),
                "must be between 1 and 65535, inclusive",
            );
        }
        if host_network && host_port != p.container_port {
            errs.invalid(
                &format!("{pp}.hostPort"),
                &host_port.to_string(),
                "must match `containerPort` when `hostNetwork` is true",
            );
        }
        errs.one_of(
            &format!("{pp}.protocol"),
            p.protocol.as_deref(),
            &["SCTP", "TCP", "UDP"],
        );
        if let Some(ip) = p.host_ip.as_deref().filter(|ip| !ip.is_empty())
            && ip.parse::<IpAddr>().is_err()
        {
            errs.invalid(
                &format!("{pp}.hostIP"),
                &quote(ip),
                "must be a valid IP address",
            );
        }
    }
}

/// One (protocol, host IP, host port) per pod among app containers.
fn host_port_conflicts(errs: &mut Errs, path: &str, c: &Container, seen: &mut BTreeSet<String>) {
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let port = p.host_port.unwrap_or(0);
        if port == 0 {
            continue;
        }
        let key = format!(
            "{}/{}/{port}",
            p.protocol.as_deref().unwrap_or("TCP"),
            p.host_ip.as_deref().unwrap_or("")
        );
        if !seen.insert(key.clone()) {
            errs.duplicate(&format!("{path}.ports[{i}].hostPort"), &key);
        }
    }
}

fn env(errs: &mut Errs, path: &str, e: &EnvVar) {
    let name_path = format!("{path}.name");
    if e.name.is_empty() {
        errs.required(&name_path, "");
    } else {
        errs.name_check(&name_path, &e.name, names::env_var_name(&e.name));
    }
    let Some(from) = &e.value_from else { return };
    let from_path = format!("{path}.valueFrom");
    if e.value.as_deref().is_some_and(|v| !v.is_empty()) {
        errs.invalid(
            &from_path,
            "\"\"",
            "may not be specified when `value` is not empty",
        );
    }
    let count = [
        from.field_ref.is_some(),
        from.resource_field_ref.is_some(),
        from.config_map_key_ref.is_some(),
        from.secret_key_ref.is_some(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    match count {
        0 => errs.invalid(
            &from_path,
            "\"\"",
            "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
        ),
        1 => {}
        _ => errs.invalid(
            &from_path,
            "\"\"",
            "may not have more than one field specified at a time",
        ),
    }
    if let Some(f) = &from.field_ref {
        let fp = format!("{from_path}.fieldRef");
        let version = f.api_version.as_deref().unwrap_or("");
        if version != "v1" {
            errs.not_supported(&format!("{fp}.apiVersion"), version, &["v1"]);
        }
        field_path(errs, &format!("{fp}.fieldPath"), &f.field_path);
    }
    if let Some(r) = &from.resource_field_ref {
        let rp = format!("{from_path}.resourceFieldRef");
        if !RESOURCE_FIELDS.contains(&r.resource.as_str()) && !r.resource.contains("hugepages-") {
            errs.not_supported(&format!("{rp}.resource"), &r.resource, RESOURCE_FIELDS);
        }
        if let Some(d) = &r.divisor {
            match parse_quantity(&d.0) {
                Ok(q) if q.nanos() > 0 => {}
                Ok(_) => errs.invalid(&format!("{rp}.divisor"), &quote(&d.0), "must be positive"),
                Err(e) => errs.invalid(&format!("{rp}.divisor"), &quote(&d.0), &e.to_string()),
            }
        }
    }
}

/// A downward-API field path: one of the supported paths, or a subscripted label/annotation.
fn field_path(errs: &mut Errs, path: &str, fp: &str) {
    for prefix in ["metadata.labels", "metadata.annotations"] {
        if let Some(rest) = fp.strip_prefix(prefix)
            && let Some(key) = rest.strip_prefix("['").and_then(|r| r.strip_suffix("']"))
        {
            let msgs = names::qualified_name(&key.to_lowercase());
            errs.name_check(path, key, msgs);
            return;
        }
    }
    if fp.is_empty() {
        errs.required(path, "");
    } else if !FIELD_PATHS.contains(&fp) {
        errs.not_supported(path, fp, FIELD_PATHS);
    }
}

fn mounts(errs: &mut Errs, path: &str, c: &Container, volumes: &VolumeNames) {
    let privileged = c
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    let mut mount_paths = BTreeSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mp = format!("{path}.volumeMounts[{i}]");
        if m.name.is_empty() {
            errs.required(&format!("{mp}.name"), "");
        } else if !volumes.contains(&m.name) {
            errs.not_found(&format!("{mp}.name"), &m.name);
        }
        let target = format!("{mp}.mountPath");
        if m.mount_path.is_empty() {
            errs.required(&target, "");
        } else {
            if !is_absolute(&m.mount_path) {
                errs.invalid(&target, &quote(&m.mount_path), "must be an absolute path");
            }
            if !mount_paths.insert(m.mount_path.clone()) {
                errs.invalid(&target, &quote(&m.mount_path), "must be unique");
            }
        }
        let sub = m.sub_path.as_deref().unwrap_or("");
        if volumes.is_image(&m.name) {
            // Go before 1.33 (and without CRI's image_sub_path, which cri-api 0.32 lacks).
            let expr = m.sub_path_expr.as_deref().unwrap_or("");
            for (field, value) in [("subPath", sub), ("subPathExpr", expr)] {
                if !value.is_empty() {
                    errs.invalid(
                        &format!("{mp}.{field}"),
                        &quote(value),
                        "not allowed in image volume sources",
                    );
                }
            }
        }
        if !sub.is_empty() {
            let sp = format!("{mp}.subPath");
            if is_absolute(sub) {
                errs.invalid(&sp, &quote(sub), "must be a relative path");
            }
            if has_backsteps(sub) {
                errs.invalid(&sp, &quote(sub), "must not contain '..'");
            }
            if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                errs.invalid(
                    &format!("{mp}.subPathExpr"),
                    &quote(m.sub_path_expr.as_deref().unwrap_or("")),
                    "subPathExpr and subPath are mutually exclusive",
                );
            }
        }
        if let Some(prop) = m.mount_propagation.as_deref() {
            let pp = format!("{mp}.mountPropagation");
            let supported = ["Bidirectional", "HostToContainer", "None"];
            if !supported.contains(&prop) {
                errs.not_supported(&pp, prop, &supported);
            } else if prop == "Bidirectional" && !privileged {
                errs.forbidden(
                    &pp,
                    "Bidirectional mount propagation is available only to privileged containers",
                );
            }
        }
    }
}

/// A standard container resource, a hugepage size, or an extended (qualified) resource.
fn resource_name_ok(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage")
        || name.starts_with("hugepages-")
        || (name.contains('/') && names::qualified_name(name).is_empty())
}

fn resources(errs: &mut Errs, path: &str, r: &ResourceRequirements) {
    let mut parsed = |kind: &str, list: &Option<std::collections::BTreeMap<String, _>>| {
        let mut out = Vec::new();
        for (name, q) in list.iter().flatten() {
            let p = format!("{path}.{kind}[{name}]");
            let q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity = q;
            if !resource_name_ok(name) {
                errs.invalid(
                    &p,
                    &quote(name),
                    "must be a standard resource for containers",
                );
            }
            match parse_quantity(&q.0) {
                Err(e) => errs.invalid(&p, &quote(&q.0), &e.to_string()),
                Ok(v) if v.is_negative() => {
                    errs.invalid(&p, &quote(&q.0), "must be greater than or equal to 0")
                }
                Ok(v) => out.push((name.clone(), q.0.clone(), v)),
            }
        }
        out
    };
    let limits: Vec<(String, String, ParsedQuantity)> = parsed("limits", &r.limits);
    let requests = parsed("requests", &r.requests);
    for (kind, list) in [("limits", &limits), ("requests", &requests)] {
        for (name, text, value) in list {
            // Devices come whole: an extended resource's quantity is a count.
            if is_extended(name) && value.nanos() % 1_000_000_000 != 0 {
                errs.invalid(
                    &format!("{path}.{kind}[{name}]"),
                    &quote(text),
                    "must be an integer",
                );
            }
        }
    }
    // Go reports these two on `requests` itself, not on the resource's key.
    let requests_path = format!("{path}.requests");
    for (name, text, value) in &requests {
        match limits.iter().find(|(n, _, _)| n == name) {
            Some((_, limit_text, limit)) if value != limit && !overcommit_allowed(name) => {
                errs.invalid(
                    &requests_path,
                    &quote(text),
                    &format!("must be equal to {name} limit of {limit_text}"),
                );
            }
            Some((_, limit_text, limit)) if value > limit => {
                errs.invalid(
                    &requests_path,
                    &quote(text),
                    &format!("must be less than or equal to {name} limit of {limit_text}"),
                );
            }
            Some(_) => {}
            None if !overcommit_allowed(name) => errs.required(
                &format!("{path}.limits"),
                "Limit must be set for non overcommitable resources",
            ),
            None => {}
        }
    }
}

/// Go's `IsNativeResource`: no domain, or the `kubernetes.io` one.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Go's `IsExtendedResourceName` for a name validation already accepted.
fn is_extended(name: &str) -> bool {
    !is_native(name) && !name.starts_with("requests.")
}

/// Go's `IsOvercommitAllowed`: requests below limits only for native resources other than
/// huge pages (extended resources are devices, counted whole and given exclusively).
fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !name.starts_with("hugepages-")
}

fn probe(errs: &mut Errs, path: &str, p: &Probe, liveness_like: bool) {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    match handlers {
        0 => errs.required(path, "must specify a handler type"),
        1 => {}
        _ => errs.forbidden(path, "may not specify more than 1 handler type"),
    }
    for (field, v) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        errs.non_negative(&format!("{path}.{field}"), v.map(i64::from));
    }
    if liveness_like && p.success_threshold.is_some_and(|s| s != 1) {
        errs.invalid(
            &format!("{path}.successThreshold"),
            &p.success_threshold.unwrap_or(0).to_string(),
            "must be 1",
        );
    }
    errs.non_negative(
        &format!("{path}.terminationGracePeriodSeconds"),
        p.termination_grace_period_seconds,
    );
}

fn handler(errs: &mut Errs, path: &str, h: &LifecycleHandler) {
    let count = [
        h.exec.is_some(),
        h.http_get.is_some(),
        h.tcp_socket.is_some(),
        h.sleep.is_some(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count();
    match count {
        0 => errs.required(path, "must specify a handler type"),
        1 => {}
        _ => errs.forbidden(path, "may not specify more than 1 handler type"),
    }
}

fn security(errs: &mut Errs, path: &str, sc: &SecurityContext) {
    id_range(errs, &format!("{path}.runAsUser"), sc.run_as_user);
    id_range(errs, &format!("{path}.runAsGroup"), sc.run_as_group);
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            errs.invalid(
                path,
                "\"\"",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            );
        }
        let adds_sys_admin = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref())
            .is_some_and(|add| add.iter().any(|a| a == "SYS_ADMIN" || a == "CAP_SYS_ADMIN"));
        if adds_sys_admin {
            errs.invalid(
                path,
                "\"\"",
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{GOOD, errors, has};

    #[test]
    fn names_and_images() {
        let e = errors(&GOOD.replace(
            "- name: init\n    image: busybox:1",
            "- name: httpd\n    image: \" busybox \"",
        ));
        assert!(
            has(
                &e,
                "spec.initContainers[0].name: Duplicate value: \"httpd\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.initContainers[0].image: Invalid value: \" busybox \": must not have leading or trailing whitespace"
            ),
            "{e:?}"
        );
        let e = errors(&GOOD.replace("image: httpd:1", "imagePullPolicy: Sometimes"));
        assert!(has(&e, "spec.containers[0].image: Required value"), "{e:?}");
        assert!(
            has(
                &e,
                "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\""
            ),
            "{e:?}"
        );
        let e = errors(&GOOD.replace("- name: httpd", "- name: Httpd"));
        assert!(
            has(
                &e,
                "spec.containers[0].name: Invalid value: \"Httpd\": a lowercase RFC 1123 label"
            ),
            "{e:?}"
        );
        let e = errors(&GOOD.replace(
            "  containers:\n  - name: httpd",
            "  containers: []\n  x:\n  - name: httpd",
        ));
        assert!(has(&e, "spec.containers: Required value"), "{e:?}");
    }

    #[test]
    fn ports() {
        let e = errors(&GOOD.replace(
            "ports: [{name: http, containerPort: 80, hostPort: 8080}]",
            "ports: [{name: http, containerPort: 0, hostPort: 8080}, {name: http, containerPort: 81, hostPort: 8080, protocol: ICMP}, {containerPort: 82, hostPort: 70000}]",
        ));
        assert!(
            has(
                &e,
                "spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].ports[1].name: Duplicate value: \"http\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].ports[2].hostPort: Invalid value: 70000"
            ),
            "{e:?}"
        );
        let two = GOOD.replace(
            "    livenessProbe: {httpGet: {port: 80}}\n",
            "    livenessProbe: {httpGet: {port: 80}}\n  - name: second\n    image: busybox:1\n    ports: [{containerPort: 90, hostPort: 8080}]\n",
        );
        let e = errors(&two);
        assert!(
            has(
                &e,
                "spec.containers[1].ports[0].hostPort: Duplicate value: \"TCP//8080\""
            ),
            "{e:?}"
        );
        let e = errors(&GOOD.replace("spec:\n", "spec:\n  hostNetwork: true\n"));
        assert!(
            has(
                &e,
                "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true"
            ),
            "{e:?}"
        );
    }

    #[test]
    fn env_and_mounts() {
        let e = errors(&GOOD.replace(
            "{name: X, value: \"1\"}",
            "{name: \"A=B\", value: \"1\"}, {name: Y, value: v, valueFrom: {fieldRef: {fieldPath: spec.secret}}}, {name: Z, valueFrom: {}}",
        ));
        assert!(
            has(&e, "spec.containers[0].env[1].name: Invalid value: \"A=B\""),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].env[2].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].env[2].valueFrom.fieldRef.fieldPath: Unsupported value: \"spec.secret\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].env[3].valueFrom: Invalid value: \"\": must specify one of"
            ),
            "{e:?}"
        );
        let ok = errors(&GOOD.replace(
            "fieldPath: metadata.name",
            "fieldPath: \"metadata.labels['app']\"",
        ));
        assert!(ok.is_empty(), "{ok:?}");

        let e = errors(&GOOD.replace(
            "{name: host, mountPath: /host, subPath: sub}",
            "{name: nothing, mountPath: /usr/share/data}, {name: host, mountPath: rel, subPath: ../up, mountPropagation: Bidirectional}",
        ));
        assert!(
            has(
                &e,
                "spec.containers[0].volumeMounts[1].name: Not found: \"nothing\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/usr/share/data\": must be unique"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].volumeMounts[2].mountPath: Invalid value: \"rel\": must be an absolute path"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].volumeMounts[2].subPath: Invalid value: \"../up\": must not contain '..'"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].volumeMounts[2].mountPropagation: Forbidden"
            ),
            "{e:?}"
        );
    }

    #[test]
    fn extended_resources_are_whole_and_requested_as_limited() {
        let e = errors(&GOOD.replace(
            "resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: \"1\", memory: 64Mi}}",
            "resources: {requests: {example.com/dev: 1, vendor.io/x: 1}, limits: {example.com/dev: 2, example.com/half: 500m}}",
        ));
        for want in [
            "spec.containers[0].resources.requests: Invalid value: \"1\": must be equal to example.com/dev limit of 2",
            "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources",
            "spec.containers[0].resources.limits[example.com/half]: Invalid value: \"500m\": must be an integer",
        ] {
            assert!(has(&e, want), "{want}: {e:?}");
        }
        let ok = errors(&GOOD.replace(
            "resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: \"1\", memory: 64Mi}}",
            "resources: {requests: {example.com/dev: 2, cpu: 100m}, limits: {example.com/dev: 2, cpu: \"1\"}}",
        ));
        assert!(ok.is_empty(), "{ok:?}");
    }

    #[test]
    fn resources_probes_and_security() {
        let e = errors(&GOOD.replace(
            "resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: \"1\", memory: 64Mi}}",
            "resources: {requests: {cpu: \"2\", memory: -1, gpu: 1}, limits: {cpu: \"1\", memory: 10Zi}}\n    securityContext: {privileged: true, allowPrivilegeEscalation: false, runAsUser: -5}",
        ));
        assert!(
            has(
                &e,
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].resources.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].resources.limits[memory]: Invalid value: \"10Zi\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].securityContext.runAsUser: Invalid value: -5"
            ),
            "{e:?}"
        );

        let e = errors(&GOOD.replace(
            "livenessProbe: {httpGet: {port: 80}}",
            "livenessProbe: {successThreshold: 2, periodSeconds: -1}",
        ));
        assert!(
            has(
                &e,
                "spec.containers[0].livenessProbe: Required value: must specify a handler type"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.containers[0].livenessProbe.periodSeconds: Invalid value: -1"
            ),
            "{e:?}"
        );
    }

    #[test]
    fn init_container_rules() {
        let e = errors(&GOOD.replace(
            "- name: init\n    image: busybox:1",
            "- name: init\n    image: busybox:1\n    restartPolicy: Never\n    readinessProbe: {exec: {command: [\"true\"]}}",
        ));
        assert!(
            has(
                &e,
                "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
            ),
            "{e:?}"
        );
        assert!(
            has(
                &e,
                "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"
            ),
            "{e:?}"
        );
        let sidecar = errors(&GOOD.replace(
            "- name: init\n    image: busybox:1",
            "- name: init\n    image: busybox:1\n    restartPolicy: Always\n    livenessProbe: {exec: {command: [\"true\"]}}",
        ));
        assert!(sidecar.is_empty(), "{sidecar:?}");
        let e = errors(&GOOD.replace(
            "image: httpd:1",
            "image: httpd:1\n    restartPolicy: Always",
        ));
        assert!(
            has(
                &e,
                "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"
            ),
            "{e:?}"
        );
    }
}
