//! Objects, the global resourceVersion counter, the watch history ring and the write
//! semantics (create, update, patch, delete) shared by HTTP and the in-process API.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::patch::{self, PatchType};
use super::resources::ResourceType;
use super::selectors::Selector;
use super::status::ApiError;

/// A watch event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as history keeps it and watchers receive it.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// The object's resource.
    pub res: &'static ResourceType,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (before it, for DELETED: with the deletion's RV).
    pub object: Value,
    /// The object before a MODIFIED, so selector watchers see objects leave or enter.
    pub previous: Option<Value>,
}

impl Event {
    /// The object's namespace ("" for cluster-scoped).
    pub fn namespace(&self) -> &str {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// Who sent a write, for fields the server fills in from the requester (CSR `spec.username`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    /// User name.
    pub user: String,
    /// User UID.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// A parsed `DeleteOptions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    /// Reads a `DeleteOptions` body (empty or `{}` for none).
    pub fn from_json(body: &Value) -> Self {
        let s = |p: &str| body.pointer(p).and_then(Value::as_str).map(str::to_string);
        DeleteOptions {
            grace_period_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
            uid: s("/preconditions/uid"),
            resource_version: s("/preconditions/resourceVersion"),
        }
    }
}

type Key = (String, String, String);

/// A started watch: the backlog to send first and the receiver of later changes.
pub type WatchStart = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>);

/// The whole state: every object and the recent changes.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Event>>,
    history_size: usize,
    /// Every change after this RV is still in `history`.
    oldest: u64,
    events: broadcast::Sender<Arc<Event>>,
}

/// Now, in RFC 3339 seconds (UTC), as `metav1.Time` serialises.
pub fn now_rfc3339() -> String {
    after_rfc3339(0)
}

