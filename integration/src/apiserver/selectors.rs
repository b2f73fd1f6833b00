//! Label and field selectors, as list and watch requests carry them.

use serde_json::Value;

use super::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    path: String,
    value: String,
    equal: bool,
}

/// A parsed `labelSelector` and `fieldSelector` pair; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

/// Splits on commas outside parentheses (`in (a,b)` holds commas).
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(s: &str) -> Result<Vec<String>, ApiError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: set {s}")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_label(req: &str) -> Result<LabelReq, ApiError> {
    if let Some(key) = req.strip_prefix('!') {
        return Ok(LabelReq::NotExists(key.trim().into()));
    }
    if let Some((k, v)) = req.split_once("!=") {
        return Ok(LabelReq::Ne(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = req.split_once("==") {
        return Ok(LabelReq::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = req.split_once('=') {
        return Ok(LabelReq::Eq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = req.split_once(" notin ") {
        return Ok(LabelReq::NotIn(k.trim().into(), set_values(v)?));
    }
    if let Some((k, v)) = req.split_once(" in ") {
        return Ok(LabelReq::In(k.trim().into(), set_values(v)?));
    }
    if req.contains(|c: char| c.is_whitespace() || "()".contains(c)) {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: {req}"
        )));
    }
    Ok(LabelReq::Exists(req.trim().into()))
}

fn parse_field(req: &str) -> Result<FieldReq, ApiError> {
    let (path, value, equal) = if let Some((k, v)) = req.split_once("!=") {
        (k, v, false)
    } else if let Some((k, v)) = req.split_once("==") {
        (k, v, true)
    } else if let Some((k, v)) = req.split_once('=') {
        (k, v, true)
    } else {
        return Err(ApiError::bad_request(format!(
            "invalid selector: '{req}'; can't understand '{req}'"
        )));
    };
    Ok(FieldReq {
        path: path.trim().into(),
        value: value.trim().into(),
        equal,
    })
}

/// Fields a selector may name, per kind (the real server refuses the others).
fn field_allowed(kind: &str, path: &str) -> bool {
    match path {
        "metadata.name" | "metadata.namespace" => true,
        "spec.nodeName" | "status.phase" => kind == "Pod",
        p if p.starts_with("involvedObject.") || p.starts_with("regarding.") => kind == "Event",
        "reason" | "source" | "reportingController" => kind == "Event",
        "type" => kind == "Event" || kind == "Secret",
        "spec.signerName" => kind == "CertificateSigningRequest",
        "spec.unschedulable" => kind == "Node",
        _ => false,
    }
}

impl Selector {
    /// Parses `labelSelector` and `fieldSelector` for objects of `kind`.
    pub fn parse(labels: Option<&str>, fields: Option<&str>, kind: &str) -> Result<Self, ApiError> {
        let labels = split_top(labels.unwrap_or(""))
            .iter()
            .map(|r| parse_label(r))
            .collect::<Result<Vec<_>, _>>()?;
        let fields = split_top(fields.unwrap_or(""))
            .iter()
            .map(|r| parse_field(r))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(bad) = fields.iter().find(|f| !field_allowed(kind, &f.path)) {
            return Err(ApiError::bad_request(format!(
                "\"{}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                bad.path
            )));
        }
        Ok(Selector { labels, fields })
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether `obj` matches every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let labels_ok = self.labels.iter().all(|req| match req {
            LabelReq::Eq(k, v) => label(k) == Some(v.as_str()),
            LabelReq::Ne(k, v) => label(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        });
        labels_ok
            && self.fields.iter().all(|f| {
                let pointer = format!("/{}", f.path.replace('.', "/"));
                // A missing field reads as "" (the real field sets hold every key).
                let actual = match obj.pointer(&pointer) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => String::new(),
                };
                (actual == f.value) == f.equal
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_forms() {
        let pod = json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "fe"}}});
        let m = |s: &str| Selector::parse(Some(s), None, "Pod").unwrap().matches(&pod);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db),tier notin (be)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(!m("!app"));
    }

    #[test]
    fn field_forms() {
        let pod = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let m = |s: &str| Selector::parse(None, Some(s), "Pod").unwrap().matches(&pod);
        assert!(m("spec.nodeName=n1,metadata.namespace=ns"));
        assert!(m("status.phase!=Succeeded"));
        assert!(!m("spec.nodeName=n2"));
        assert!(Selector::parse(None, Some("spec.bogus=x"), "Pod").is_err());
    }
}
