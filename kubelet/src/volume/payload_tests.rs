//! Tests of the payload builders (secret, configMap, downwardAPI, projected) over
//! [`VolumeInputs`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Volume};

use super::atomic_writer::Payload;
use super::inputs::{config_map_key, secret_key, token_key, token_request};
use super::projection::ProjectionError;
use super::tests::pod;
use super::{
    VolumeInputs, config_map, downward_api, pod_references, projected, references, secret,
};
use crate::objects::ObjectError;
use crate::podspec::testutil::node;
use crate::types::Pod;

fn secret_obj(name: &str, data: &[(&str, &str)]) -> Arc<Secret> {
    Arc::new(Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    })
}

fn config_map_obj(name: &str, data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        binary_data: Some(
            binary
                .iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    })
}

fn volume(p: &Pod, name: &str) -> Volume {
    p.spec
        .as_ref()
        .unwrap()
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == name)
        .unwrap()
        .clone()
}

/// (path, content, mode) of a payload.
fn files(p: &Payload) -> Vec<(String, String, u32)> {
    p.iter()
        .map(|(k, f)| {
            (
                k.clone(),
                String::from_utf8_lossy(&f.data).into_owned(),
                f.mode,
            )
        })
        .collect()
}

fn owned(v: &[(&str, &str, u32)]) -> Vec<(String, String, u32)> {
    v.iter()
        .map(|(a, b, m)| (a.to_string(), b.to_string(), *m))
        .collect()
}

const POD: &str = r#"
metadata:
  name: web
  namespace: ns
  uid: u-1
  labels: {app: web, tier: "front \"end\""}
  annotations: {b: "2", a: "line\nbreak"}
spec:
  serviceAccountName: robot
  containers:
  - name: c
    resources: {limits: {memory: 64Mi, cpu: 500m}}
  volumes:
  - {name: all, secret: {secretName: s}}
  - {name: items, secret: {secretName: s, defaultMode: 256, items: [{key: k1, path: one/k1}, {key: k2, path: k2, mode: 384}]}}
  - {name: missing, secret: {secretName: nope}}
  - {name: optional, secret: {secretName: nope, optional: true}}
  - {name: badkey, secret: {secretName: s, items: [{key: zz, path: z}]}}
  - {name: badkey-opt, secret: {secretName: s, optional: true, items: [{key: zz, path: z}, {key: k1, path: k1}]}}
  - {name: cm, configMap: {name: cm}}
  - {name: cm-items, configMap: {name: cm, items: [{key: bin, path: b}, {key: text, path: t, mode: 256}]}}
  - {name: cm-missing, configMap: {name: nope}}
  - {name: cm-badkey, configMap: {name: cm, items: [{key: zz, path: z}]}}
  - name: down
    downwardAPI:
      defaultMode: 288
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: annotations, fieldRef: {fieldPath: metadata.annotations}}
      - {path: app, fieldRef: {fieldPath: "metadata.labels['app']"}, mode: 256}
      - {path: meta/name, fieldRef: {fieldPath: metadata.name}}
      - {path: ns, fieldRef: {fieldPath: metadata.namespace}}
      - {path: uid, fieldRef: {fieldPath: metadata.uid}}
      - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}
      - {path: cpu, resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: 1m}}
  - name: down-bad
    downwardAPI:
      items:
      - {path: node, fieldRef: {fieldPath: spec.nodeName}}
      - {path: x, resourceFieldRef: {containerName: zz, resource: limits.cpu}}
  - name: kube-api-access
    projected:
      sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap: {name: cm, items: [{key: text, path: ca.crt}]}
      - downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}
      - secret: {name: s, items: [{key: k1, path: s1}]}
  - name: only-downward
    projected: {sources: [{downwardAPI: {items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]}}]}
  - name: ctb
    projected: {sources: [{clusterTrustBundle: {signerName: x, path: b}}]}
"#;