/// `secs` from now, in RFC 3339 seconds (UTC).
pub fn after_rfc3339(secs: i64) -> String {
    let now = jiff::Timestamp::now().as_second().saturating_add(secs);
    jiff::Timestamp::from_second(now)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = match obj {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    };
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn random_suffix() -> String {
    // generateName's suffix: five characters from the real server's alphabet (no vowels).
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

impl Store {
    /// An empty store keeping `history_size` changes for resuming watches.
    pub fn new(history_size: usize) -> Self {
        // The channel only has to hold what a watcher may lag behind by; more and it is dropped.
        let (events, _) = broadcast::channel(history_size.max(16));
        Store {
            rv: 1,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_size: history_size.max(1),
            oldest: 1,
            events,
        }
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    fn key(res: &ResourceType, ns: &str, name: &str) -> Key {
        let ns = if res.namespaced { ns } else { "" };
        (res.key(), ns.to_string(), name.to_string())
    }

    fn record(
        &mut self,
        res: &'static ResourceType,
        kind: EventType,
        object: Value,
        previous: Option<Value>,
    ) {
        let event = Arc::new(Event {
            rv: self.rv,
            res,
            kind,
            object,
            previous,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_size {
            if let Some(old) = self.history.pop_front() {
                self.oldest = old.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.events.send(event);
    }

    /// Forgets the history, as an etcd compaction would: any watch resuming from an RV older
    /// than now gets 410 Expired. The counter moves on so a fresh list's RV still works.
    pub fn expire_history(&mut self) {
        self.history.clear();
        self.rv += 1;
        self.oldest = self.rv;
    }

    /// One object.
    pub fn get(&self, res: &'static ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.objects
            .get(&Self::key(res, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.group, res.plural, name))
    }

    /// The objects of `res` in `ns` (every namespace if `None`) that match `sel`.
    pub fn list(&self, res: &'static ResourceType, ns: Option<&str>, sel: &Selector) -> Vec<Value> {
        let key = res.key();
        self.objects
            .iter()
            .filter(|((k, n, _), _)| *k == key && ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v)
            .filter(|v| sel.matches(v))
            .cloned()
            .collect()
    }

    /// Starts a watch: the events after `from` (or ADDED for every current object if `None`)
    /// and a receiver for what follows, with no gap between them.
    pub fn watch(
        &self,
        res: &'static ResourceType,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let rx = self.events.subscribe();
        let backlog = match from {
            None => self
                .list(res, ns, &Selector::default())
                .into_iter()
                .map(|object| {
                    let rv = meta_str(&object, "resourceVersion")
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(self.rv);
                    Arc::new(Event {
                        rv,
                        res,
                        kind: EventType::Added,
                        object,
                        previous: None,
                    })
                })
                .collect(),
            Some(rv) if rv < self.oldest => return Err(ApiError::expired(rv, self.oldest)),
            Some(rv) => self.history.iter().filter(|e| e.rv > rv).cloned().collect(),
        };
        Ok((backlog, rx))
    }

    /// Creates an object (POST).
    pub fn create(
        &mut self,
        res: &'static ResourceType,
        ns: &str,
        mut obj: Value,
        requester: Option<&Requester>,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let body_ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        if res.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        } else if !body_ns.is_empty() {
            meta_mut(&mut obj).remove("namespace");
        }
        let mut name = meta_str(&obj, "name").unwrap_or("").to_string();
        if name.is_empty() {
            match meta_str(&obj, "generateName") {
                Some(prefix) if !prefix.is_empty() => name = format!("{prefix}{}", random_suffix()),
                _ => {
                    return Err(ApiError::invalid(
                        res.group,
                        &res.kind.to_lowercase(),
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            }
        }
        let key = Self::key(res, ns, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(res.group, res.plural, &name));
        }
        self.rv += 1;
        let rv = self.rv;
        let has_spec = obj.get("spec").is_some();
        {
            let meta = meta_mut(&mut obj);
            meta.insert("name".into(), json!(name));
            if res.namespaced {
                meta.insert("namespace".into(), json!(ns));
            }
            meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
            meta.remove("deletionTimestamp");
            meta.remove("deletionGracePeriodSeconds");
            if has_spec {
                meta.insert("generation".into(), json!(1));
            }
        }
        prepare_create(res, &mut obj, requester);
        fill_type(res, &mut obj);
        self.objects.insert(key, obj.clone());
        self.record(res, EventType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an object (PUT), on the main resource or a subresource.
    pub fn update(
        &mut self,
        res: &'static ResourceType,
        ns: &str,
        name: &str,
        mut obj: Value,
        sub: Option<&str>,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let key = Self::key(res, ns, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.group, res.plural, name))?;
        match meta_str(&obj, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        if res.namespaced
            && let Some(n) = meta_str(&obj, "namespace")
            && !n.is_empty()
            && n != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let current_rv = meta_str(&old, "resourceVersion").unwrap_or("").to_string();
        match meta_str(&obj, "resourceVersion") {
            Some(rv) if !rv.is_empty() && rv != current_rv => {
                return Err(ApiError::conflict(
                    res.group,
                    res.plural,
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            _ => {}
        }
        let mut new = match sub {
            // The status subresource takes only status; approval only the conditions.
            Some("status") => {
                let mut new = old.clone();
                set_field(&mut new, "status", obj.get("status").cloned());
                new
            }
            Some("ephemeralcontainers") => super::ephemeral::update(&old, &obj, name)?,
            Some("approval") => {
                let mut new = old.clone();
                let conditions = obj.pointer("/status/conditions").cloned();
                let status = new
                    .as_object_mut()
                    .map(|m| m.entry("status").or_insert_with(|| json!({})));
                if let Some(Value::Object(status)) = status {
                    match conditions {
                        Some(c) => status.insert("conditions".into(), c),
                        None => status.remove("conditions"),
                    };
                }
                new
            }
            _ => {
                if res.has_status() {
                    set_field(&mut obj, "status", old.get("status").cloned());
                }
                // Fields the server owns survive a client's replace.
                for field in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "namespace",
                    "name",
                ] {
                    let value = old.get("metadata").and_then(|m| m.get(field)).cloned();
                    let meta = meta_mut(&mut obj);
                    match value {
                        Some(v) => meta.insert(field.into(), v),
                        None => meta.remove(field),
                    };
                }
                if res.plural == "certificatesigningrequests" {
                    set_field(&mut obj, "spec", old.get("spec").cloned());
                }
                obj
            }
        };
        if sub.is_none() && res.group.is_empty() && res.plural == "pods" {
            super::pod_update::check(name, &old, &mut new)?;
        }
        meta_mut(&mut new).insert("resourceVersion".into(), json!(current_rv));
        fill_type(res, &mut new);
        if new == old {
            // A no-op write changes nothing, not even the resourceVersion (as the real server).
            return Ok(old);
        }
        if new.get("spec") != old.get("spec")
            && let Some(generation) = old.pointer("/metadata/generation").and_then(Value::as_i64)
        {
            meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        self.rv += 1;
        meta_mut(&mut new).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let grace_done = new
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_none_or(|g| g == 0);
        if meta_str(&new, "deletionTimestamp").is_some() && !has_finalizers(&new) && grace_done {
            // The last finalizer is gone from an object being deleted: now it goes.
            self.objects.remove(&key);
            self.record(res, EventType::Deleted, new.clone(), Some(old));
            return Ok(new);
        }
        self.objects.insert(key, new.clone());
        self.record(res, EventType::Modified, new.clone(), Some(old));
        Ok(new)
    }

    /// Patches an object (PATCH), on the main resource or a subresource.
    pub fn patch(
        &mut self,
        res: &'static ResourceType,
        ns: &str,
        name: &str,
        kind: PatchType,
        body: &Value,
        sub: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut doc = self.get(res, ns, name)?;
        patch::apply(kind, &mut doc, body)?;
        self.update(res, ns, name, doc, sub)
    }

    /// Deletes an object (DELETE): pods on a node go gracefully, objects with finalizers wait.
    pub fn delete(
        &mut self,
        res: &'static ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let key = Self::key(res, ns, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res.group, res.plural, name))?;
        if let Some(uid) = &opts.uid
            && meta_str(&old, "uid") != Some(uid.as_str())
        {
            let why = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&old, "uid").unwrap_or("")
            );
            return Err(ApiError::conflict(res.group, res.plural, name, &why));
        }
        if let Some(rv) = &opts.resource_version
            && meta_str(&old, "resourceVersion") != Some(rv.as_str())
        {
            let why = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta_str(&old, "resourceVersion").unwrap_or("")
            );
            return Err(ApiError::conflict(res.group, res.plural, name, &why));
        }
        let grace = if res.plural == "pods" && res.group.is_empty() {
            pod_grace(&old, opts)
        } else {
            0
        };
        if grace > 0 || has_finalizers(&old) {
            let current = old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            let already = meta_str(&old, "deletionTimestamp").is_some();
            // A second delete may only shorten the grace period.
            if already && current.is_some_and(|c| c <= grace) {
                return Ok(old);
            }
            if grace == 0 && !has_finalizers(&old) {
                return self.remove(res, key, old);
            }
            let mut new = old.clone();
            self.rv += 1;
            let meta = meta_mut(&mut new);
            meta.insert("deletionTimestamp".into(), json!(after_rfc3339(grace)));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            meta.insert("resourceVersion".into(), json!(self.rv.to_string()));
            self.objects.insert(key, new.clone());
            self.record(res, EventType::Modified, new.clone(), Some(old));
            return Ok(new);
        }
        self.remove(res, key, old)
    }

    fn remove(
        &mut self,
        res: &'static ResourceType,
        key: Key,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        self.objects.remove(&key);
        self.rv += 1;
        // The DELETED event carries the deletion's resourceVersion, as watch caches send it.
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.record(res, EventType::Deleted, obj.clone(), None);
        Ok(obj)
    }
}

/// The grace period of a pod's deletion: 0 when it never ran on a node or has finished.
fn pod_grace(pod: &Value, opts: &DeleteOptions) -> i64 {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !scheduled || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    let grace = opts.grace_period_seconds.unwrap_or_else(|| {
        pod.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
    });
    grace.max(0)
}

fn set_field(obj: &mut Value, field: &str, value: Option<Value>) {
    if let Value::Object(map) = obj {
        match value {
            Some(v) => map.insert(field.into(), v),
            None => map.remove(field),
        };
    }
}

/// `kind` and `apiVersion`, filled in as the server always returns them.
pub fn fill_type(res: &ResourceType, obj: &mut Value) {
    if let Value::Object(map) = obj {
        map.insert("kind".into(), json!(res.kind));
        map.insert("apiVersion".into(), json!(res.api_version()));
    }
}

/// What the real registries' PrepareForCreate does for the kinds the kubelet cares about.
fn prepare_create(res: &ResourceType, obj: &mut Value, requester: Option<&Requester>) {
    match (res.group, res.plural) {
        ("", "pods") => {
            let Value::Object(map) = obj else { return };
            // The API's default (Go's SetDefaults_PodSpec): clients such as `kubectl debug`
            // read the pod's security context without looking for nil.
            if let Some(Value::Object(spec)) = map.get_mut("spec") {
                spec.entry("securityContext").or_insert_with(|| json!({}));
            }
            let status = map.entry("status").or_insert_with(|| json!({}));
            if let Value::Object(s) = status
                && !s.contains_key("phase")
            {
                s.insert("phase".into(), json!("Pending"));
            }
        }
        ("", "namespaces") => {
            set_field(obj, "status", Some(json!({"phase": "Active"})));
        }
        // Claims and volumes start Pending whatever the client sent; the binder moves them on.
        ("", "persistentvolumeclaims") | ("", "persistentvolumes") => {
            set_field(obj, "status", Some(json!({"phase": "Pending"})));
        }
        // Attached is the attacher's to say, through the status subresource.
        ("storage.k8s.io", "volumeattachments") => {
            set_field(obj, "status", Some(json!({"attached": false})));
        }
        ("certificates.k8s.io", "certificatesigningrequests") => {
            set_field(obj, "status", Some(json!({})));
            if let Some(r) = requester
                && let Some(Value::Object(spec)) = obj.get_mut("spec")
            {
                spec.insert("username".into(), json!(r.user));
                spec.insert("uid".into(), json!(r.uid));
                spec.insert("groups".into(), json!(r.groups));
            }
        }
        _ => {}
    }
}
