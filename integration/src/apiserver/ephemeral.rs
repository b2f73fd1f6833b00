//! The `pods/ephemeralcontainers` subresource (`kubectl debug`), as kube-apiserver's
//! `podEphemeralContainersStrategy` serves it: a write takes nothing but
//! `spec.ephemeralContainers` from the body (Go's `dropNonEphemeralContainerUpdates`), defaults
//! the containers as the API's decoding does, and is validated as Go's
//! `ValidatePodEphemeralContainersUpdate`: existing ephemeral containers may be neither
//! changed nor removed, new ones follow `validateEphemeralContainers` (names unique across
//! every container of the pod, a target among the pod's containers and init containers, no
//! ports, resources, probes or lifecycle, no `subPath`), and static pods take none. Go's
//! field error texts; the diff Go appends to "may not be changed" is left out.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::status::ApiError;

/// The annotation marking a mirror pod (a static pod's API copy).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `EphemeralContainerCommon` fields an ephemeral container may not set (the fields Go's
/// `allowedEphemeralContainerFields` leaves out), in Go's struct order.
const FORBIDDEN_FIELDS: [&str; 8] = [
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

/// Go's `ValidateDNS1123Label` message.
const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// The pod `old` with the ephemeral containers of `body` (a Pod), or Go's `Invalid` error.
pub fn update(old: &Value, body: &Value, name: &str) -> Result<Value, ApiError> {
    let invalid = |errors: Vec<String>| {
        let why = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        ApiError::invalid("", "Pod", name, &why)
    };
    if old
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some()
    {
        return Err(invalid(vec![
            ": Forbidden: static pods do not support ephemeral containers".into(),
        ]));
    }
    let mut wanted: Vec<Value> = match body.pointer("/spec/ephemeralContainers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "spec.ephemeralContainers: not a list: {other}"
            )));
        }
    };
    wanted.iter_mut().for_each(default_container);
    let errors = validate(old, &wanted);
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let mut new = old.clone();
    if let Some(Value::Object(spec)) = new.get_mut("spec") {
        if wanted.is_empty() {
            spec.remove("ephemeralContainers");
        } else {
            spec.insert("ephemeralContainers".into(), Value::Array(wanted));
        }
    }
    Ok(new)
}

/// The API's defaults for a container (Go's `SetDefaults_Container`): the termination
/// message path and policy, and the pull policy from the image's tag.
fn default_container(c: &mut Value) {
    let Value::Object(m) = c else { return };
    let image = m.get("image").and_then(Value::as_str).unwrap_or_default();
    let pull = if pulls_always(image) {
        "Always"
    } else {
        "IfNotPresent"
    };
    for (key, value) in [
        ("terminationMessagePath", "/dev/termination-log"),
        ("terminationMessagePolicy", "File"),
        ("imagePullPolicy", pull),
    ] {
        if m.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
            m.insert(key.into(), json!(value));
        }
    }
}

