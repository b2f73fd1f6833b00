//! The TokenRequest subresource (`serviceaccounts/<name>/token`, create only): bound
//! service-account tokens as kube-apiserver issues them — ES256 JWTs with the claims its
//! token generator writes (`aud`, `exp`, `iat`, `nbf`, `iss`, `jti`, `sub`, and
//! `kubernetes.io` naming the namespace, the service account and the bound pod or secret),
//! checked as its TokenREST checks a request (service account, bound object and its UID,
//! expiration bounds).

use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde_json::{Value, json};
use sha2::Digest;

use super::resources;
use super::status::ApiError;
use super::store::{Store, fill_type};

/// The API server's own audience and issuer (kubeadm's `--service-account-issuer`).
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// Longest lifetime a TokenRequest may ask for (2^32 seconds).
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// The lifetime kube-apiserver extends for the kubelet's default projected token (3607 s)
/// when `--service-account-extend-token-expiration` is on (its default).
const WARN_ONLY_EXPIRATION_SECONDS: i64 = 3607;
/// What such a token really lives for: a year.
const EXTENDED_EXPIRATION_SECONDS: i64 = 365 * 24 * 3600;

/// The service-account token signer.
pub struct TokenIssuer {
    key: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl TokenIssuer {
    /// A fresh P-256 signing key.
    pub fn new() -> Result<Self> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| anyhow::anyhow!("generating the token signing key"))?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| anyhow::anyhow!("loading the token signing key"))
            .context("token signer")?;
        // kube-apiserver's key id: a digest of the public key.
        let kid = B64URL.encode(sha2::Sha256::digest(key.public_key().as_ref()));
        Ok(TokenIssuer { key, kid, rng })
    }

    /// A signed JWT of `claims`.
    pub fn sign(&self, claims: &Value) -> Result<String, ApiError> {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let input = format!(
            "{}.{}",
            B64URL.encode(header.to_string()),
            B64URL.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| ApiError::internal("failed to generate token: signing failed"))?;
        Ok(format!("{input}.{}", B64URL.encode(signature.as_ref())))
    }

    /// The claims of `token` if this issuer signed it (expiry not checked).
    pub fn verify(&self, token: &str) -> Option<Value> {
        let (input, signature) = token.rsplit_once('.')?;
        let signature = B64URL.decode(signature).ok()?;
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref())
            .verify(input.as_bytes(), &signature)
            .ok()?;
        let (header, claims) = input.split_once('.')?;
        let header: Value = serde_json::from_slice(&B64URL.decode(header).ok()?).ok()?;
        if header.get("kid").and_then(Value::as_str) != Some(self.kid.as_str()) {
            return None;
        }
        serde_json::from_slice(&B64URL.decode(claims).ok()?).ok()
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn core(plural: &str) -> Result<&'static resources::ResourceType, ApiError> {
    resources::find("", "v1", plural).ok_or_else(|| ApiError::internal("no such resource"))
}

fn invalid(why: &str) -> ApiError {
    ApiError::invalid("authentication.k8s.io", "TokenRequest", "", why)
}