fn inputs() -> VolumeInputs {
    let mut i = VolumeInputs::default();
    i.secrets.insert(
        "s".into(),
        Some(secret_obj("s", &[("k1", "v1"), ("k2", "v2")])),
    );
    i.secrets.insert("nope".into(), None);
    i.config_maps.insert(
        "cm".into(),
        Some(config_map_obj(
            "cm",
            &[("text", "hello")],
            &[("bin", &[0, 159, 255])],
        )),
    );
    i.config_maps.insert("nope".into(), None);
    i
}

fn secret_payload(p: &Pod, name: &str, i: &VolumeInputs) -> Result<Payload, ProjectionError> {
    secret::payload("ns", volume(p, name).secret.as_ref().unwrap(), i)
}

fn cm_payload(p: &Pod, name: &str, i: &VolumeInputs) -> Result<Payload, ProjectionError> {
    config_map::payload("ns", volume(p, name).config_map.as_ref().unwrap(), i)
}

fn projected_payload(p: &Pod, name: &str, i: &VolumeInputs) -> Result<Payload, ProjectionError> {
    projected::payload(
        p,
        name,
        volume(p, name).projected.as_ref().unwrap(),
        i,
        &node(),
    )
}

#[test]
fn secret_payloads() {
    let p = pod(POD);
    let i = inputs();
    assert_eq!(
        files(&secret_payload(&p, "all", &i).unwrap()),
        owned(&[("k1", "v1", 0o644), ("k2", "v2", 0o644)])
    );
    assert_eq!(
        files(&secret_payload(&p, "items", &i).unwrap()),
        owned(&[("k2", "v2", 0o600), ("one/k1", "v1", 0o400)])
    );
    let err = secret_payload(&p, "missing", &i).unwrap_err();
    assert_eq!(err.to_string(), "secret \"nope\" not found");
    assert!(secret_payload(&p, "optional", &i).unwrap().is_empty());
    let err = secret_payload(&p, "badkey", &i).unwrap_err();
    assert_eq!(err.to_string(), "references non-existent secret key: zz");
    assert_eq!(
        files(&secret_payload(&p, "badkey-opt", &i).unwrap()),
        owned(&[("k1", "v1", 0o644)])
    );
}

#[test]
fn config_map_payloads() {
    let p = pod(POD);
    let i = inputs();
    let all = cm_payload(&p, "cm", &i).unwrap();
    assert_eq!(all["bin"].data, [0, 159, 255]);
    assert_eq!(all["text"].data, b"hello");
    assert_eq!(all["text"].mode, 0o644);
    let items = cm_payload(&p, "cm-items", &i).unwrap();
    assert_eq!(items.keys().collect::<Vec<_>>(), ["b", "t"]);
    assert_eq!(items["b"].data, [0, 159, 255]);
    assert_eq!(items["t"].mode, 0o400);
    assert_eq!(
        cm_payload(&p, "cm-missing", &i).unwrap_err().to_string(),
        "configmap \"nope\" not found"
    );
    assert_eq!(
        cm_payload(&p, "cm-badkey", &i).unwrap_err().to_string(),
        "configmap references non-existent config key: zz"
    );
}

#[test]
fn downward_payloads() {
    let p = pod(POD);
    let d = volume(&p, "down");
    let out = downward_api::payload(&p, d.downward_api.as_ref().unwrap(), &node()).unwrap();
    assert_eq!(
        files(&out),
        owned(&[
            ("annotations", "a=\"line\\nbreak\"\nb=\"2\"", 0o440),
            ("app", "web", 0o400),
            ("cpu", "500", 0o440),
            ("labels", "app=\"web\"\ntier=\"front \\\"end\\\"\"", 0o440),
            ("mem", "64", 0o440),
            ("meta/name", "web", 0o440),
            ("ns", "ns", 0o440),
            ("uid", "u-1", 0o440),
        ])
    );
    let bad = volume(&p, "down-bad");
    let err = downward_api::payload(&p, bad.downward_api.as_ref().unwrap(), &node()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[unsupported fieldPath: spec.nodeName, container zz not found]"
    );
}

