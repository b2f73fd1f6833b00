//! Connections, routing and the handlers of every verb.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::auth::{Authn, SarRequest, UserInfo};
use super::patch::PatchType;
use super::resources::{self, ResourceType, Verbs};
use super::selectors::Selector;
use super::status::ApiError;
use super::store::{DeleteOptions, fill_type};
use super::{Shared, pki, requester, watch};

/// Response bodies: whole JSON documents or watch streams.
pub type Body = BoxBody<Bytes, Infallible>;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one TCP connection: TLS, then HTTP/1.1 or h2.
pub(crate) async fn connection(stream: TcpStream, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await else {
        return;
    };
    let cert_user = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|cert| pki::subject_of(cert))
        .map(|(user, groups)| UserInfo::authenticated(&user, &groups));
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        let user = cert_user.clone();
        async move { Ok::<_, Infallible>(handle(shared, user, req).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // A client going away mid-request is its business.
    let _ = builder.serve_connection(TokioIo::new(tls), service).await;
}

/// A whole JSON response.
pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status())
}

fn text_response(text: &'static str) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_map(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// A request's target once the path is parsed.
#[derive(Debug)]
struct Target {
    res: &'static ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    watch_prefix: bool,
}

/// Parses `/api/v1/…` and `/apis/{group}/{version}/…`; `None` for non-resource paths.
fn parse_path(path: &str) -> Result<Option<Target>, ApiError> {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let (group, version, rest) = match segs.first().map(String::as_str) {
        Some("api") if segs.len() >= 3 => ("", segs[1].as_str(), &segs[2..]),
        Some("apis") if segs.len() >= 4 => (segs[1].as_str(), segs[2].as_str(), &segs[3..]),
        _ => return Ok(None),
    };
    let (watch_prefix, rest) = match rest.first().map(String::as_str) {
        Some("watch") => (true, &rest[1..]),
        _ => (false, rest),
    };
    let not_found = || ApiError::no_route(path);
    // `namespaces/{ns}/{plural}…` unless the third segment is no namespaced plural: then it is
    // the namespaces resource itself (`namespaces/{name}/status`).
    let namespaced = rest.len() >= 3
        && rest[0] == "namespaces"
        && resources::find(group, version, &rest[2]).is_some_and(|r| r.namespaced);
    let (namespace, rest) = if namespaced {
        (Some(rest[1].clone()), &rest[2..])
    } else {
        (None, rest)
    };
    let plural = rest.first().ok_or_else(not_found)?;
    let res = resources::find(group, version, plural).ok_or_else(not_found)?;
    let name = rest.get(1).cloned();
    let sub = rest.get(2).cloned();
    if rest.len() > 3 {
        return Err(not_found());
    }
    if let Some(s) = &sub
        && !res.subresources.contains(&s.as_str())
    {
        return Err(not_found());
    }
    Ok(Some(Target {
        res,
        namespace,
        name,
        sub,
        watch_prefix,
    }))
}

async fn read_json(req: Request<Incoming>) -> Result<Value, ApiError> {
    let bytes = req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?
        .to_bytes();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!("the body of the request was not valid JSON: {e}"))
    })
}