/// Answers a TokenRequest for service account `name` in `ns` (kube-apiserver's TokenREST).
pub(crate) fn token_request(
    store: &Store,
    issuer: &TokenIssuer,
    min_expiration: Duration,
    ns: &str,
    name: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let body_name = str_at(body, "/metadata/name");
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            &format!(
                "metadata.name: Invalid value: \"{body_name}\": must match the service account name if specified"
            ),
        ));
    }
    let sa = store.get(core("serviceaccounts")?, ns, name)?;
    let mut audiences: Vec<String> = body
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(DEFAULT_AUDIENCE.into());
    }
    // v1 defaulting: an hour.
    let expiration = body
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    let min = i64::try_from(min_expiration.as_secs()).unwrap_or(i64::MAX);
    if expiration < min {
        return Err(invalid(&format!(
            "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration less than {}",
            if min == 600 {
                "10 minutes".to_string()
            } else {
                format!("{min} seconds")
            }
        )));
    }
    if expiration > MAX_EXPIRATION_SECONDS {
        return Err(invalid(&format!(
            "spec.expirationSeconds: Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"
        )));
    }
    let bound = body
        .pointer("/spec/boundObjectRef")
        .filter(|b| !b.is_null());
    let mut bound_claims = serde_json::Map::new();
    let mut bound_pod = false;
    if let Some(bound) = bound {
        let (api_version, kind) = (str_at(bound, "/apiVersion"), str_at(bound, "/kind"));
        let obj_name = str_at(bound, "/name");
        let obj = match (api_version, kind) {
            ("v1", "Pod") => {
                let pod = store.get(core("pods")?, ns, obj_name)?;
                let pod_sa = match str_at(&pod, "/spec/serviceAccountName") {
                    // The ServiceAccount admission plugin's default (not run here).
                    "" => "default",
                    sa => sa,
                };
                if pod_sa != name {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount \"{name}\" to pod running with different serviceaccount name."
                    )));
                }
                bound_pod = true;
                let node = str_at(&pod, "/spec/nodeName");
                if !node.is_empty()
                    && let Ok(n) = store.get(core("nodes")?, "", node)
                {
                    bound_claims.insert(
                        "node".into(),
                        json!({"name": node, "uid": str_at(&n, "/metadata/uid")}),
                    );
                }
                pod
            }
            ("v1", "Secret") => store.get(core("secrets")?, ns, obj_name)?,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {}",
                    gvk_string(api_version, kind)
                )));
            }
        };
        let uid = str_at(&obj, "/metadata/uid");
        let wanted = str_at(bound, "/uid");
        if !wanted.is_empty() && wanted != uid {
            return Err(ApiError::conflict(
                "",
                kind,
                obj_name,
                &format!(
                    "the UID in the bound object reference ({wanted}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        bound_claims.insert(kind.to_lowercase(), json!({"name": obj_name, "uid": uid}));
    }
    let now = jiff::Timestamp::now().as_second();
    let mut lifetime = expiration;
    if bound_pod
        && expiration == WARN_ONLY_EXPIRATION_SECONDS
        && audiences.iter().all(|a| a == DEFAULT_AUDIENCE)
    {
        bound_claims.insert("warnafter".into(), json!(now + expiration));
        lifetime = EXTENDED_EXPIRATION_SECONDS;
    }
    let mut kubernetes = json!({
        "namespace": ns,
        "serviceaccount": {"name": name, "uid": str_at(&sa, "/metadata/uid")},
    });
    if let Value::Object(k) = &mut kubernetes {
        k.extend(bound_claims);
    }
    let claims = json!({
        "aud": audiences,
        "exp": now + lifetime,
        "iat": now,
        "nbf": now,
        "iss": DEFAULT_AUDIENCE,
        "jti": uuid::Uuid::new_v4().to_string(),
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "kubernetes.io": kubernetes,
    });
    let token = issuer.sign(&claims)?;
    let expires = jiff::Timestamp::from_second(now + expiration)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let mut spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Value::Object(s) = &mut spec {
        s.insert("audiences".into(), json!(audiences));
        s.insert("expirationSeconds".into(), json!(expiration));
    }
    let mut answer = json!({
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": jiff::Timestamp::from_second(now).map(|t| t.to_string()).unwrap_or_default()},
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": expires},
    });
    fill_type(token_request_type(), &mut answer);
    Ok(answer)
}

/// `kind`/`apiVersion` of the answer.
fn token_request_type() -> &'static resources::ResourceType {
    static TOKEN_REQUEST: resources::ResourceType = resources::ResourceType {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "tokenrequests",
        kind: "TokenRequest",
        namespaced: true,
        subresources: &[],
        verbs: resources::Verbs::CreateOnly,
    };
    &TOKEN_REQUEST
}

/// Go's `GroupVersionKind.String()`: `group/version, Kind=kind`.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}
