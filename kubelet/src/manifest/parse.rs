//! Manifest decoding: YAML (one or more `---` documents) or JSON (one or more values) into
//! pods, from a Pod, a PodList or a v1 List of Pods. Unknown fields are dropped, as the API
//! machinery's lenient decoder drops them; wrong types are errors naming where they are.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a manifest yields no pods.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Nothing but whitespace, comments or empty documents.
    #[error("the manifest is empty")]
    Empty,
    /// Not YAML.
    #[error("invalid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// YAML nested too deep to parse in reasonable time.
    #[error("invalid YAML: {0}")]
    TooDeep(#[from] crate::yaml::TooDeep),
    /// Looked like JSON (starts with `{`) but is not.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A document that is not a mapping (a bare string, a list...).
    #[error("document {doc}: not an object (want a Pod, a PodList or a List of Pods)")]
    NotAnObject {
        /// 1-based document number.
        doc: usize,
    },
    /// An object without `kind`.
    #[error("document {doc}: Object 'Kind' is missing")]
    MissingKind {
        /// 1-based document number.
        doc: usize,
    },
    /// An object whose `apiVersion` is missing or not `v1`.
    #[error("document {doc}: {kind} has apiVersion {api_version:?}, want \"v1\"")]
    ApiVersion {
        /// 1-based document number.
        doc: usize,
        /// Its kind.
        kind: String,
        /// What it says ("" when missing).
        api_version: String,
    },
    /// Some other kind of object.
    #[error("document {doc}: a {kind} is not a pod (want a Pod, a PodList or a List of Pods)")]
    NotAPod {
        /// 1-based document number.
        doc: usize,
        /// What it is.
        kind: String,
    },
    /// A pod whose fields do not fit the Pod schema.
    #[error("document {doc}: {path}: {reason}")]
    Decode {
        /// 1-based document number.
        doc: usize,
        /// Where in the document (`spec.containers[1]`, `items[0].metadata`, ...).
        path: String,
        /// What is wrong there.
        reason: String,
    },
}

/// Parses a manifest (YAML or JSON): a Pod, a PodList or a v1 List of Pods; several YAML
/// documents (`---`) in one file are accepted.
pub fn parse(bytes: &[u8]) -> Result<Vec<Pod>, ManifestError> {
    let docs = documents(bytes)?;
    let mut pods = Vec::new();
    let mut seen_any = false;
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        seen_any = true;
        pods.extend(object(i + 1, doc)?);
    }
    if !seen_any {
        return Err(ManifestError::Empty);
    }
    Ok(pods)
}

/// The documents of a stream, as JSON values (JSON is read as JSON for its better errors).
fn documents(bytes: &[u8]) -> Result<Vec<Value>, ManifestError> {
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let first = text.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        let stream = serde_json::Deserializer::from_slice(text).into_iter::<Value>();
        return stream
            .collect::<Result<Vec<_>, _>>()
            .map_err(ManifestError::Json);
    }
    crate::yaml::check_flow_depth(text)?;
    serde_yaml_ng::Deserializer::from_slice(text)
        .map(|doc| Value::deserialize(doc).map_err(ManifestError::Yaml))
        .collect()
}

fn string_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The pods of one document.
fn object(doc: usize, v: Value) -> Result<Vec<Pod>, ManifestError> {
    if !v.is_object() {
        return Err(ManifestError::NotAnObject { doc });
    }
    let kind = string_field(&v, "kind").to_string();
    if kind.is_empty() {
        return Err(ManifestError::MissingKind { doc });
    }
    let api_version = string_field(&v, "apiVersion");
    if api_version != "v1" {
        return Err(ManifestError::ApiVersion {
            doc,
            kind,
            api_version: api_version.to_string(),
        });
    }
    match kind.as_str() {
        "Pod" => Ok(vec![pod(doc, "", v)?]),
        "PodList" | "List" => {
            let items = match v.get("items") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items.clone(),
                Some(_) => {
                    return Err(ManifestError::Decode {
                        doc,
                        path: "items".into(),
                        reason: "must be a list".into(),
                    });
                }
            };
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    let prefix = format!("items[{i}].");
                    // A v1 List may hold anything: each item says what it is.
                    if kind == "List" {
                        let item_kind = string_field(&item, "kind");
                        if item_kind != "Pod" {
                            return Err(ManifestError::NotAPod {
                                doc,
                                kind: if item_kind.is_empty() {
                                    format!("List item {i} without a kind")
                                } else {
                                    item_kind.to_string()
                                },
                            });
                        }
                    }
                    pod(doc, &prefix, item)
                })
                .collect()
        }
        _ => Err(ManifestError::NotAPod { doc, kind }),
    }
}