/// Answers one request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    cert_user: Option<UserInfo>,
    req: Request<Incoming>,
) -> Response<Body> {
    match route(&shared, cert_user, req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

async fn route(
    shared: &Arc<Shared>,
    cert_user: Option<UserInfo>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let auth = shared.auth();
    let bearer = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(|t| t.trim().to_string());
    let user = match auth.authenticate(bearer.as_deref(), cert_user.as_ref()) {
        Authn::User(user) => user,
        Authn::BadToken => {
            shared.count("other");
            return Err(ApiError::unauthorized());
        }
    };
    let path = req.uri().path().to_string();
    let query = query_map(req.uri().query());
    let Some(target) = parse_path(&path).inspect_err(|_| shared.count("other"))? else {
        shared.count("other");
        return non_resource(&path, &user, &auth.authorizer, req.method());
    };
    let watch = target.watch_prefix || query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (req.method(), &target.name) {
        (&Method::GET, _) if watch => "watch",
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) => "list",
        (&Method::POST, None) => "create",
        (&Method::POST, Some(_))
            if target
                .sub
                .as_deref()
                .is_some_and(|s| target.res.create_only_subresource(s)) =>
        {
            "create"
        }
        (&Method::PUT, Some(_)) => "update",
        (&Method::PATCH, Some(_)) => "patch",
        (&Method::DELETE, Some(_)) => "delete",
        (m, _) => {
            shared.count("other");
            return Err(ApiError::method_not_allowed(m.as_str()));
        }
    };
    shared.count(verb);
    let res = target.res;
    let ns = target.namespace.clone().unwrap_or_default();
    if res.namespaced && ns.is_empty() && !matches!(verb, "list" | "watch") {
        return Err(ApiError::no_route(&path));
    }
    let create_only_sub = target
        .sub
        .as_deref()
        .is_some_and(|s| res.create_only_subresource(s));
    if (res.verbs == Verbs::CreateOnly || create_only_sub) && verb != "create" {
        return Err(ApiError::method_not_allowed(req.method().as_str()));
    }
    let attributes = SarRequest {
        user: user.name.clone(),
        groups: user.groups.clone(),
        verb: verb.into(),
        group: res.group.into(),
        resource: res.plural.into(),
        subresource: target.sub.clone().unwrap_or_default(),
        name: target.name.clone().unwrap_or_default(),
        namespace: ns.clone(),
        non_resource_path: None,
    };
    if !(auth.authorizer)(&attributes) {
        return Err(ApiError::forbidden(
            &user.name, verb, res.group, res.plural, &ns,
        ));
    }
    let name = target.name.clone().unwrap_or_default();
    let sub = target.sub.as_deref();
    match verb {
        "get" => {
            let obj = shared.store.lock().await.get(res, &ns, &name)?;
            Ok(json_response(200, &obj))
        }
        "list" => {
            let sel = Selector::parse(
                query.get("labelSelector").map(String::as_str),
                query.get("fieldSelector").map(String::as_str),
                res.kind,
            )?;
            let store = shared.store.lock().await;
            let items = store.list(res, target.namespace.as_deref(), &sel);
            let list = json!({
                "kind": format!("{}List", res.kind),
                "apiVersion": res.api_version(),
                "metadata": {"resourceVersion": store.resource_version().to_string()},
                "items": items,
            });
            Ok(json_response(200, &list))
        }
        "watch" => {
            let labels = query.get("labelSelector").cloned().unwrap_or_default();
            let fields = match (target.name.as_deref(), query.get("fieldSelector")) {
                // A watch on one name (`/watch/…/pods/x`) is a metadata.name field selector.
                (Some(n), Some(f)) if !f.is_empty() => format!("metadata.name={n},{f}"),
                (Some(n), _) => format!("metadata.name={n}"),
                (None, f) => f.cloned().unwrap_or_default(),
            };
            let sel = Selector::parse(Some(&labels), Some(&fields), res.kind)?;
            let from = match query.get("resourceVersion").map(String::as_str) {
                None | Some("") | Some("0") => None,
                Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv}"))
                })?),
            };
            let params = watch::WatchParams {
                res,
                namespace: target.namespace.clone(),
                selector: sel,
                label_selector: labels,
                field_selector: fields,
                from,
                bookmarks: query
                    .get("allowWatchBookmarks")
                    .is_some_and(|b| b == "true"),
                timeout: query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse::<u64>().ok())
                    .map(Duration::from_secs),
            };
            Ok(watch::serve(shared.clone(), params).await)
        }
        "create" if create_only_sub => {
            let body = read_json(req).await?;
            let store = shared.store.lock().await;
            let answer = super::tokens::token_request(
                &store,
                &shared.tokens,
                shared.options.min_token_expiration,
                &ns,
                &name,
                &body,
            )?;
            Ok(json_response(201, &answer))
        }
        "create" => {
            let body = read_json(req).await?;
            create(shared, res, &ns, body, &user).await
        }
        "update" => {
            let body = read_json(req).await?;
            let obj = shared
                .store
                .lock()
                .await
                .update(res, &ns, &name, body, sub)?;
            if res.plural == "certificatesigningrequests" && sub == Some("approval") {
                shared.sign_if_approved(&name).await?;
            }
            Ok(json_response(200, &obj))
        }
        "patch" => {
            let content_type = req
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("")
                .to_string();
            let kind = PatchType::from_content_type(&content_type)?;
            let body = read_json(req).await?;
            let obj = shared
                .store
                .lock()
                .await
                .patch(res, &ns, &name, kind, &body, sub)?;
            if res.plural == "certificatesigningrequests" && sub == Some("approval") {
                shared.sign_if_approved(&name).await?;
            }
            Ok(json_response(200, &obj))
        }
        "delete" => {
            let body = read_json(req).await?;
            let mut opts = DeleteOptions::from_json(&body);
            if let Some(g) = query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
                opts.grace_period_seconds = Some(g);
            }
            let obj = shared.store.lock().await.delete(res, &ns, &name, &opts)?;
            Ok(json_response(200, &obj))
        }
        _ => Err(ApiError::method_not_allowed(verb)),
    }
}

