//! The container spec hash the kubelet keeps in `io.kubernetes.container.hash`: a container
//! whose running instance carries another hash was changed and is replaced.
//!
//! It hashes the whole container spec as canonical JSON (object keys sorted, absent fields
//! left out), so it is stable across serializations and field order. Go hashes only name
//! and image, the only fields the API server lets change in place; for static pods, whose
//! edits make a new pod anyway, both notice the same changes.

use k8s_openapi::api::core::v1::Container;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lower-case hex of the first 8 bytes of the SHA-256 of the container's canonical JSON.
pub fn container_hash(container: &Container) -> String {
    // Serializing a typed struct to a JSON value cannot fail; Null would still hash stably.
    hash_value(&serde_json::to_value(container).unwrap_or(Value::Null))
}

/// The hash of the container without its `resources` (Go's `HashContainerWithoutResources`,
/// kept in `io.kubernetes.container.hashWithoutResources`): with in-place resize, a change
/// of resources alone is no change that replaces the container.
pub fn container_hash_without_resources(container: &Container) -> String {
    let mut value = serde_json::to_value(container).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        map.remove("resources");
    }
    hash_value(&value)
}

fn hash_value(value: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    hex::encode(&digest[..8])
}

/// Writes JSON with object keys in sorted order, whatever map type serde_json was built with.
fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(child) = map.get(k) {
                    write_canonical(child, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn container(yaml: &str) -> Container {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn stable_over_serialization() {
        let a = container(
            "{name: web, image: 'httpd:1', env: [{name: A, value: '1'}], ports: [{containerPort: 80}]}",
        );
        let b = container(
            "ports: [{containerPort: 80}]\nenv: [{value: '1', name: A}]\nimage: 'httpd:1'\nname: web\n",
        );
        let h = container_hash(&a);
        assert_eq!(h, container_hash(&b));
        assert_eq!(h.len(), 16);
        assert!(
            h.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
        // Round trip through JSON.
        let json = serde_json::to_string(&a).unwrap();
        let c: Container = serde_json::from_str(&json).unwrap();
        assert_eq!(h, container_hash(&c));
        // Known value, so a change of algorithm (which would restart every container after
        // an upgrade) is noticed.
        assert_eq!(h, "658a91ad13f960a6");
    }

    #[test]
    fn changes_change_it() {
        let base = container("{name: web, image: 'httpd:1'}");
        let h = container_hash(&base);
        for other in [
            "{name: web, image: 'httpd:2'}",
            "{name: web2, image: 'httpd:1'}",
            "{name: web, image: 'httpd:1', args: [x]}",
            "{name: web, image: 'httpd:1', resources: {limits: {cpu: '1'}}}",
        ] {
            assert_ne!(h, container_hash(&container(other)), "{other}");
        }
    }

    #[test]
    fn the_hash_without_resources_ignores_them_alone() {
        let base = container("{name: web, image: 'httpd:1', resources: {limits: {cpu: '1'}}}");
        let resized = container("{name: web, image: 'httpd:1', resources: {limits: {cpu: '2'}}}");
        let bare = container("{name: web, image: 'httpd:1'}");
        let h = container_hash_without_resources(&base);
        assert_eq!(h, container_hash_without_resources(&resized));
        // A container without resources hashes the same either way.
        assert_eq!(h, container_hash(&bare));
        let other = container("{name: web, image: 'httpd:2', resources: {limits: {cpu: '1'}}}");
        assert_ne!(h, container_hash_without_resources(&other));
    }

    #[test]
    fn canonical_form() {
        let v: Value = serde_json::from_str(r#"{"b":[{"y":1,"x":"\""}],"a":null}"#).unwrap();
        let mut s = String::new();
        write_canonical(&v, &mut s);
        assert_eq!(s, r#"{"a":null,"b":[{"x":"\"","y":1}]}"#);
    }
}
