//! Authentication (client certificates, bearer tokens, anonymous), the request authorizer and
//! the SubjectAccessReview policy; TokenReview and SubjectAccessReview answers.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

/// An authenticated (or anonymous) user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (a certificate's CN).
    pub name: String,
    /// User UID ("" for certificate users, as the real server).
    pub uid: String,
    /// Groups (a certificate's O values), `system:authenticated` included.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// An authenticated user: `system:authenticated` is added to its groups.
    pub fn authenticated(name: &str, groups: &[String]) -> Self {
        let mut groups = groups.to_vec();
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups,
        }
    }

    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    /// Whether this is the anonymous user.
    pub fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }
}

/// An access question: the attributes of a request or a SubjectAccessReview's spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SarRequest {
    /// User name.
    pub user: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Verb: get, list, watch, create, update, patch, delete (or an HTTP verb for
    /// non-resource paths).
    pub verb: String,
    /// API group.
    pub group: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Non-resource URL path, when the request is not about a resource.
    pub non_resource_path: Option<String>,
}

/// Decides whether a request (or a SubjectAccessReview) is allowed.
pub type Policy = Arc<dyn Fn(&SarRequest) -> bool + Send + Sync>;

/// The default request authorizer: any authenticated user may do anything.
pub fn allow_authenticated() -> Policy {
    Arc::new(|r: &SarRequest| r.user != "system:anonymous")
}

/// The default SubjectAccessReview policy: `system:masters` only.
pub fn masters_only() -> Policy {
    Arc::new(|r: &SarRequest| r.groups.iter().any(|g| g == "system:masters"))
}

/// What the server knows about identities and permissions; tests change it while it runs.
#[derive(Clone)]
pub struct AuthConfig {
    /// Bearer token → user.
    pub tokens: HashMap<String, UserInfo>,
    /// Decides every API request.
    pub authorizer: Policy,
    /// Answers SubjectAccessReviews.
    pub sar_policy: Policy,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens: HashMap::new(),
            authorizer: allow_authenticated(),
            sar_policy: masters_only(),
        }
    }
}

/// How a request authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authn {
    /// A known user (certificate, token) or anonymous.
    User(UserInfo),
    /// A bearer token the server does not know: 401.
    BadToken,
}

impl AuthConfig {
    /// Authenticates: a bearer token wins over the client certificate, as in kube-apiserver's
    /// union authenticator only one of them is normally sent.
    pub fn authenticate(&self, bearer: Option<&str>, cert_user: Option<&UserInfo>) -> Authn {
        match (bearer, cert_user) {
            (Some(token), _) => self
                .tokens
                .get(token)
                .cloned()
                .map_or(Authn::BadToken, Authn::User),
            (None, Some(user)) => Authn::User(user.clone()),
            (None, None) => Authn::User(UserInfo::anonymous()),
        }
    }

    /// The TokenReview answer for a TokenReview request body.
    pub fn token_review(&self, review: &Value) -> Value {
        let token = review
            .pointer("/spec/token")
            .and_then(Value::as_str)
            .unwrap_or("");
        let status = match self.tokens.get(token) {
            Some(u) => json!({
                "authenticated": true,
                "user": {"username": u.name, "uid": u.uid, "groups": u.groups},
            }),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        let mut out = review.clone();
        if let Value::Object(map) = &mut out {
            map.insert("status".into(), status);
        }
        out
    }

    /// The SubjectAccessReview answer for a request body.
    pub fn subject_access_review(&self, review: &Value) -> Value {
        let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
        let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        let ra = spec.get("resourceAttributes");
        let nra = spec.get("nonResourceAttributes");
        let req = SarRequest {
            user: s(spec.get("user")),
            groups: spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            verb: s(ra
                .and_then(|r| r.get("verb"))
                .or_else(|| nra.and_then(|n| n.get("verb")))),
            group: s(ra.and_then(|r| r.get("group"))),
            resource: s(ra.and_then(|r| r.get("resource"))),
            subresource: s(ra.and_then(|r| r.get("subresource"))),
            name: s(ra.and_then(|r| r.get("name"))),
            namespace: s(ra.and_then(|r| r.get("namespace"))),
            non_resource_path: nra
                .and_then(|n| n.get("path"))
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        let allowed = (self.sar_policy)(&req);
        let status = if allowed {
            json!({"allowed": true, "reason": "allowed by the test policy"})
        } else {
            json!({"allowed": false})
        };
        let mut out = review.clone();
        if let Value::Object(map) = &mut out {
            map.insert("status".into(), status);
        }
        out
    }
}