async fn create(
    shared: &Arc<Shared>,
    res: &'static ResourceType,
    ns: &str,
    mut body: Value,
    user: &UserInfo,
) -> Result<Response<Body>, ApiError> {
    if res.verbs == Verbs::CreateOnly {
        // Reviews are answered, never stored.
        let auth = shared.auth();
        let mut answer = match res.plural {
            "tokenreviews" => auth.token_review(&body),
            _ => auth.subject_access_review(&body),
        };
        fill_type(res, &mut answer);
        if let Value::Object(map) = &mut answer {
            map.entry("metadata").or_insert_with(|| json!({}));
        }
        return Ok(json_response(201, &answer));
    }
    if !body.is_object() {
        body = json!({});
    }
    let created = shared
        .store
        .lock()
        .await
        .create(res, ns, body, Some(&requester(user)))?;
    if res.plural == "certificatesigningrequests" && shared.options.auto_approve_csrs {
        let name = created
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        shared.decide_csr(name, true).await?;
    }
    Ok(json_response(201, &created))
}

fn non_resource(
    path: &str,
    user: &UserInfo,
    authorizer: &super::auth::Policy,
    method: &Method,
) -> Result<Response<Body>, ApiError> {
    // Health and version are public (system:public-info-viewer); the rest asks the authorizer.
    let public = matches!(path, "/healthz" | "/livez" | "/readyz" | "/version");
    if !public {
        let attributes = SarRequest {
            user: user.name.clone(),
            groups: user.groups.clone(),
            verb: method.as_str().to_lowercase(),
            non_resource_path: Some(path.to_string()),
            ..SarRequest::default()
        };
        if !authorizer(&attributes) {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "forbidden: User \"{}\" cannot {} path \"{path}\"",
                    user.name,
                    method.as_str().to_lowercase()
                ),
            ));
        }
    }
    match path {
        "/healthz" | "/livez" | "/readyz" => Ok(text_response("ok")),
        "/version" => Ok(json_response(
            200,
            &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0", "gitCommit": "ferrolet-test",
                "gitTreeState": "clean", "buildDate": "2025-04-23T00:00:00Z", "goVersion": "go1.24.2",
                "compiler": "gc", "platform": "linux/amd64"}),
        )),
        "/api" => Ok(json_response(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        )),
        "/apis" => {
            let groups: Vec<Value> = resources::groups()
                .into_iter()
                .map(|(g, v)| {
                    let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                    json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
                })
                .collect();
            Ok(json_response(
                200,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            ))
        }
        _ => discovery(path)
            .ok_or_else(|| ApiError::no_route(path))
            .map(|v| json_response(200, &v)),
    }
}

/// `APIResourceList` for `/api/v1` and `/apis/{group}/{version}`.
fn discovery(path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return None,
    };
    let mut list = Vec::new();
    for r in resources::RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let verbs = match r.verbs {
            Verbs::All => json!([
                "create", "delete", "get", "list", "patch", "update", "watch"
            ]),
            Verbs::CreateOnly => json!(["create"]),
        };
        list.push(json!({"name": r.plural, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs}));
        for s in r.subresources {
            let entry = if r.create_only_subresource(s) {
                json!({"name": format!("{}/{s}", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]})
            } else {
                json!({"name": format!("{}/{s}", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "kind": r.kind, "verbs": ["get", "patch", "update"]})
            };
            list.push(entry);
        }
    }
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let t = parse_path("/api/v1/namespaces/default/pods/p/status")
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                t.res.plural,
                t.namespace.as_deref(),
                t.name.as_deref(),
                t.sub.as_deref()
            ),
            ("pods", Some("default"), Some("p"), Some("status"))
        );
        let t = parse_path("/api/v1/namespaces/kube-system")
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.res.plural, t.name.as_deref()),
            ("namespaces", Some("kube-system"))
        );
        let t = parse_path("/api/v1/watch/pods").unwrap().unwrap();
        assert!(t.watch_prefix && t.namespace.is_none());
        let t = parse_path("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1")
            .unwrap()
            .unwrap();
        assert_eq!(t.res.kind, "Lease");
        assert!(parse_path("/healthz").unwrap().is_none());
        assert!(parse_path("/api/v1/bogus").is_err());
        assert_eq!(percent_decode("a%3Db%2Cc+d"), "a=b,c d");
    }
}
