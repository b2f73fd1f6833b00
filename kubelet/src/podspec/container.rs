//! A container's `ContainerConfig`, as the Go kubelet's `generateContainerConfig` makes it:
//! metadata (attempt = restart count), image, command and args with `$(VAR)` expanded,
//! environment, mounts, the Go kubelet's labels and annotations (restart recovery reads them
//! back), the log path, stdin/tty, and the linux resources and security context.

use std::collections::HashMap;

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::Container;

use super::{ContainerContext, NodeContext, SpecError, env, hash, identity, resources, security};
use crate::types::{Pod, labels};

/// The API's default `terminationMessagePath`.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Termination message policy (container annotation).
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// Pod deletion grace period (container annotation).
pub const DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
/// The preStop handler as JSON (container annotation).
pub const PRE_STOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
/// The container's ports as JSON (container annotation).
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";

/// The container's config for one instance.
pub fn container_config(
    pod: &Pod,
    container: &Container,
    node: &NodeContext,
    ctx: &ContainerContext<'_>,
) -> Result<cri::ContainerConfig, SpecError> {
    identity(pod)?;
    let envs = ctx.envs.clone();
    let (command, args) = env::expand_command_and_args(container, &envs);
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: ctx.restart_count,
        }),
        image: Some(cri::ImageSpec {
            image: ctx.image.to_string(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs,
        mounts: ctx.mounts.clone(),
        devices: ctx.devices.clone(),
        labels: container_labels(pod, container),
        annotations: container_annotations(pod, container, ctx.restart_count)?,
        log_path: container_log_path(&container.name, ctx.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(resources::linux_resources(pod, container, node)?),
            security_context: Some(security::container_security_context(
                pod,
                container,
                &node.seccomp_profile_root,
            )?),
        }),
        windows: None,
        cdi_devices: Vec::new(),
    })
}

/// `<container>/<restartCount>.log`, relative to the sandbox's log directory.
pub fn container_log_path(container: &str, restart_count: u32) -> String {
    format!("{container}/{restart_count}.log")
}

/// Pod name, namespace and UID, and the container's name.
pub fn container_labels(pod: &Pod, container: &Container) -> HashMap<String, String> {
    let m = &pod.metadata;
    HashMap::from([
        (labels::POD_NAME.into(), m.name.clone().unwrap_or_default()),
        (
            labels::POD_NAMESPACE.into(),
            m.namespace.clone().unwrap_or_else(|| "default".into()),
        ),
        (labels::POD_UID.into(), m.uid.clone().unwrap_or_default()),
        (labels::CONTAINER_NAME.into(), container.name.clone()),
    ])
}

/// The Go kubelet's container annotations: spec hash, restart count, termination message
/// path and policy, grace periods, preStop handler and ports (JSON).
pub fn container_annotations(
    pod: &Pod,
    container: &Container,
    restart_count: u32,
) -> Result<HashMap<String, String>, SpecError> {
    let json_err = |what: &str, e: serde_json::Error| {
        SpecError::invalid(
            format!("spec.containers[{}].{what}", container.name),
            e.to_string(),
        )
    };
    let mut a = HashMap::from([
        (
            labels::CONTAINER_HASH.into(),
            hash::container_hash(container),
        ),
        (
            labels::CONTAINER_HASH_WITHOUT_RESOURCES.into(),
            hash::container_hash_without_resources(container),
        ),
        (labels::RESTART_COUNT.into(), restart_count.to_string()),
        (
            labels::TERMINATION_MESSAGE_PATH.into(),
            container
                .termination_message_path
                .clone()
                .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.into()),
        ),
        (
            TERMINATION_MESSAGE_POLICY.into(),
            container
                .termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".into()),
        ),
    ]);
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(DELETION_GRACE_PERIOD.into(), g.to_string());
    }
    if let Some(g) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        a.insert(labels::GRACE_PERIOD.into(), g.to_string());
    }
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
    {
        let json = serde_json::to_string(pre_stop).map_err(|e| json_err("lifecycle.preStop", e))?;
        a.insert(PRE_STOP_HANDLER.into(), json);
    }
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty()) {
        // The API defaults the protocol; an undefaulted manifest reads the same.
        let mut ports = ports.clone();
        for p in &mut ports {
            p.protocol.get_or_insert_with(|| "TCP".into());
        }
        let json = serde_json::to_string(&ports).map_err(|e| json_err("ports", e))?;
        a.insert(CONTAINER_PORTS.into(), json);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::podspec::testutil::{node, pod};

    const POD: &str = "metadata:
  name: web-node1
  namespace: prod
  uid: 0b8a-11
  labels: {app: web}
spec:
  terminationGracePeriodSeconds: 45
  containers:
  - name: web
    image: httpd:1
    command: [httpd, -f, -p, '$(PORT)']
    args: ['$(HOME)']
    workingDir: /srv
    stdin: true
    tty: true
    env: [{name: PORT, value: '8080'}]
    ports: [{containerPort: 8080, hostPort: 80}]
    lifecycle: {preStop: {exec: {command: [sleep, '1']}}}
    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {cpu: 200m, memory: 128Mi}}
    securityContext: {allowPrivilegeEscalation: false}
