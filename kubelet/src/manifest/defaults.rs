//! API defaults for a pod, as the API server's v1 defaulting (`SetDefaults_Pod` and friends)
//! fills them in before anything else sees the pod: restart and DNS policies, grace period,
//! scheduler, pull policy, termination message, port protocols, probe timings, volume sources.

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, LifecycleHandler, Pod, PodSecurityContext, PodSpec, Probe, Volume,
};

/// The grace period the API gives a pod that names none.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// The scheduler the API names when a pod names none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Where a container's termination message is read from by default.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The default mode of files in secret, configMap, downwardAPI and projected volumes.
const DEFAULT_VOLUME_FILE_MODE: i32 = 0o644;
/// A projected service account token's default lifetime.
const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// Fills in every field the v1 API defaults on a pod; fields already set are left alone, so
/// applying twice changes nothing.
pub fn apply(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    pod_spec(spec);
    let host_network = spec.host_network.unwrap_or(false);
    for c in containers_mut(spec) {
        container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        volume(v);
    }
}

fn containers_mut(spec: &mut PodSpec) -> impl Iterator<Item = &mut Container> {
    spec.init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
}

fn set_if_none<T>(slot: &mut Option<T>, value: impl FnOnce() -> T) {
    if slot.is_none() {
        *slot = Some(value());
    }
}

/// Go's zero value counts as unset for plain string fields.
fn set_if_empty(slot: &mut Option<String>, value: &str) {
    if slot.as_deref().unwrap_or("").is_empty() {
        *slot = Some(value.to_string());
    }
}

/// Go's zero value counts as unset for plain int fields.
fn set_if_zero(slot: &mut Option<i32>, value: i32) {
    if slot.unwrap_or(0) == 0 {
        *slot = Some(value);
    }
}

fn pod_spec(spec: &mut PodSpec) {
    set_if_empty(&mut spec.dns_policy, "ClusterFirst");
    set_if_empty(&mut spec.restart_policy, "Always");
    set_if_none(&mut spec.security_context, PodSecurityContext::default);
    set_if_none(&mut spec.termination_grace_period_seconds, || {
        DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
    });
    set_if_empty(&mut spec.scheduler_name, DEFAULT_SCHEDULER_NAME);
    set_if_none(&mut spec.enable_service_links, || true);
}

fn container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        let always = image_tag(c.image.as_deref().unwrap_or("")) == "latest";
        c.image_pull_policy = Some(if always { "Always" } else { "IfNotPresent" }.into());
    }
    set_if_empty(
        &mut c.termination_message_path,
        DEFAULT_TERMINATION_MESSAGE_PATH,
    );
    set_if_empty(&mut c.termination_message_policy, "File");
    for port in c.ports.iter_mut().flatten() {
        set_if_empty(&mut port.protocol, "TCP");
        // With the host's network a container port is a host port.
        if host_network && port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
    // Requests default to limits, resource by resource.
    if let Some(res) = &mut c.resources
        && let Some(limits) = &res.limits
    {
        let requests = res.requests.get_or_insert_with(Default::default);
        for (name, q) in limits {
            requests.entry(name.clone()).or_insert_with(|| q.clone());
        }
    }
    for p in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        probe(p);
    }
    if let Some(lc) = &mut c.lifecycle {
        for h in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
            handler(h);
        }
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(f) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_if_empty(&mut f.api_version, "v1");
        }
    }
}

fn probe(p: &mut Probe) {
    set_if_zero(&mut p.timeout_seconds, 1);
    set_if_zero(&mut p.period_seconds, 10);
    set_if_zero(&mut p.success_threshold, 1);
    set_if_zero(&mut p.failure_threshold, 3);
    if let Some(h) = &mut p.http_get {
        http_get(h);
    }
}

fn handler(h: &mut LifecycleHandler) {
    if let Some(g) = &mut h.http_get {
        http_get(g);
    }
}

fn http_get(h: &mut HTTPGetAction) {
    set_if_empty(&mut h.path, "/");
    set_if_empty(&mut h.scheme, "HTTP");
}

