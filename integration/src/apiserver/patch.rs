//! PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (the lists the kubelet
//! sends) and JSON patch (RFC 6902).

use serde_json::{Map, Value};

use super::status::ApiError;

/// The patch types the server accepts, by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/json-patch+json`
    Json,
}

impl PatchType {
    /// The patch type of a `Content-Type`, or 415 (server-side apply included: not served).
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchType::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
            "application/json-patch+json" => Ok(PatchType::Json),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// Applies `patch` of type `kind` to `doc`.
pub fn apply(kind: PatchType, doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
    match kind {
        PatchType::Merge => {
            merge(doc, patch);
            Ok(())
        }
        PatchType::Strategic => {
            strategic(doc, patch);
            Ok(())
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            // A failed `test` is a conflict-free 422 on the real server.
            json_patch::patch(doc, &ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })
        }
    }
}

/// RFC 7386: objects merge key by key, `null` deletes, everything else replaces.
pub fn merge(doc: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *doc = patch.clone();
        return;
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    if let Value::Object(target) = doc {
        for (k, v) in patch {
            if v.is_null() {
                target.remove(k);
            } else {
                merge(target.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// The merge key of a list field the kubelet patches (the Go types' `patchMergeKey`); other
/// lists are replaced, as for `images`.
fn merge_key(field: &str) -> Option<&'static str> {
    Some(match field {
        "conditions" | "addresses" => "type",
        "containerStatuses" | "initContainerStatuses" | "ephemeralContainerStatuses" => "name",
        "containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" => "name",
        "resourceClaimStatuses" => "name",
        "podIPs" | "hostIPs" => "ip",
        "volumeMounts" => "mountPath",
        "ownerReferences" => "uid",
        _ => return None,
    })
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

fn without_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), without_directives(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Strategic merge patch: like [`merge`], but lists with a merge key merge element by element,
/// `$patch: replace|delete` directives apply, `$setElementOrder/…` and `$retainKeys` are ignored.
pub fn strategic(doc: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *doc = patch.clone();
        return;
    };
    if directive(patch) == Some("replace") {
        *doc = without_directives(patch);
        return;
    }
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let Value::Object(target) = doc else { return };
    for (k, v) in patch_map {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() || directive(v) == Some("delete") {
            target.remove(k);
            continue;
        }
        match (v, merge_key(k)) {
            (Value::Array(items), Some(key)) => {
                let slot = target.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                merge_list(slot, items, key);
            }
            (Value::Object(_), _) => strategic(target.entry(k.clone()).or_insert(Value::Null), v),
            _ => {
                target.insert(k.clone(), without_directives(v));
            }
        }
    }
}

fn merge_list(slot: &mut Value, items: &[Value], key: &str) {
    if items.iter().any(|i| directive(i) == Some("replace")) {
        *slot = Value::Array(
            items
                .iter()
                .filter(|i| directive(i).is_none())
                .map(without_directives)
                .collect(),
        );
        return;
    }
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    let Value::Array(list) = slot else { return };
    for item in items {
        let Some(id) = item.get(key) else {
            // Not an object with the key: nothing to merge on, append as is.
            list.push(without_directives(item));
            continue;
        };
        if directive(item) == Some("delete") {
            list.retain(|e| e.get(key) != Some(id));
            continue;
        }
        match list.iter_mut().find(|e| e.get(key) == Some(id)) {
            Some(existing) => strategic(existing, item),
            None => list.push(without_directives(item)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_conditions_by_type() {
        let mut doc = json!({"status": {"phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
            "images": [{"names": ["a"]}]}});
        let patch = json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
            "images": [{"names": ["b"]}], "phase": "Running"}});
        strategic(&mut doc, &patch);
        assert_eq!(
            doc,
            json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"}], "images": [{"names": ["b"]}]}})
        );
    }

    #[test]
    fn strategic_directives() {
        let mut doc =
            json!({"status": {"podIPs": [{"ip": "1"}, {"ip": "2"}], "x": {"a": 1, "b": 2}}});
        strategic(
            &mut doc,
            &json!({"status": {"podIPs": [{"ip": "1", "$patch": "delete"}], "x": {"$patch": "replace", "c": 3}}}),
        );
        assert_eq!(
            doc,
            json!({"status": {"podIPs": [{"ip": "2"}], "x": {"c": 3}}})
        );
    }

    #[test]
    fn json_patch_ops() {
        let mut doc = json!({"metadata": {"labels": {"a": "1"}}});
        let patch = json!([{"op": "test", "path": "/metadata/labels/a", "value": "1"},
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "remove", "path": "/metadata/labels/a"}]);
        apply(PatchType::Json, &mut doc, &patch).unwrap();
        assert_eq!(doc, json!({"metadata": {"labels": {"b": "2"}}}));
        let bad = json!([{"op": "test", "path": "/metadata/labels/b", "value": "x"}]);
        assert_eq!(
            apply(PatchType::Json, &mut doc, &bad).unwrap_err().code,
            422
        );
    }
}
