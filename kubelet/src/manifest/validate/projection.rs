//! Validation of the projected volume sources (`secret`, `configMap`, `downwardAPI`,
//! `projected`) with the API's messages: names, modes within 0..=0777, item paths relative,
//! without `..` elements and not starting with `..`, downward API fields, token lifetimes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, DownwardAPIVolumeFile, DownwardAPIVolumeSource, KeyToPath,
    ProjectedVolumeSource, SecretVolumeSource,
};

use super::{Errs, has_backsteps, is_absolute, quote};
use crate::manifest::names;

const FILE_MODE_MESSAGE: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// The pod fields a downwardAPI volume may show (the env's list is longer).
const VOLUME_FIELD_PATHS: &[&str] = &[
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

const RESOURCE_FIELDS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// Shortest token lifetime the API allows (10 minutes), and the longest (2^32 s).
const MIN_TOKEN_SECONDS: i64 = 10 * 60;
const MAX_TOKEN_SECONDS: i64 = 1 << 32;

fn mode(errs: &mut Errs, field: &str, mode: Option<i32>) {
    if let Some(m) = mode.filter(|m| !(0..=0o777).contains(m)) {
        errs.invalid(field, &m.to_string(), FILE_MODE_MESSAGE);
    }
}

/// Go's `validateLocalNonReservedPath`.
fn local_path(errs: &mut Errs, field: &str, path: &str) {
    if is_absolute(path) {
        errs.invalid(field, &quote(path), "must be a relative path");
    }
    if has_backsteps(path) {
        errs.invalid(field, &quote(path), "must not contain '..'");
    }
    if path.starts_with("..") && !path.starts_with("../") {
        errs.invalid(field, &quote(path), "must not start with '..'");
    }
}

fn key_to_path(errs: &mut Errs, field: &str, kp: &KeyToPath) {
    if kp.key.is_empty() {
        errs.required(&format!("{field}.key"), "");
    }
    let p = format!("{field}.path");
    if kp.path.is_empty() {
        errs.required(&p, "");
    }
    local_path(errs, &p, &kp.path);
    mode(errs, &format!("{field}.mode"), kp.mode);
}

fn items(errs: &mut Errs, field: &str, items: Option<&[KeyToPath]>) {
    for (i, kp) in items.unwrap_or_default().iter().enumerate() {
        key_to_path(errs, &format!("{field}.items[{i}]"), kp);
    }
}

/// `spec.volumes[i].secret`.
pub(super) fn secret(errs: &mut Errs, field: &str, s: &SecretVolumeSource) {
    if s.secret_name.as_deref().unwrap_or("").is_empty() {
        errs.required(&format!("{field}.secretName"), "");
    }
    mode(errs, &format!("{field}.defaultMode"), s.default_mode);
    items(errs, field, s.items.as_deref());
}

/// `spec.volumes[i].configMap`.
pub(super) fn config_map(errs: &mut Errs, field: &str, c: &ConfigMapVolumeSource) {
    if c.name.is_empty() {
        errs.required(&format!("{field}.name"), "");
    }
    mode(errs, &format!("{field}.defaultMode"), c.default_mode);
    items(errs, field, c.items.as_deref());
}

/// `spec.volumes[i].downwardAPI`.
pub(super) fn downward_api(errs: &mut Errs, field: &str, d: &DownwardAPIVolumeSource) {
    mode(errs, &format!("{field}.defaultMode"), d.default_mode);
    for f in d.items.iter().flatten() {
        downward_file(errs, field, f);
    }
}

/// One downwardAPI file; Go reports it under the source's path, not the item's.
fn downward_file(errs: &mut Errs, field: &str, f: &DownwardAPIVolumeFile) {
    let p = format!("{field}.path");
    if f.path.is_empty() {
        errs.required(&p, "");
    }
    local_path(errs, &p, &f.path);
    if let Some(fr) = &f.field_ref {
        let fp = format!("{field}.fieldRef");
        if fr.api_version.as_deref().unwrap_or("").is_empty() {
            errs.required(&format!("{fp}.apiVersion"), "");
        } else if fr.field_path.is_empty() {
            errs.required(&format!("{fp}.fieldPath"), "");
        } else {
            volume_field_path(errs, &fp, &fr.field_path);
        }
        if f.resource_field_ref.is_some() {
            errs.invalid(
                field,
                "\"resource\"",
                "fieldRef and resourceFieldRef can not be specified simultaneously",
            );
        }
    } else if let Some(r) = &f.resource_field_ref {
        let rp = format!("{field}.resourceFieldRef");
        if r.container_name.as_deref().unwrap_or("").is_empty() {
            errs.required(&format!("{rp}.containerName"), "");
        } else if r.resource.is_empty() {
            errs.required(&format!("{rp}.resource"), "");
        } else if !RESOURCE_FIELDS.contains(&r.resource.as_str())
            && !r.resource.starts_with("requests.hugepages-")
            && !r.resource.starts_with("limits.hugepages-")
        {
            errs.not_supported(&format!("{rp}.resource"), &r.resource, RESOURCE_FIELDS);
        }
    } else {
        errs.required(field, "one of fieldRef and resourceFieldRef is required");
    }
    mode(errs, &format!("{field}.mode"), f.mode);
}

/// A downwardAPI volume's `fieldPath`: a metadata field, or one label or annotation.
fn volume_field_path(errs: &mut Errs, field: &str, fp: &str) {
    if let Some((path, key)) = fp.strip_suffix("']").and_then(|s| s.split_once("['")) {
        match path {
            "metadata.annotations" => {
                errs.name_check(field, key, names::qualified_name(&key.to_lowercase()))
            }
            "metadata.labels" => errs.name_check(field, key, names::qualified_name(key)),
            _ => errs.invalid(field, &quote(path), "does not support subscript"),
        }
    } else if !VOLUME_FIELD_PATHS.contains(&fp) {
        errs.not_supported(&format!("{field}.fieldPath"), fp, VOLUME_FIELD_PATHS);
    }
}

/// `spec.volumes[i].projected`.
pub(super) fn projected(errs: &mut Errs, field: &str, p: &ProjectedVolumeSource) {
    mode(errs, &format!("{field}.defaultMode"), p.default_mode);
    let mut all_paths = BTreeSet::new();
    let mut unique = |errs: &mut Errs, path: &str, value: &str| {
        if !path.is_empty() && !all_paths.insert(path.to_string()) {
            errs.invalid(field, &quote(value), "conflicting duplicate paths");
        }
    };
    for (i, src) in p.sources.iter().flatten().enumerate() {
        let sp = format!("{field}.sources[{i}]");
        let mut count = 0;
        if let Some(s) = &src.secret {
            count += 1;
            let pp = format!("{sp}.secret");
            if s.name.is_empty() {
                errs.required(&format!("{pp}.name"), "");
            }
            for (j, kp) in s.items.iter().flatten().enumerate() {
                key_to_path(errs, &format!("{pp}.items[{j}]"), kp);
                unique(errs, &kp.path, &s.name);
            }
        }
        if let Some(c) = &src.config_map {
            count += 1;
            let pp = format!("{sp}.configMap");
            if c.name.is_empty() {
                errs.required(&format!("{pp}.name"), "");
            }
            for (j, kp) in c.items.iter().flatten().enumerate() {
                key_to_path(errs, &format!("{pp}.items[{j}]"), kp);
                unique(errs, &kp.path, &c.name);
            }
        }
        if let Some(d) = &src.downward_api {
            count += 1;
            let pp = format!("{sp}.downwardAPI");
            for f in d.items.iter().flatten() {
                downward_file(errs, &pp, f);
                unique(errs, &f.path, &f.path);
            }
        }
        if let Some(t) = &src.service_account_token {
            count += 1;
            let pp = format!("{sp}.serviceAccountToken");
            // Defaulting sets it; an unset one is the default (3600).
            let secs = t.expiration_seconds.unwrap_or(3600);
            if secs < MIN_TOKEN_SECONDS {
                errs.invalid(
                    &format!("{pp}.expirationSeconds"),
                    &secs.to_string(),
                    "may not specify a duration less than 10 minutes",
                );
            }
            if secs > MAX_TOKEN_SECONDS {
                errs.invalid(
                    &format!("{pp}.expirationSeconds"),
                    &secs.to_string(),
                    "may not specify a duration larger than 2^32 seconds",
                );
            }
            if t.path.is_empty() {
                errs.required(&format!("{field}.path"), "");
            }
        }
        if src.cluster_trust_bundle.is_some() {
            count += 1;
        }
        if count > 1 {
            errs.forbidden(&sp, "may not specify more than 1 volume type");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{GOOD, errors, has};

    fn with_volume(volume: &str) -> String {
        GOOD.replace("  volumes:\n", &format!("  volumes:\n  - {volume}\n"))
    }

    #[test]
    fn well_formed_sources_pass() {
        for v in [
            "{name: s, secret: {secretName: s, defaultMode: 256, items: [{key: k, path: a/b, mode: 511}]}}",
            "{name: c, configMap: {name: c, optional: true}}",
            "{name: d, downwardAPI: {items: [{path: labels, fieldRef: {apiVersion: v1, fieldPath: metadata.labels}}, {path: l, fieldRef: {apiVersion: v1, fieldPath: \"metadata.labels['app']\"}}, {path: cpu, resourceFieldRef: {containerName: httpd, resource: limits.cpu}}]}}",
            "{name: p, projected: {sources: [{serviceAccountToken: {path: token, expirationSeconds: 3607}}, {configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}}, {downwardAPI: {items: [{path: namespace, fieldRef: {apiVersion: v1, fieldPath: metadata.namespace}}]}}]}}",
        ] {
            let e = errors(&with_volume(v));
            assert!(e.is_empty(), "{v}: {e:?}");
        }
    }

    #[test]
    fn mistakes_get_the_api_messages() {
        let cases = [
            (
                "{name: s, secret: {secretName: s, items: [{key: k, path: ../up}]}}",
                "spec.volumes[0].secret.items[0].path: Invalid value: \"../up\": must not contain '..'",
            ),
            (
                "{name: s, secret: {secretName: s, items: [{key: k, path: ..x}]}}",
                "spec.volumes[0].secret.items[0].path: Invalid value: \"..x\": must not start with '..'",
            ),
            (
                "{name: s, secret: {defaultMode: 1000}}",
                "spec.volumes[0].secret.secretName: Required value",
            ),
            (
                "{name: s, secret: {secretName: s, defaultMode: 1000}}",
                "spec.volumes[0].secret.defaultMode: Invalid value: 1000: must be a number between 0 and 0777 (octal), both inclusive",
            ),
            (
                "{name: c, configMap: {name: c, items: [{key: k, path: /abs, mode: -1}]}}",
                "spec.volumes[0].configMap.items[0].path: Invalid value: \"/abs\": must be a relative path",
            ),
            (
                "{name: c, configMap: {name: c, items: [{key: k, path: p, mode: -1}]}}",
                "spec.volumes[0].configMap.items[0].mode: Invalid value: -1: must be a number",
            ),
            (
                "{name: d, downwardAPI: {items: [{path: x, fieldRef: {apiVersion: v1, fieldPath: spec.nodeName}}]}}",
                "spec.volumes[0].downwardAPI.fieldRef.fieldPath: Unsupported value: \"spec.nodeName\"",
            ),
            (
                "{name: d, downwardAPI: {items: [{path: x, resourceFieldRef: {resource: limits.cpu}}]}}",
                "spec.volumes[0].downwardAPI.resourceFieldRef.containerName: Required value",
            ),
            (
                "{name: d, downwardAPI: {items: [{path: x}]}}",
                "spec.volumes[0].downwardAPI: Required value: one of fieldRef and resourceFieldRef is required",
            ),
            (
                "{name: p, projected: {sources: [{serviceAccountToken: {path: t, expirationSeconds: 60}}]}}",
                "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
            ),
            (
                "{name: p, projected: {sources: [{secret: {name: a, items: [{key: k, path: x}]}}, {configMap: {name: b, items: [{key: k, path: x}]}}]}}",
                "spec.volumes[0].projected: Invalid value: \"b\": conflicting duplicate paths",
            ),
        ];
        for (v, want) in cases {
            let e = errors(&with_volume(v));
            assert!(has(&e, want), "{v}: want {want}, got {e:?}");
        }
    }
}
