//! The status manager's pure rules: a new status never goes backwards (terminal phases, a
//! terminated container of a pod that must not restart), keeps the start time and unchanged
//! conditions' transition times, and is normalized to whole seconds (Go's
//! `updateStatusInternal`, `checkContainerStateTransition`, `normalizeStatus`); and the patch
//! that writes it.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value, json};

use crate::types::Pod;

/// Whether `phase` is Succeeded or Failed.
pub fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}

fn terminated(s: &ContainerStatus) -> Option<i32> {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .map(|t| t.exit_code)
}

/// Why `new` may not replace `old`: a container that ended for good (restart policy Never, or
/// OnFailure after exit 0) shown as not terminated again.
pub fn check_transition(pod: &Pod, old: &PodStatus, new: &PodStatus) -> Result<(), String> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    if policy == "Always" {
        return Ok(());
    }
    let pairs = [
        (&old.container_statuses, &new.container_statuses),
        (&old.init_container_statuses, &new.init_container_statuses),
    ];
    for (olds, news) in pairs {
        for o in olds.iter().flatten() {
            let Some(code) = terminated(o) else { continue };
            let for_good = policy == "Never" || code == 0;
            let now = news.iter().flatten().find(|n| n.name == o.name);
            if for_good && now.is_some_and(|n| terminated(n).is_none()) {
                return Err(format!(
                    "terminated container {} attempted illegal transition to non-terminated state",
                    o.name
                ));
            }
        }
    }
    Ok(())
}

/// `new` made to follow `old`: a terminal phase (with its reason and message) kept, the start
/// time kept (else `now`), unchanged conditions keeping their transition time (new ones get
/// `now`), then normalized.
pub fn follow(old: Option<&PodStatus>, mut new: PodStatus, now: &Time) -> PodStatus {
    if let Some(old) = old {
        if is_terminal(old.phase.as_deref()) && !is_terminal(new.phase.as_deref()) {
            new.phase = old.phase.clone();
            new.reason = old.reason.clone();
            new.message = old.message.clone();
        }
        if old.start_time.is_some() {
            new.start_time = old.start_time.clone();
        }
    }
    if new.start_time.is_none() {
        new.start_time = Some(now.clone());
    }
    let old_conds = old
        .and_then(|o| o.conditions.as_deref())
        .unwrap_or_default();
    for c in new.conditions.iter_mut().flatten() {
        let kept = old_conds
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
            .and_then(|o| o.last_transition_time.clone());
        c.last_transition_time = kept
            .or_else(|| c.last_transition_time.take())
            .or(Some(now.clone()));
    }
    normalize(&mut new);
    new
}

/// Truncated to whole seconds (what the API stores, so a re-read compares equal).
fn second(t: &mut Option<Time>) {
    if let Some(Time(ts)) = t
        && let Ok(s) = jiff::Timestamp::from_second(ts.as_second())
    {
        *ts = s;
    }
}

fn normalize_state(s: &mut Option<ContainerState>) {
    let Some(s) = s else { return };
    if let Some(r) = &mut s.running {
        second(&mut r.started_at);
    }
    if let Some(t) = &mut s.terminated {
        second(&mut t.started_at);
        second(&mut t.finished_at);
    }
}

fn normalize_conditions(conds: &mut [PodCondition]) {
    for c in conds {
        second(&mut c.last_probe_time);
        second(&mut c.last_transition_time);
    }
}