#[test]
fn projected_combines_every_source() {
    let p = pod(POD);
    let mut i = inputs();
    let v = volume(&p, "kube-api-access");
    let refs = references(&p, &v);
    assert_eq!(refs.secrets.iter().collect::<Vec<_>>(), ["s"]);
    assert_eq!(refs.config_maps.iter().collect::<Vec<_>>(), ["cm"]);
    let spec = refs.tokens.iter().next().unwrap().clone();
    assert_eq!(spec.service_account, "robot");
    assert_eq!(
        (spec.pod_name.as_str(), spec.pod_uid.as_str()),
        ("web", "u-1")
    );
    assert_eq!(spec.namespace, "ns");
    assert_eq!(spec.expiration_seconds, 3607);
    assert_eq!(spec.audience, None);

    // The token was not fetched: an error naming it.
    let err = projected_payload(&p, "kube-api-access", &i).unwrap_err();
    assert!(
        err.to_string()
            .contains("token of service account ns/robot was not read"),
        "{err}"
    );

    i.tokens.insert(spec, "jwt".into());
    let out = projected_payload(&p, "kube-api-access", &i).unwrap();
    assert_eq!(
        files(&out),
        owned(&[
            ("ca.crt", "hello", 0o644),
            ("namespace", "ns", 0o644),
            ("s1", "v1", 0o644),
            ("token", "jwt", 0o644),
        ])
    );
    assert_eq!(out["token"].fs_user, None);

    // Every failing source is reported.
    i.secrets.insert("s".into(), None);
    i.config_maps.insert("cm".into(), None);
    assert_eq!(
        projected_payload(&p, "kube-api-access", &i)
            .unwrap_err()
            .to_string(),
        "[configmap \"cm\" not found, secret \"s\" not found]"
    );

    assert_eq!(
        projected_payload(&p, "ctb", &i).unwrap_err().to_string(),
        "clusterTrustBundle projections are not supported by ferrolet"
    );
}

#[test]
fn token_mode_and_owner_follow_go() {
    let yaml = |sc: &str, c2: &str| {
        format!(
            r#"
metadata: {{name: p, namespace: ns, uid: u}}
spec:
  securityContext: {sc}
  initContainers: [{{name: i}}]
  containers: [{{name: a}}, {{name: b, securityContext: {c2}}}]
  volumes:
  - name: t
    projected: {{defaultMode: 420, sources: [{{serviceAccountToken: {{path: token, audience: vault}}}}]}}
"#
        )
    };
    let token = |p: &Pod| {
        let mut i = VolumeInputs::default();
        let v = volume(p, "t");
        for spec in references(p, &v).tokens {
            assert_eq!(spec.audience.as_deref(), Some("vault"));
            assert_eq!(spec.expiration_seconds, 3600);
            assert_eq!(spec.service_account, "default");
            i.tokens.insert(spec, "jwt".into());
        }
        let out = projected_payload(p, "t", &i).unwrap();
        (out["token"].mode, out["token"].fs_user)
    };
    // No fsGroup, no common user: the default mode, no owner.
    assert_eq!(token(&pod(&yaml("{}", "{}"))), (0o644, None));
    // A common runAsUser (pod's, one container repeating it): 0600 owned by it.
    assert_eq!(
        token(&pod(&yaml("{runAsUser: 1000}", "{runAsUser: 1000}"))),
        (0o600, Some(1000))
    );
    // Containers disagree: no owner, still default mode.
    assert_eq!(
        token(&pod(&yaml("{runAsUser: 1000}", "{runAsUser: 2000}"))),
        (0o644, None)
    );
    // An fsGroup alone: 0600 (group read comes from the ownership change).
    assert_eq!(token(&pod(&yaml("{fsGroup: 3000}", "{}"))), (0o600, None));
    // Both: 0600, owned by the user.
    assert_eq!(
        token(&pod(&yaml("{fsGroup: 3000, runAsUser: 5}", "{}"))),
        (0o600, Some(5))
    );
}