/// Whether an image reference means tag `latest`: no digest and no tag, or `:latest`.
fn pulls_always(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// Go's errors for replacing `old`'s ephemeral containers with `wanted`.
fn validate(old: &Value, wanted: &[Value]) -> Vec<String> {
    let mut errors = Vec::new();
    let names_of = |list: Option<&Value>| -> Vec<String> {
        list.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
            .collect()
    };
    let spec = old.get("spec").unwrap_or(&Value::Null);
    let others: BTreeSet<String> = names_of(spec.get("containers"))
        .into_iter()
        .chain(names_of(spec.get("initContainers")))
        .collect();
    let volumes: BTreeSet<String> = names_of(spec.get("volumes")).into_iter().collect();
    let mut all = others.clone();
    for (i, c) in wanted.iter().enumerate() {
        errors.extend(new_container_errors(c, i, &others, &volumes, &mut all));
    }
    // Existing ones may not change; patches do not keep the order, so each by name.
    let path = "spec.ephemeralContainers";
    let existing = spec.get("ephemeralContainers").and_then(Value::as_array);
    for o in existing.into_iter().flatten() {
        let name = o.get("name").and_then(Value::as_str).unwrap_or_default();
        match wanted.iter().find(|w| w.get("name") == o.get("name")) {
            None => errors.push(format!(
                "{path}: Forbidden: existing ephemeral containers {name:?} may not be removed\n"
            )),
            Some(w) if w != o => errors.push(format!(
                "{path}: Forbidden: existing ephemeral containers {name:?} may not be changed\n"
            )),
            Some(_) => {}
        }
    }
    errors
}

/// Go's `validateEphemeralContainers` for `ephemeralContainers[i]`; `all` collects the
/// names seen so far (every container of the pod first).
fn new_container_errors(
    c: &Value,
    i: usize,
    others: &BTreeSet<String>,
    volumes: &BTreeSet<String>,
    all: &mut BTreeSet<String>,
) -> Vec<String> {
    let at = format!("spec.ephemeralContainers[{i}]");
    let text = |key: &str| c.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut errors = Vec::new();
    let name = text("name");
    if name.is_empty() {
        errors.push(format!("{at}.name: Required value"));
    } else if !is_dns1123_label(name) {
        let why = if name.len() > 63 {
            "must be no more than 63 characters"
        } else {
            DNS1123_LABEL
        };
        errors.push(format!("{at}.name: Invalid value: {name:?}: {why}"));
    }
    if text("image").is_empty() {
        errors.push(format!("{at}.image: Required value"));
    }
    let mounts = c.get("volumeMounts").and_then(Value::as_array);
    for (j, m) in mounts.into_iter().flatten().enumerate() {
        let volume = m.get("name").and_then(Value::as_str).unwrap_or_default();
        if !volumes.contains(volume) {
            errors.push(format!(
                "{at}.volumeMounts[{j}].name: Not found: {volume:?}"
            ));
        }
    }
    if !name.is_empty() && !all.insert(name.to_string()) {
        errors.push(format!("{at}.name: Duplicate value: {name:?}"));
    }
    let target = text("targetContainerName");
    if !target.is_empty() && !others.contains(target) {
        errors.push(format!("{at}.targetContainerName: Not found: {target:?}"));
    }
    for field in FORBIDDEN_FIELDS {
        if c.get(field).is_some_and(is_set) {
            errors.push(format!(
                "{at}.{field}: Forbidden: cannot be set for an Ephemeral Container"
            ));
        }
    }
    for (j, m) in mounts.into_iter().flatten().enumerate() {
        for field in ["subPath", "subPathExpr"] {
            if m.get(field)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                errors.push(format!(
                    "{at}.volumeMounts[{j}].{field}: Forbidden: cannot be set for an Ephemeral Container"
                ));
            }
        }
    }
    errors
}

