//! What Kubernetes 1.28's pod strategy does to an update of a pod's spec with the
//! `InPlacePodVerticalScaling` gate on: only the updatable fields may change (containers'
//! images, CPU and memory `resources`, init containers' images, `activeDeadlineSeconds`,
//! `tolerations`, `terminationGracePeriodSeconds`; Go's `ValidatePodUpdate` messages), the
//! QoS class may not, and a change of requests the kubelet has not allocated marks the
//! resize `Proposed` (`MarkPodProposedForResize`).

use serde_json::{Map, Value, json};

use super::status::ApiError;

/// Go 1.28's `updatablePodSpecFields` with the gate on.
const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,\
`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),\
`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative),\
`spec.containers[*].resources` (for CPU/memory only)";

/// A quantity in milli-units (enough to compare CPU and memory values); None if malformed.
fn milli(q: &Value) -> Option<i128> {
    let text = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        _ => return None,
    };
    let v: f64 = number.parse().ok()?;
    Some((v * factor * 1000.0).ceil() as i128)
}

fn list_get<'a>(c: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    c.pointer(&format!("/resources/{list}/{name}"))
}

/// Go's `GetPodQOS` on the JSON pod.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| pod.pointer(&format!("/spec/{k}")).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        for r in ["cpu", "memory"] {
            let limit = list_get(c, "limits", r).and_then(milli);
            let request = list_get(c, "requests", r).and_then(milli).or(limit);
            if limit.is_some_and(|l| l > 0) || request.is_some_and(|q| q > 0) {
                any = true;
            }
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The CPU and memory entries of `new` replaced by `old`'s (Go's `mungeCpuMemResources`).
fn munge_cpu_memory(new: Option<&Value>, old: Option<&Value>) -> Option<Value> {
    let old = old?.as_object()?;
    let mut out: Map<String, Value> = new.and_then(Value::as_object).cloned().unwrap_or_default();
    for r in ["cpu", "memory"] {
        out.remove(r);
        if let Some(v) = old.get(r) {
            out.insert(r.to_string(), v.clone());
        }
    }
    Some(Value::Object(out))
}

/// `new`'s spec with the updatable fields set to `old`'s.
fn munged(old: &Value, new: &Value) -> Value {
    let mut spec = new.get("spec").cloned().unwrap_or(Value::Null);
    let old_spec = old.get("spec").cloned().unwrap_or(Value::Null);
    for list in ["containers", "initContainers"] {
        let Some(items) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for (i, c) in items.iter_mut().enumerate() {
            let Some(o) = old_spec.get(list).and_then(|l| l.get(i)) else {
                continue;
            };
            if let (Some(image), Value::Object(map)) = (o.get("image"), &mut *c) {
                map.insert("image".into(), image.clone());
            }
            if list == "containers"
                && let Value::Object(map) = c
            {
                let mut res = Map::new();
                for kind in ["limits", "requests"] {
                    let merged = munge_cpu_memory(
                        map.get("resources").and_then(|r| r.get(kind)),
                        o.get("resources").and_then(|r| r.get(kind)),
                    );
                    if let Some(m) = merged.filter(|m| m.as_object().is_some_and(|m| !m.is_empty()))
                    {
                        res.insert(kind.into(), m);
                    }
                }
                if let Some(claims) = map.get("resources").and_then(|r| r.get("claims")) {
                    res.insert("claims".into(), claims.clone());
                }
                if res.is_empty() {
                    map.remove("resources");
                } else {
                    map.insert("resources".into(), Value::Object(res));
                }
            }
        }
    }
    if let Value::Object(map) = &mut spec {
        for field in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
        ] {
            match old_spec.get(field) {
                Some(v) => map.insert(field.into(), v.clone()),
                None => map.remove(field),
            };
        }
    }
    spec
}

/// The old spec with the same empty resources normalized away, for the comparison.
fn normalized(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Value::Object(map) = c
                && map
                    .get("resources")
                    .is_some_and(|r| r.as_object().is_some_and(|m| m.is_empty()))
            {
                map.remove("resources");
            }
        }
    }
    spec
}

/// Checks an update of pod `name` from `old` to `new` and marks a proposed resize in `new`.
pub fn check(name: &str, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    if old.get("spec") == new.get("spec") {
        return Ok(());
    }
    let (old_qos, new_qos) = (qos_class(old), qos_class(new));
    if old_qos != new_qos {
        return Err(ApiError::invalid_core(
            "Pod",
            "pods",
            name,
            &format!("metadata: Invalid value: \"{new_qos}\": Pod QoS is immutable"),
        ));
    }
    let old_spec = normalized(old.get("spec").unwrap_or(&Value::Null));
    if normalized(&munged(old, new)) != old_spec {
        return Err(ApiError::invalid_core(
            "Pod",
            "pods",
            name,
            &format!("spec: Forbidden: pod updates may not change fields other than {UPDATABLE}"),
        ));
    }
    mark_proposed(old, new);
    Ok(())
}

/// Go's `MarkPodProposedForResize`: a container whose resources changed and whose requests
/// differ from its status's `allocatedResources` makes `status.resize` Proposed.
fn mark_proposed(old: &Value, new: &mut Value) {
    let empty = Vec::new();
    let containers = new
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let statuses = new
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let same = |a: Option<&Value>, b: Option<&Value>| {
        let to_map = |v: Option<&Value>| {
            v.and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, q)| (k.clone(), milli(q)))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        to_map(a) == to_map(b)
    };
    let proposed = containers.iter().enumerate().any(|(i, c)| {
        let Some(requests) = c.pointer("/resources/requests") else {
            return false;
        };
        let old_c = old.pointer(&format!("/spec/containers/{i}"));
        if old_c.and_then(|o| o.get("resources")) == c.get("resources") {
            return false;
        }
        statuses
            .iter()
            .find(|s| s.get("name") == c.get("name"))
            .is_some_and(|s| !same(Some(requests), s.get("allocatedResources")))
    });
    if proposed && let Some(Value::Object(status)) = new.get_mut("status") {
        status.insert("resize".into(), json!("Proposed"));
    }
}
