//! Ephemeral containers (`kubectl debug`) as the rest of the kubelet sees containers: the
//! common part of an `EphemeralContainer` is a `Container` (Go converts the one into the other,
//! `(*v1.Container)(&ec.EphemeralContainerCommon)`), and `targetContainerName` becomes the
//! CRI PID namespace of that container (`NamespaceMode::Target`), as Go's
//! `generateLinuxContainerConfig` sets it.

use ferrolet_proto::cri;
use k8s_openapi::api::core::v1::{Container, EphemeralContainer, PodSpec};

/// The container an ephemeral container runs as (its target left aside).
pub fn as_container(ec: &EphemeralContainer) -> Container {
    // Every field named: a field the API adds must be weighed here before it compiles.
    let EphemeralContainer {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        target_container_name: _,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = ec.clone();
    Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    }
}

/// The spec's ephemeral containers as containers, in spec order.
pub fn containers(spec: &PodSpec) -> Vec<Container> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .map(as_container)
        .collect()
}

/// Puts the container in the PID namespace of the container instance `target_id`: only
/// when it would otherwise get its own (a pod sharing its process namespace, or the host's,
/// already sees the target), as Go does.
pub fn join_target_pid_namespace(config: &mut cri::ContainerConfig, target_id: &str) {
    let ns = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut());
    if let Some(ns) = ns
        && ns.pid == cri::NamespaceMode::Container as i32
    {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target_id.to_string();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn an_ephemeral_container_is_its_common_part() {
        let s = spec(
            "containers: [{name: app}]\n\
             ephemeralContainers:\n\
             - {name: dbg, image: busybox, command: [sh], stdin: true, tty: true, \
                targetContainerName: app, env: [{name: A, value: '1'}], \
                volumeMounts: [{name: v, mountPath: /v}], imagePullPolicy: Never}\n",
        );
        let c = &containers(&s)[0];
        let want: Container = serde_yaml_ng::from_str(
            "{name: dbg, image: busybox, command: [sh], stdin: true, tty: true, \
              env: [{name: A, value: '1'}], volumeMounts: [{name: v, mountPath: /v}], \
              imagePullPolicy: Never}",
        )
        .unwrap();
        assert_eq!(c, &want);
    }

    fn config(pid: cri::NamespaceMode) -> cri::ContainerConfig {
        cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        pid: pid as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ns(c: &cri::ContainerConfig) -> &cri::NamespaceOption {
        c.linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .unwrap()
    }

    #[test]
    fn a_target_is_joined_only_from_a_namespace_of_its_own() {
        let mut own = config(cri::NamespaceMode::Container);
        join_target_pid_namespace(&mut own, "c1");
        assert_eq!(ns(&own).pid, cri::NamespaceMode::Target as i32);
        assert_eq!(ns(&own).target_id, "c1");
        for shared in [cri::NamespaceMode::Pod, cri::NamespaceMode::Node] {
            let mut c = config(shared);
            join_target_pid_namespace(&mut c, "c1");
            assert_eq!(ns(&c).pid, shared as i32);
            assert_eq!(ns(&c).target_id, "");
        }
    }
}