/// Whether a JSON value differs from its Go zero value.
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => o.values().any(is_set),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.len() <= 63
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
            "spec": {
                "containers": [{"name": "app", "image": "busybox"}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
            "status": {"phase": "Running"},
        })
    }

    fn with(list: Value) -> Value {
        json!({"spec": {"ephemeralContainers": list}})
    }

    fn message(e: ApiError) -> String {
        assert_eq!((e.code, e.reason), (422, "Invalid"), "{e}");
        e.message
    }

    #[test]
    fn only_ephemeral_containers_are_taken_and_defaulted() {
        let body = json!({
            "metadata": {"labels": {"x": "y"}},
            "spec": {
                "containers": [{"name": "app", "image": "other"}],
                "ephemeralContainers": [
                    {"name": "dbg", "image": "busybox:1.36", "targetContainerName": "app"},
                    {"name": "dbg2", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/d"}]},
                ],
            },
            "status": {"phase": "Failed"},
        });
        let new = update(&pod(), &body, "web").unwrap();
        let mut want = pod();
        want["spec"]["ephemeralContainers"] = json!([
            {"name": "dbg", "image": "busybox:1.36", "targetContainerName": "app",
             "terminationMessagePath": "/dev/termination-log",
             "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"},
            {"name": "dbg2", "image": "busybox",
             "volumeMounts": [{"name": "data", "mountPath": "/d"}],
             "terminationMessagePath": "/dev/termination-log",
             "terminationMessagePolicy": "File", "imagePullPolicy": "Always"},
        ]);
        assert_eq!(new, want);
        // Sending them back unchanged (defaults and all) is fine.
        assert_eq!(update(&new, &new, "web").unwrap(), new);
    }

    #[test]
    fn existing_ones_may_neither_change_nor_go() {
        let old = update(
            &pod(),
            &with(json!([{"name": "dbg", "image": "busybox"}])),
            "web",
        )
        .unwrap();
        let changed = with(json!([{"name": "dbg", "image": "alpine"}]));
        assert_eq!(
            message(update(&old, &changed, "web").unwrap_err()),
            "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n"
        );
        let removed = with(json!([]));
        assert_eq!(
            message(update(&old, &removed, "web").unwrap_err()),
            "Pod \"web\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be removed\n"
        );
    }

    #[test]
    fn new_ones_follow_gos_rules() {
        let bad = with(json!([
            {"name": "app", "image": "busybox", "targetContainerName": "nope",
             "ports": [{"containerPort": 80}], "lifecycle": {"preStop": {"exec": {"command": ["x"]}}},
             "resources": {}},
            {"name": "Dbg", "volumeMounts": [{"name": "gone", "mountPath": "/g", "subPath": "s"}]},
            {"name": "init", "image": "busybox", "readinessProbe": {"exec": {"command": ["x"]}}},
        ]));
        assert_eq!(
            message(update(&pod(), &bad, "web").unwrap_err()),
            format!(
                "Pod \"web\" is invalid: [\
                 spec.ephemeralContainers[0].name: Duplicate value: \"app\", \
                 spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\", \
                 spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container, \
                 spec.ephemeralContainers[0].lifecycle: Forbidden: cannot be set for an Ephemeral Container, \
                 spec.ephemeralContainers[1].name: Invalid value: \"Dbg\": {DNS1123_LABEL}, \
                 spec.ephemeralContainers[1].image: Required value, \
                 spec.ephemeralContainers[1].volumeMounts[0].name: Not found: \"gone\", \
                 spec.ephemeralContainers[1].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container, \
                 spec.ephemeralContainers[2].name: Duplicate value: \"init\", \
                 spec.ephemeralContainers[2].readinessProbe: Forbidden: cannot be set for an Ephemeral Container]"
            )
        );
        let twice = with(json!([
            {"name": "d", "image": "busybox"}, {"name": "d", "image": "busybox"},
        ]));
        assert_eq!(
            message(update(&pod(), &twice, "web").unwrap_err()),
            "Pod \"web\" is invalid: spec.ephemeralContainers[1].name: Duplicate value: \"d\""
        );
    }

    #[test]
    fn static_pods_take_none() {
        let mut mirror = pod();
        mirror["metadata"]["annotations"] = json!({MIRROR_ANNOTATION: "abc"});
        let body = with(json!([{"name": "dbg", "image": "busybox"}]));
        assert_eq!(
            message(update(&mirror, &body, "web").unwrap_err()),
            "Pod \"web\" is invalid: : Forbidden: static pods do not support ephemeral containers"
        );
    }

    #[test]
    fn every_patch_type_adds_through_the_store_with_a_modified_event() {
        use super::super::patch::PatchType;
        use super::super::store::{EventType, Store};

        let pods = super::super::resources::find("", "v1", "pods").unwrap();
        let mut store = Store::new(100);
        store.create(pods, "default", pod(), None).unwrap();
        let sub = Some("ephemeralcontainers");
        let c = |name: &str| json!({"name": name, "image": "busybox:1"});
        let patches = [
            (
                PatchType::Strategic,
                json!({"spec": {"ephemeralContainers": [c("s")]}}),
            ),
            // A merge patch replaces the list: the existing ones come along.
            (
                PatchType::Merge,
                json!({"spec": {"ephemeralContainers": [c("s"), c("m")]}}),
            ),
            (
                PatchType::Json,
                json!([{"op": "add", "path": "/spec/ephemeralContainers/-", "value": c("j")}]),
            ),
        ];
        for (kind, body) in patches {
            let rv = store.resource_version();
            let (_, mut events) = store.watch(pods, Some("default"), Some(rv)).unwrap();
            let new = store
                .patch(pods, "default", "web", kind, &body, sub)
                .unwrap();
            assert_eq!(new["metadata"]["resourceVersion"], (rv + 1).to_string());
            let event = events.try_recv().unwrap();
            assert_eq!((event.kind, event.rv), (EventType::Modified, rv + 1));
        }
        let new = store.get(pods, "default", "web").unwrap();
        let names: Vec<_> = new["spec"]["ephemeralContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["s", "m", "j"]);
        assert_eq!(new["status"], pod()["status"]);
        // A merge patch that leaves one out removes it: refused.
        let dropped = json!({"spec": {"ephemeralContainers": [c("s")]}});
        let refused = store
            .patch(pods, "default", "web", PatchType::Merge, &dropped, sub)
            .unwrap_err();
        assert!(
            refused.message.contains("\"m\" may not be removed"),
            "{refused}"
        );
    }

    #[test]
    fn latest_means_always() {
        for (image, always) in [
            ("busybox", true),
            ("busybox:latest", true),
            ("127.0.0.1:5000/ferrolet/busybox", true),
            ("127.0.0.1:5000/ferrolet/busybox:1", false),
            ("busybox@sha256:abc", false),
        ] {
            assert_eq!(pulls_always(image), always, "{image}");
        }
    }
}