/// One pod; on a type error, the first part of the pod that fails names the place.
fn pod(doc: usize, prefix: &str, mut v: Value) -> Result<Pod, ManifestError> {
    quantities_as_strings(&mut v);
    match serde_json::from_value::<Pod>(v.clone()) {
        Ok(p) => Ok(p),
        Err(e) => {
            let (path, reason) = locate(&v).unwrap_or_else(|| (String::new(), e.to_string()));
            let path = format!("{prefix}{path}");
            Err(ManifestError::Decode {
                doc,
                path: path.trim_end_matches('.').to_string(),
                reason,
            })
        }
    }
}

fn fails<T: DeserializeOwned>(v: &Value) -> Option<String> {
    serde_json::from_value::<T>(v.clone())
        .err()
        .map(|e| e.to_string())
}

/// The narrowest part of a pod that fails to decode: metadata, a container, a volume, or
/// the spec or status as a whole.
fn locate(pod: &Value) -> Option<(String, String)> {
    if let Some(m) = pod.get("metadata")
        && let Some(e) = fails::<ObjectMeta>(m)
    {
        return Some(("metadata".into(), e));
    }
    if let Some(spec) = pod.get("spec") {
        for list in ["initContainers", "containers"] {
            if let Some(Value::Array(cs)) = spec.get(list) {
                for (i, c) in cs.iter().enumerate() {
                    if let Some(e) = fails::<Container>(c) {
                        return Some((format!("spec.{list}[{i}]"), e));
                    }
                }
            }
        }
        if let Some(Value::Array(vs)) = spec.get("volumes") {
            for (i, v) in vs.iter().enumerate() {
                if let Some(e) = fails::<Volume>(v) {
                    return Some((format!("spec.volumes[{i}]"), e));
                }
            }
        }
        if let Some(e) = fails::<PodSpec>(spec) {
            return Some(("spec".into(), e));
        }
    }
    if let Some(status) = pod.get("status")
        && let Some(e) = fails::<PodStatus>(status)
    {
        return Some(("status".into(), e));
    }
    None
}

/// The API accepts bare numbers where a quantity goes (`cpu: 0.5`, `memory: 1073741824`);
/// our Quantity type only takes strings (and integers), so numbers there become strings.
fn quantities_as_strings(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec") else {
        return;
    };
    if let Some(r) = spec.get_mut("resources") {
        resource_requirements(r);
    }
    if let Some(o) = spec.get_mut("overhead") {
        resource_map(o);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs {
                if let Some(r) = c.get_mut("resources") {
                    resource_requirements(r);
                }
                if let Some(Value::Array(env)) = c.get_mut("env") {
                    for e in env {
                        if let Some(d) = e.pointer_mut("/valueFrom/resourceFieldRef/divisor") {
                            number_as_string(d);
                        }
                    }
                }
            }
        }
    }
    if let Some(Value::Array(vs)) = spec.get_mut("volumes") {
        for v in vs {
            if let Some(s) = v.pointer_mut("/emptyDir/sizeLimit") {
                number_as_string(s);
            }
            if let Some(Value::Array(items)) = v.pointer_mut("/downwardAPI/items") {
                for item in items {
                    if let Some(d) = item.pointer_mut("/resourceFieldRef/divisor") {
                        number_as_string(d);
                    }
                }
            }
        }
    }
}

fn resource_requirements(r: &mut Value) {
    for key in ["limits", "requests"] {
        if let Some(m) = r.get_mut(key) {
            resource_map(m);
        }
    }
}

fn resource_map(m: &mut Value) {
    if let Value::Object(m) = m {
        m.values_mut().for_each(number_as_string);
    }
}

