//! Static-pod identity, as the Go kubelet gives pods from its file and URL sources: the
//! node-name suffix, a UID derived from the manifest (an edited manifest is a new pod), the
//! default namespace, the node binding and the config annotations.

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use sha2::{Digest, Sha256};

use super::defaults;
use crate::types::labels;

/// The namespace of a pod that names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Gives a pod from a manifest its static-pod identity. `source` is the
/// `kubernetes.io/config.source` value (`file`, `http`); `content_hash_input` says where the
/// manifest came from (`file:<path>`, `url:<url>`) and goes into the UID with the defaulted
/// pod itself and `host:<node>`, so the UID changes when the pod's content, its origin or the
/// node changes, and stays put across re-reads of the same manifest. A UID already in the
/// manifest is kept.
pub fn static_pod(mut pod: Pod, source: &str, node_name: &str, content_hash_input: &[u8]) -> Pod {
    defaults::apply(&mut pod);
    let node = node_name.to_lowercase();
    let uid = match pod.metadata.uid.as_deref() {
        Some(uid) if !uid.is_empty() => uid.to_string(),
        _ => {
            let uid = derive_uid(&pod, &node, content_hash_input);
            pod.metadata.uid = Some(uid.clone());
            uid
        }
    };
    // A pod without a name stays without one, for validation to say so.
    if let Some(name) = pod.metadata.name.as_mut().filter(|n| !n.is_empty()) {
        *name = format!("{name}-{node}");
    }
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some(DEFAULT_NAMESPACE.into());
    }
    if let Some(spec) = &mut pod.spec {
        spec.node_name = Some(node_name.to_string());
        if source == "file" {
            tolerate_no_execute(&mut spec.tolerations);
        }
    }
    let annotations = pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(labels::CONFIG_HASH.into(), uid);
    annotations.insert(labels::CONFIG_SOURCE.into(), source.into());
    annotations.insert(labels::CONFIG_SEEN.into(), now_rfc3339_nano());
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });
    pod
}

/// 32 hex digits (the length of the Go kubelet's MD5 UIDs) of a SHA-256 over the pod as
/// defaulted, the node and the origin. `serde_json` writes maps in key order (they are
/// BTreeMaps), so the bytes hashed are canonical.
fn derive_uid(pod: &Pod, node: &str, origin: &[u8]) -> String {
    let mut h = Sha256::new();
    // Serializing a plain data structure cannot fail; an empty body would still give a UID
    // bound to node and origin.
    h.update(serde_json::to_vec(pod).unwrap_or_default());
    h.update(b"host:");
    h.update(node.as_bytes());
    h.update(origin);
    hex::encode(&h.finalize()[..16])
}

/// Static pods stay through node problems: they tolerate every NoExecute taint.
fn tolerate_no_execute(tolerations: &mut Option<Vec<Toleration>>) {
    let t = Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    let list = tolerations.get_or_insert_with(Vec::new);
    if !list.contains(&t) {
        list.push(t);
    }
}

/// Now as Go's `time.RFC3339Nano` writes it (UTC, trailing zeros of the fraction dropped).
pub fn now_rfc3339_nano() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339_nano(now.as_secs() as i64, now.subsec_nanos())
}

fn rfc3339_nano(secs: i64, nanos: u32) -> String {
    jiff::Timestamp::new(secs, nanos as i32)
        .map(|t| crate::cri_log::format_time(&crate::cri_log::LogTime::utc(t)))
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::manifest::parse;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: busybox:1}]\n";

    fn one(manifest: &str, node: &str, origin: &str) -> Pod {
        let pod = parse(manifest.as_bytes()).unwrap().remove(0);
        static_pod(pod, "file", node, origin.as_bytes())
    }

    #[test]
    fn identity() {
        let pod = one(MANIFEST, "Node-1", "file:/etc/pods/web.yaml");
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("web-node-1"));
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        let uid = meta.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        let ann = meta.annotations.as_ref().unwrap();
        assert_eq!(ann[labels::CONFIG_HASH], uid);
        assert_eq!(ann[labels::CONFIG_SOURCE], "file");
        assert!(ann[labels::CONFIG_SEEN].ends_with('Z'));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node-1"));
        assert_eq!(
            spec.restart_policy.as_deref(),
            Some("Always"),
            "defaults applied"
        );
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn uid_is_deterministic_and_follows_content() {
        let a = one(MANIFEST, "n", "file:/p/web.yaml").metadata.uid;
        let again = one(MANIFEST, "n", "file:/p/web.yaml").metadata.uid;
        assert_eq!(a, again);
        // Formatting alone is no change...
        let reformatted = MANIFEST.replace("{name: web}", "\n  name: web");
        assert_eq!(a, one(&reformatted, "n", "file:/p/web.yaml").metadata.uid);
        // ...nor spelling out a default...
        let explicit = MANIFEST.replace("spec:\n", "spec:\n  restartPolicy: Always\n");
        assert_eq!(a, one(&explicit, "n", "file:/p/web.yaml").metadata.uid);
        // ...but an edit, another file or another node is another pod.
        let edited = MANIFEST.replace("busybox:1", "busybox:2");
        assert_ne!(a, one(&edited, "n", "file:/p/web.yaml").metadata.uid);
        assert_ne!(a, one(MANIFEST, "n", "file:/p/other.yaml").metadata.uid);
        assert_ne!(a, one(MANIFEST, "m", "file:/p/web.yaml").metadata.uid);
    }

    #[test]
    fn manifest_uid_and_namespace_are_kept() {
        let m = MANIFEST.replace(
            "{name: web}",
            "{name: web, namespace: kube-system, uid: abc}",
        );
        let pod = one(&m, "n", "x");
        assert_eq!(pod.metadata.uid.as_deref(), Some("abc"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(
            pod.metadata.annotations.unwrap()[labels::CONFIG_HASH],
            "abc"
        );
    }

    #[test]
    fn a_nameless_pod_stays_nameless() {
        let pod = one(
            &MANIFEST.replace("{name: web}", "{labels: {a: b}}"),
            "n",
            "x",
        );
        assert_eq!(pod.metadata.name, None);
        let errs = crate::manifest::validate::validate(&pod).unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "metadata.name: Required value: name or generateName is required"
        );
    }

    #[test]
    fn http_pods_get_no_toleration() {
        let pod = parse(MANIFEST.as_bytes()).unwrap().remove(0);
        let pod = static_pod(pod, "http", "n", b"url:http://x");
        assert!(pod.spec.unwrap().tolerations.is_none());
    }

    #[test]
    fn timestamps_like_go() {
        assert_eq!(rfc3339_nano(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_nano(1, 500_000_000), "1970-01-01T00:00:01.5Z");
        assert_eq!(rfc3339_nano(1, 123), "1970-01-01T00:00:01.000000123Z");
    }
}