";

    #[test]
    fn container_basics() {
        let p = pod(POD);
        let c = &p.spec.as_ref().unwrap().containers[0];
        let mount = cri::Mount {
            container_path: "/data".into(),
            host_path: "/var/lib/x".into(),
            ..Default::default()
        };
        let ctx = ContainerContext {
            restart_count: 3,
            mounts: vec![mount.clone()],
            devices: vec![cri::Device {
                container_path: "/dev/xvda".into(),
                host_path: "/root/pods/u/volumeDevices/kubernetes.io~csi/pv".into(),
                permissions: "mrw".into(),
            }],
            envs: vec![cri::KeyValue {
                key: "PORT".into(),
                value: "8080".into(),
            }],
            image: "sha256:abc",
        };
        let cfg = container_config(&p, c, &node(), &ctx).unwrap();
        let m = cfg.metadata.as_ref().unwrap();
        assert_eq!((m.name.as_str(), m.attempt), ("web", 3));
        assert_eq!(cfg.devices, ctx.devices);
        let img = cfg.image.as_ref().unwrap();
        assert_eq!(img.image, "sha256:abc");
        assert_eq!(img.user_specified_image, "httpd:1");
        assert_eq!(cfg.command, ["httpd", "-f", "-p", "8080"]);
        assert_eq!(cfg.args, ["$(HOME)"]);
        assert_eq!(cfg.working_dir, "/srv");
        assert_eq!(cfg.envs.len(), 1);
        assert_eq!(cfg.mounts, [mount]);
        assert_eq!(cfg.log_path, "web/3.log");
        assert!(cfg.stdin && cfg.tty && !cfg.stdin_once);

        assert_eq!(cfg.labels.len(), 4);
        assert_eq!(cfg.labels[labels::POD_NAME], "web-node1");
        assert_eq!(cfg.labels[labels::POD_NAMESPACE], "prod");
        assert_eq!(cfg.labels[labels::POD_UID], "0b8a-11");
        assert_eq!(cfg.labels[labels::CONTAINER_NAME], "web");

        let a = &cfg.annotations;
        assert_eq!(a[labels::CONTAINER_HASH], hash::container_hash(c));
        assert_eq!(a[labels::RESTART_COUNT], "3");
        assert_eq!(a[labels::TERMINATION_MESSAGE_PATH], "/dev/termination-log");
        assert_eq!(a[TERMINATION_MESSAGE_POLICY], "File");
        assert_eq!(a[labels::GRACE_PERIOD], "45");
        assert_eq!(a[PRE_STOP_HANDLER], r#"{"exec":{"command":["sleep","1"]}}"#);
        let ports: serde_json::Value = serde_json::from_str(&a[CONTAINER_PORTS]).unwrap();
        assert_eq!(
            ports,
            serde_json::json!([{"containerPort": 8080, "hostPort": 80, "protocol": "TCP"}])
        );
        assert!(!a.contains_key(DELETION_GRACE_PERIOD));

        let linux = cfg.linux.as_ref().unwrap();
        let r = linux.resources.as_ref().unwrap();
        assert_eq!(r.cpu_shares, 102);
        assert_eq!(r.cpu_quota, 20_000);
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
        let sc = linux.security_context.as_ref().unwrap();
        assert!(sc.no_new_privs);
    }

    #[test]
    fn the_environment_comes_from_the_context() {
        // The caller resolved it (secrets and configMaps included); the config does not
        // compute it again.
        let p = pod("metadata: {name: p, uid: u}
spec:
  containers:
  - name: c
    image: x
    command: [echo, '$(S)']
    env: [{name: S, valueFrom: {secretKeyRef: {name: s, key: k}}}]");
        let c = &p.spec.as_ref().unwrap().containers[0];
        let envs = vec![cri::KeyValue {
            key: "S".into(),
            value: "from-secret".into(),
        }];
        let ctx = ContainerContext {
            restart_count: 0,
            mounts: vec![],
            devices: vec![],
            envs: envs.clone(),
            image: "x",
        };
        let cfg = container_config(&p, c, &node(), &ctx).unwrap();
        assert_eq!(cfg.envs, envs);
        assert_eq!(cfg.command, ["echo", "from-secret"]);
    }
}