fn number_as_string(v: &mut Value) {
    if let Value::Number(n) = v {
        *v = Value::String(n.to_string());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: httpd
    image: 127.0.0.1:5000/ferrolet/httpd:1
    ports: [{containerPort: 80, hostPort: 8080}]
    resources:
      limits: {cpu: 0.5, memory: 64Mi}
      requests: {cpu: 1, memory: 1048576}
    someFutureField: true
"#;

    fn names(pods: &[Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn a_yaml_pod() {
        let pods = parse(POD.as_bytes()).unwrap();
        assert_eq!(names(&pods), ["web"]);
        let c = &pods[0].spec.as_ref().unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("127.0.0.1:5000/ferrolet/httpd:1"));
        let res = c.resources.as_ref().unwrap();
        assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "0.5");
        assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "1");
        assert_eq!(res.requests.as_ref().unwrap()["memory"].0, "1048576");
    }

    #[test]
    fn a_json_pod_and_a_json_stream() {
        let one = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},
            "spec":{"containers":[{"name":"c","image":"busybox:1","resources":{"limits":{"cpu":0.25}}}]}}"#;
        let pods = parse(one.as_bytes()).unwrap();
        assert_eq!(names(&pods), ["a"]);
        let two = format!("{one}\n{}", one.replace("\"a\"", "\"b\""));
        assert_eq!(names(&parse(two.as_bytes()).unwrap()), ["a", "b"]);
    }

    #[test]
    fn lists_and_documents() {
        let list = r#"
apiVersion: v1
kind: PodList
items:
- metadata: {name: one}
  spec: {containers: [{name: c, image: busybox:1}]}
- metadata: {name: two}
  spec: {containers: [{name: c, image: busybox:1}]}
"#;
        assert_eq!(names(&parse(list.as_bytes()).unwrap()), ["one", "two"]);

        let v1_list = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: three}
  spec: {containers: [{name: c, image: busybox:1}]}
"#;
        assert_eq!(names(&parse(v1_list.as_bytes()).unwrap()), ["three"]);

        let multi = format!(
            "---\n{POD}\n---\n{}\n---\n",
            POD.replace("name: web", "name: web2")
        );
        assert_eq!(names(&parse(multi.as_bytes()).unwrap()), ["web", "web2"]);

        let empty_list = "apiVersion: v1\nkind: PodList\nitems: []\n";
        assert!(parse(empty_list.as_bytes()).unwrap().is_empty());
    }

    #[test]
    fn refusals_name_the_cause() {
        let err = |s: &str| parse(s.as_bytes()).unwrap_err();
        assert!(matches!(err(""), ManifestError::Empty));
        assert!(matches!(
            err("# only a comment\n---\n"),
            ManifestError::Empty
        ));
        assert!(matches!(err("{{{"), ManifestError::Json(_)));
        assert!(matches!(err("a: [1, 2"), ManifestError::Yaml(_)));
        assert!(matches!(
            err("just some words"),
            ManifestError::NotAnObject { doc: 1 }
        ));
        assert!(matches!(
            err("apiVersion: v1\nmetadata: {name: x}\n"),
            ManifestError::MissingKind { .. }
        ));
        assert!(matches!(
            err("kind: Pod\nmetadata: {name: x}\n"),
            ManifestError::ApiVersion { .. }
        ));
        let e = err("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n");
        assert!(matches!(&e, ManifestError::NotAPod { kind, .. } if kind == "Service"));
        assert!(e.to_string().contains("a Service is not a pod"), "{e}");
        let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n";
        assert!(matches!(err(list), ManifestError::NotAPod { kind, .. } if kind == "ConfigMap"));

        let bad_port = POD.replace("containerPort: 80", "containerPort: eighty");
        let e = err(&bad_port);
        match &e {
            ManifestError::Decode { doc, path, .. } => {
                assert_eq!((*doc, path.as_str()), (1, "spec.containers[0]"));
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("eighty"), "{e}");
        let second_doc = format!("{POD}\n---\n{}", bad_port);
        assert!(matches!(
            err(&second_doc),
            ManifestError::Decode { doc: 2, .. }
        ));
    }
}
