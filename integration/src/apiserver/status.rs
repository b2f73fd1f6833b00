//! `metav1.Status` failures, with the reasons and messages a real API server sends.

use serde_json::{Value, json};

/// `details` of a failure about one object (or one resource, with an empty name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    /// `details.name`.
    pub name: String,
    /// `details.kind` (the resource plural, as the real server puts it).
    pub kind: String,
    /// `details.group` ("" for core: then omitted).
    pub group: String,
}

/// A failed request, answered as a `Status` object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details`, boxed: errors travel in every `Result` and should stay small.
    pub details: Option<Box<Details>>,
}

impl ApiError {
    /// A failure with no details.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn about(mut self, group: &str, plural: &str, name: &str) -> Self {
        self.details = Some(Box::new(Details {
            name: name.into(),
            kind: plural.into(),
            group: group.into(),
        }));
        self
    }

    /// 404 `pods "x" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualified(group, plural);
        Self::new(404, "NotFound", format!("{qualified} \"{name}\" not found"))
            .about(group, plural, name)
    }

    /// 409 `pods "x" already exists`.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualified(group, plural);
        Self::new(
            409,
            "AlreadyExists",
            format!("{qualified} \"{name}\" already exists"),
        )
        .about(group, plural, name)
    }

    /// 409 Conflict on a stale resourceVersion or failed precondition.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let qualified = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        )
        .about(group, plural, name)
    }

    /// 422 Invalid.
    pub fn invalid(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let qualified = qualified(group, plural);
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {why}"),
        )
        .about(group, plural, name)
    }

    /// 422 Invalid of a core object, worded as Go's `NewInvalid` (`Pod "p" is invalid: …`).
    pub fn invalid_core(kind: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {why}"),
        )
        .about("", plural, name)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden, worded like RBAC's denial.
    pub fn forbidden(user: &str, verb: &str, group: &str, plural: &str, namespace: &str) -> Self {
        let scope = if namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{namespace}\"")
        };
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} is forbidden: User \"{user}\" cannot {verb} resource \"{plural}\" in API group \"{group}\" {scope}",
                qualified(group, plural)
            ),
        )
        .about(group, plural, "")
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type})"
            ),
        )
    }

    /// 410 Expired: a watch's resourceVersion fell out of the history.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(d) = &self.details {
            if !d.name.is_empty() {
                details.insert("name".into(), json!(d.name));
            }
            if !d.group.is_empty() {
                details.insert("group".into(), json!(d.group));
            }
            details.insert("kind".into(), json!(d.kind));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.insert("details".into(), Value::Object(details));
        }
        status
    }
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}