#[test]
fn standalone_errors_and_downward_api_without_an_api_server() {
    let p = pod(POD);
    let i = VolumeInputs::standalone(&p);
    assert_eq!(
        i.errors.get(&secret_key("s")),
        Some(&ObjectError::NoApiServer)
    );
    assert_eq!(
        i.errors.get(&config_map_key("cm")),
        Some(&ObjectError::NoApiServer)
    );
    assert_eq!(
        secret_payload(&p, "all", &i).unwrap_err().to_string(),
        "not supported due to running kubelet in standalone mode"
    );
    assert_eq!(
        cm_payload(&p, "cm", &i).unwrap_err().to_string(),
        "not supported due to running kubelet in standalone mode"
    );
    assert_eq!(
        projected_payload(&p, "kube-api-access", &i)
            .unwrap_err()
            .to_string(),
        "cannot setup projected volume kube-api-access because kube client is not configured"
    );
    let only = projected_payload(&p, "only-downward", &i).unwrap();
    assert_eq!(files(&only), owned(&[("namespace", "ns", 0o644)]));

    // Other read errors pass through as the API said them.
    let mut i = VolumeInputs::default();
    let spec = token_request(&p, &Default::default());
    assert!(token_key(&spec).starts_with("token/robot/"));
    i.set_secret("s", Err(ObjectError::Api("forbidden".into())));
    assert_eq!(
        secret_payload(&p, "all", &i).unwrap_err().to_string(),
        "forbidden"
    );
    i.set_secret("s", Ok(None));
    assert!(i.errors.is_empty());
    assert_eq!(
        secret_payload(&p, "all", &i).unwrap_err().to_string(),
        "secret \"s\" not found"
    );
}

#[test]
fn pod_references_cover_env_pull_secrets_and_volumes() {
    let p = pod(r#"
metadata: {name: p, namespace: ns, uid: u}
spec:
  imagePullSecrets: [{name: pull}]
  initContainers:
  - name: i
    envFrom: [{secretRef: {name: init-s}}, {configMapRef: {name: init-cm}}]
  containers:
  - name: c
    env:
    - {name: A, valueFrom: {secretKeyRef: {name: env-s, key: k}}}
    - {name: B, valueFrom: {configMapKeyRef: {name: env-cm, key: k}}}
    - {name: C, value: x}
  ephemeralContainers:
  - {name: e, envFrom: [{secretRef: {name: eph-s}}]}
  volumes:
  - {name: v, secret: {secretName: vol-s}}
  - {name: w, configMap: {name: vol-cm}}
  - {name: x, projected: {sources: [{secret: {name: proj-s}}, {serviceAccountToken: {path: t}}]}}
"#);
    let r = pod_references(&p);
    assert_eq!(
        r.secrets.iter().collect::<Vec<_>>(),
        ["env-s", "eph-s", "init-s", "proj-s", "pull", "vol-s"]
    );
    assert_eq!(
        r.config_maps.iter().collect::<Vec<_>>(),
        ["env-cm", "init-cm", "vol-cm"]
    );
    assert_eq!(r.tokens.len(), 1);
    let down = pod(
        "metadata: {name: p, uid: u}\nspec: {containers: [{name: c}], volumes: [{name: d, downwardAPI: {}}]}",
    );
    assert_eq!(references(&down, &volume(&down, "d")), Default::default());
}

#[test]
fn debug_output_never_shows_secret_data_or_tokens() {
    let p = pod(POD);
    let mut i = inputs();
    let spec = token_request(&p, &Default::default());
    i.tokens.insert(spec, "eyJhbGciOi-secret-token".into());
    let shown = format!("{i:?}");
    assert!(shown.contains("k1") && shown.contains("\"s\""), "{shown}");
    assert!(
        !shown.contains("v1") && !shown.contains("eyJhbGciOi"),
        "{shown}"
    );
    let payload = secret_payload(&p, "all", &i).unwrap();
    assert!(!format!("{payload:?}").contains("v1"));
}