/// Times to whole seconds, app container statuses by name (Go's `normalizeStatus`).
pub fn normalize(status: &mut PodStatus) {
    second(&mut status.start_time);
    normalize_conditions(status.conditions.as_deref_mut().unwrap_or_default());
    for list in [
        &mut status.container_statuses,
        &mut status.init_container_statuses,
        &mut status.ephemeral_container_statuses,
    ] {
        for cs in list.iter_mut().flatten() {
            normalize_state(&mut cs.state);
            normalize_state(&mut cs.last_state);
        }
    }
    if let Some(cs) = &mut status.container_statuses {
        cs.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// The status fields the kubelet writes; the others (`nominatedNodeName`,
/// `resourceClaimStatuses`, ...) belong to other writers and are left as the API has them.
pub const KUBELET_FIELDS: [&str; 14] = [
    "phase",
    "reason",
    "message",
    "conditions",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "qosClass",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    // Kubernetes 1.28's in-place resize: the kubelet's answer to the API server's Proposed.
    "resize",
];

/// `status` as a JSON object.
fn object(status: &PodStatus) -> Map<String, Value> {
    match serde_json::to_value(status) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The kubelet's status merged into what the API has: fields and conditions the kubelet does
/// not own (set by others, e.g. readiness gates' or `DisruptionTarget`) are kept, and a
/// terminal phase in the API is never undone.
pub fn merge_with_api(api: Option<&PodStatus>, mut ours: PodStatus) -> PodStatus {
    let Some(api) = api else { return ours };
    let foreign: Map<String, Value> = object(api)
        .into_iter()
        .filter(|(k, _)| !KUBELET_FIELDS.contains(&k.as_str()))
        .collect();
    if !foreign.is_empty() {
        let mut merged = object(&ours);
        merged.extend(foreign);
        if let Ok(s) = serde_json::from_value(Value::Object(merged)) {
            ours = s;
        }
    }
    let owned = crate::status::conditions::KUBELET_CONDITIONS;
    let mine: Vec<String> = ours
        .conditions
        .iter()
        .flatten()
        .map(|c| c.type_.clone())
        .collect();
    let foreign = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| !owned.contains(&c.type_.as_str()) && !mine.contains(&c.type_))
        .cloned();
    let mut conds: Vec<PodCondition> = ours.conditions.take().unwrap_or_default();
    conds.extend(foreign);
    ours.conditions = (!conds.is_empty()).then_some(conds);
    if is_terminal(api.phase.as_deref()) && !is_terminal(ours.phase.as_deref()) {
        ours.phase = api.phase.clone();
        ours.reason = api.reason.clone();
        ours.message = api.message.clone();
    }
    ours
}

/// The merge patch of `pods/<name>/status` from `api` to `ours`, with the UID precondition in
/// the body as the Go kubelet sends it: the kubelet's fields of `ours`, lists whole, and `null`
/// for those of its fields only the API has.
pub fn patch_body(uid: &str, api: Option<&PodStatus>, ours: &PodStatus) -> Value {
    let mut status: Map<String, Value> = object(ours)
        .into_iter()
        .filter(|(k, _)| KUBELET_FIELDS.contains(&k.as_str()))
        .collect();
    for k in api.map(object).unwrap_or_default().keys() {
        if KUBELET_FIELDS.contains(&k.as_str()) {
            status.entry(k.clone()).or_insert(Value::Null);
        }
    }
    json!({ "metadata": { "uid": uid }, "status": status })
}

/// The top-level fields (and, for lists, `field[i].key`) in which `a` and `b` differ: what a
/// log line needs to say why a status is written again.
pub fn differing_fields(a: &PodStatus, b: &PodStatus) -> Vec<String> {
    let (a, b) = (object(a), object(b));
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        match (a.get(k), b.get(k)) {
            (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
                for (i, (x, y)) in x.iter().zip(y).enumerate() {
                    match (x, y) {
                        (Value::Object(x), Value::Object(y)) => {
                            let mut inner: Vec<&String> = x.keys().chain(y.keys()).collect();
                            inner.sort();
                            inner.dedup();
                            out.extend(
                                inner
                                    .into_iter()
                                    .filter(|f| x.get(*f) != y.get(*f))
                                    .map(|f| format!("{k}[{i}].{f}")),
                            );
                        }
                        _ if x != y => out.push(format!("{k}[{i}]")),
                        _ => {}
                    }
                }
            }
            (x, y) if x != y => out.push(k.clone()),
            _ => {}
        }
    }
    out
}