fn volume(v: &mut Volume) {
    if !has_source(v) {
        v.empty_dir = Some(Default::default());
    }
    if let Some(i) = &mut v.image
        && i.pull_policy.as_deref().unwrap_or("").is_empty()
    {
        // As a container's imagePullPolicy (Go's SetDefaults_ImageVolumeSource).
        let always = image_tag(i.reference.as_deref().unwrap_or("")) == "latest";
        i.pull_policy = Some(if always { "Always" } else { "IfNotPresent" }.into());
    }
    if let Some(h) = &mut v.host_path {
        set_if_none(&mut h.type_, String::new);
    }
    if let Some(s) = &mut v.secret {
        set_if_none(&mut s.default_mode, || DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(s) = &mut v.config_map {
        set_if_none(&mut s.default_mode, || DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(s) = &mut v.downward_api {
        set_if_none(&mut s.default_mode, || DEFAULT_VOLUME_FILE_MODE);
        for item in s.items.iter_mut().flatten() {
            if let Some(f) = &mut item.field_ref {
                set_if_empty(&mut f.api_version, "v1");
            }
        }
    }
    if let Some(s) = &mut v.projected {
        set_if_none(&mut s.default_mode, || DEFAULT_VOLUME_FILE_MODE);
        for src in s.sources.iter_mut().flatten() {
            if let Some(t) = &mut src.service_account_token {
                set_if_none(&mut t.expiration_seconds, || {
                    DEFAULT_TOKEN_EXPIRATION_SECONDS
                });
            }
        }
    }
}

/// How many volume sources a volume names (the API wants exactly one).
pub fn source_count(v: &Volume) -> usize {
    [
        v.aws_elastic_block_store.is_some(),
        v.azure_disk.is_some(),
        v.azure_file.is_some(),
        v.cephfs.is_some(),
        v.cinder.is_some(),
        v.config_map.is_some(),
        v.csi.is_some(),
        v.downward_api.is_some(),
        v.empty_dir.is_some(),
        v.ephemeral.is_some(),
        v.fc.is_some(),
        v.flex_volume.is_some(),
        v.flocker.is_some(),
        v.gce_persistent_disk.is_some(),
        v.git_repo.is_some(),
        v.glusterfs.is_some(),
        v.host_path.is_some(),
        v.image.is_some(),
        v.iscsi.is_some(),
        v.nfs.is_some(),
        v.persistent_volume_claim.is_some(),
        v.photon_persistent_disk.is_some(),
        v.portworx_volume.is_some(),
        v.projected.is_some(),
        v.quobyte.is_some(),
        v.rbd.is_some(),
        v.scale_io.is_some(),
        v.secret.is_some(),
        v.storageos.is_some(),
        v.vsphere_volume.is_some(),
    ]
    .into_iter()
    .filter(|b| *b)
    .count()
}

fn has_source(v: &Volume) -> bool {
    source_count(v) > 0
}

/// The tag an image reference asks for, as the pull-policy default reads it: `latest` when it
/// names neither tag nor digest, "" when it names only a digest.
pub fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    // A colon before the last slash is a registry port, not a tag.
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, HostPathVolumeSource, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod_with(c: Container) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![c],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn image_volumes_get_the_pull_policy_of_their_tag() {
        let volume = |reference: &str, policy: Option<&str>| Volume {
            name: "v".into(),
            image: Some(k8s_openapi::api::core::v1::ImageVolumeSource {
                reference: Some(reference.into()),
                pull_policy: policy.map(Into::into),
            }),
            ..Default::default()
        };
        for (v, want) in [
            (volume("tools", None), "Always"),
            (volume("tools:1", None), "IfNotPresent"),
            (volume("tools", Some("Never")), "Never"),
        ] {
            let mut pod = pod_with(Container::default());
            pod.spec.as_mut().unwrap().volumes = Some(vec![v]);
            apply(&mut pod);
            let v = &pod.spec.unwrap().volumes.unwrap()[0];
            assert_eq!(v.image.as_ref().unwrap().pull_policy.as_deref(), Some(want));
            assert!(v.empty_dir.is_none());
        }
    }

    #[test]
    fn pull_policy_follows_the_tag() {
        for (image, policy) in [
            ("busybox", "Always"),
            ("busybox:latest", "Always"),
            ("busybox:1", "IfNotPresent"),
            ("127.0.0.1:5000/ferrolet/busybox", "Always"),
            ("127.0.0.1:5000/ferrolet/busybox:1", "IfNotPresent"),
            ("busybox@sha256:abcd", "IfNotPresent"),
            ("busybox:latest@sha256:abcd", "Always"),
        ] {
            let mut pod = pod_with(Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            });
            apply(&mut pod);
            let c = &pod.spec.unwrap().containers[0];
            assert_eq!(c.image_pull_policy.as_deref(), Some(policy), "{image}");
        }
    }

    #[test]
    fn spec_and_container_defaults() {
        let mut pod = pod_with(Container {
            name: "c".into(),
            image: Some("busybox:1".into()),
            image_pull_policy: Some("Never".into()),
            ports: Some(vec![ContainerPort {
                container_port: 80,
                ..Default::default()
            }]),
            liveness_probe: Some(Probe {
                http_get: Some(Default::default()),
                ..Default::default()
            }),
            resources: Some(ResourceRequirements {
                limits: Some([("cpu".to_string(), Quantity("1".into()))].into()),
                requests: Some([("memory".to_string(), Quantity("1Mi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        pod.spec.as_mut().unwrap().volumes = Some(vec![
            Volume {
                name: "scratch".into(),
                ..Default::default()
            },
            Volume {
                name: "host".into(),
                host_path: Some(HostPathVolumeSource {
                    path: "/tmp".into(),
                    type_: None,
                }),
                ..Default::default()
            },
        ]);
        apply(&mut pod);
        let once = pod.clone();
        apply(&mut pod);
        assert_eq!(pod, once, "defaulting is idempotent");

        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.enable_service_links, Some(true));
        assert!(spec.security_context.is_some());
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, None, "no host port without hostNetwork");
        let probe = c.liveness_probe.as_ref().unwrap();
        assert_eq!(
            (
                probe.timeout_seconds,
                probe.period_seconds,
                probe.success_threshold,
                probe.failure_threshold
            ),
            (Some(1), Some(10), Some(1), Some(3))
        );
        let get = probe.http_get.as_ref().unwrap();
        assert_eq!(
            (get.path.as_deref(), get.scheme.as_deref()),
            (Some("/"), Some("HTTP"))
        );
        let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(requests["cpu"], Quantity("1".into()));
        assert_eq!(requests["memory"], Quantity("1Mi".into()));
        let volumes = spec.volumes.unwrap();
        assert!(volumes[0].empty_dir.is_some());
        assert_eq!(
            volumes[1].host_path.as_ref().unwrap().type_.as_deref(),
            Some("")
        );
    }

    #[test]
    fn host_network_mirrors_ports() {
        let mut pod = pod_with(Container {
            name: "c".into(),
            image: Some("busybox:1".into()),
            ports: Some(vec![ContainerPort {
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod.spec.as_mut().unwrap().host_network = Some(true);
        apply(&mut pod);
        let spec = pod.spec.unwrap();
        assert_eq!(
            spec.containers[0].ports.as_ref().unwrap()[0].host_port,
            Some(8080)
        );
    }
}
