//! The Node's status as pure functions of what the node knows, like the Go kubelet's
//! `pkg/kubelet/nodestatus` setters: capacity and allocatable, addresses, node info, images
//! and the four conditions. Each setter works on the status read back from the API server, so
//! condition transition times carry over from one report to the next.

use std::collections::BTreeMap;
use std::net::IpAddr;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::machine::MachineInfo;
use super::{ImageInfo, NodeInputs, Pressure, RuntimeCondition, RuntimeHealth};
use crate::eviction::signals::{Resource, Signal, Threshold, format_quantity};
use crate::manifest::quantity::parse_quantity;

/// Go's `MaxNamesPerImageInNodeStatus`: names listed per image.
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// A node event the setters ask for: `(type is Warning, reason, message)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// A `Warning` rather than a `Normal` event.
    pub warning: bool,
    /// The event's reason (`NodeReady`, `Rebooted`, …).
    pub reason: String,
    /// The event's message.
    pub message: String,
}

impl NodeEvent {
    /// Go's `recordNodeStatusEvent`: "Node <name> status is now: <reason>".
    fn status(node: &str, reason: &str) -> Self {
        Self {
            warning: false,
            reason: reason.into(),
            message: format!("Node {node} status is now: {reason}"),
        }
    }
}

/// Bytes as Go prints a `BinarySI` quantity (`24597928Ki`; below 1 Ki in decimal units).
pub fn binary_quantity(bytes: i64) -> Quantity {
    Quantity(format_quantity(bytes, Resource::Memory))
}

/// A count as Go prints a `DecimalSI` quantity (`110`, `2k`).
pub fn decimal_quantity(n: i64) -> Quantity {
    Quantity(format_quantity(n, Resource::Pids))
}

/// Thousandths as Go prints `NewMilliQuantity(m, DecimalSI)`: whole units when exact (`4`),
/// else millis (`3900m`).
pub fn milli_quantity(milli: i64) -> Quantity {
    if milli % 1000 == 0 {
        decimal_quantity(milli / 1000)
    } else {
        Quantity(format!("{milli}m"))
    }
}

/// The hugepages resource name for pages of `page_bytes` (`hugepages-2Mi`).
pub fn hugepages_resource(page_bytes: i64) -> String {
    format!("hugepages-{}", binary_quantity(page_bytes).0)
}

/// Whether `name` is a hugepages resource.
fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// How a resource is counted and printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    /// cpu: thousandths.
    Milli,
    /// bytes, `BinarySI`.
    Bytes,
    /// counts, `DecimalSI`.
    Count,
}

fn unit_of(name: &str) -> Unit {
    match name {
        "cpu" => Unit::Milli,
        "memory" | "ephemeral-storage" => Unit::Bytes,
        n if is_hugepages(n) => Unit::Bytes,
        _ => Unit::Count,
    }
}

/// A resource's amount in its unit (millis for cpu) as Go prints it: cpu as
/// `NewMilliQuantity`, bytes `BinarySI`, counts `DecimalSI`.
pub fn resource_quantity(name: &str, v: i64) -> Quantity {
    quantity_of(unit_of(name), v)
}

fn quantity_of(unit: Unit, v: i64) -> Quantity {
    match unit {
        Unit::Milli => milli_quantity(v),
        Unit::Bytes => binary_quantity(v),
        Unit::Count => decimal_quantity(v),
    }
}

/// A quantity's value in `unit` (millis for cpu, whole units otherwise, rounded up as Go's
/// `MilliValue`/`Value`); `None` when it does not parse.
fn value_in(unit: Unit, q: &str) -> Option<i64> {
    let p = parse_quantity(q).ok()?;
    let v = match unit {
        Unit::Milli => p.milli_ceil(),
        _ => p.value_ceil(),
    };
    i64::try_from(v).ok()
}

/// The node's capacity (Go's `CapacityFromMachineInfo` plus pods and ephemeral-storage).
pub fn capacity(machine: &MachineInfo, max_pods: u32) -> BTreeMap<String, Quantity> {
    let mut c = BTreeMap::new();
    c.insert(
        "cpu".into(),
        milli_quantity(machine.num_cores as i64 * 1000),
    );
    c.insert("memory".into(), binary_quantity(machine.memory_bytes));
    c.insert("pods".into(), decimal_quantity(i64::from(max_pods)));
    if let Some(bytes) = machine.rootfs_capacity {
        c.insert("ephemeral-storage".into(), binary_quantity(bytes));
    }
    for hp in &machine.hugepages {
        c.insert(
            hugepages_resource(hp.page_bytes),
            binary_quantity(hp.page_bytes.saturating_mul(hp.pages)),
        );
    }
    c
}

/// What is held back from pods: `kubeReserved` + `systemReserved` + hard eviction thresholds
/// on `memory.available` and `nodefs.available` (Go's `GetNodeAllocatableReservation`), per
/// resource in its unit (millis for cpu).
pub fn reservation(
    capacity: &BTreeMap<String, Quantity>,
    kube_reserved: &BTreeMap<String, String>,
    system_reserved: &BTreeMap<String, String>,
    hard_thresholds: &[Threshold],
) -> BTreeMap<String, i64> {
    let cap = |name: &str| {
        capacity
            .get(name)
            .and_then(|q| value_in(unit_of(name), &q.0))
            .unwrap_or(0)
    };
    let mut eviction: BTreeMap<&str, i64> = BTreeMap::new();
    for t in hard_thresholds.iter().filter(|t| t.is_hard()) {
        let resource = match t.signal {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable => "ephemeral-storage",
            _ => continue,
        };
        // Go keeps the last threshold per signal.
        eviction.insert(resource, t.value.quantity(cap(resource)));
    }
    let mut out = BTreeMap::new();
    for name in capacity.keys() {
        let unit = unit_of(name);
        let reserved = |m: &BTreeMap<String, String>| {
            m.get(name.as_str())
                .and_then(|q| value_in(unit, q))
                .unwrap_or(0)
        };
        let total = reserved(system_reserved)
            .saturating_add(reserved(kube_reserved))
            .saturating_add(eviction.get(name.as_str()).copied().unwrap_or(0));
        if total != 0 {
            out.insert(name.clone(), total);
        }
    }
    out
}

/// Allocatable: capacity less the reservation, never below zero, and memory less the
/// hugepages (Go's `MachineInfo` setter).
pub fn allocatable(
    capacity: &BTreeMap<String, Quantity>,
    reservation: &BTreeMap<String, i64>,
) -> BTreeMap<String, Quantity> {
    let mut values: BTreeMap<String, (Unit, i64)> = BTreeMap::new();
    for (name, q) in capacity {
        let unit = unit_of(name);
        let v = value_in(unit, &q.0).unwrap_or(0);
        let left = v.saturating_sub(reservation.get(name).copied().unwrap_or(0));
        values.insert(name.clone(), (unit, left.max(0)));
    }
    let hugepages: i64 = capacity
        .iter()
        .filter(|(n, _)| is_hugepages(n))
        .filter_map(|(_, q)| value_in(Unit::Bytes, &q.0))
        .sum();
    if let Some((_, mem)) = values.get_mut("memory") {
        *mem = mem.saturating_sub(hugepages).max(0);
    }
    values
        .into_iter()
        .map(|(n, (unit, v))| (n, quantity_of(unit, v)))
        .collect()
}

/// `InternalIP` then `Hostname` (Go's `NodeAddress` without a cloud provider).
pub fn addresses(ip: IpAddr, hostname: &str) -> Vec<NodeAddress> {
    vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: ip.to_string(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: hostname.into(),
        },
    ]
}

/// Go's `GOARCH` for this build's architecture.
pub fn go_arch() -> &'static str {
    go_arch_of(std::env::consts::ARCH)
}

/// Rust's architecture name as Go spells it.
pub fn go_arch_of(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// `nodeInfo` (Go's `MachineInfo` and `VersionInfo` setters); `runtime` is the CRI
/// `(runtimeName, runtimeVersion)`.
pub fn node_info(machine: &MachineInfo, runtime: Option<&(String, String)>) -> NodeSystemInfo {
    NodeSystemInfo {
        machine_id: machine.machine_id.clone(),
        system_uuid: machine.system_uuid.clone(),
        boot_id: machine.boot_id.clone(),
        kernel_version: machine.kernel_version.clone(),
        os_image: machine.os_image.clone(),
        operating_system: "linux".into(),
        architecture: go_arch().into(),
        container_runtime_version: runtime
            .map(|(name, version)| format!("{name}://{version}"))
            .unwrap_or_default(),
        kubelet_version: super::KUBELET_VERSION.into(),
        kube_proxy_version: String::new(),
        ..Default::default()
    }
}

/// The node's images: the `max` largest (negative: all), names digests first then tags, at
/// most [`MAX_NAMES_PER_IMAGE`] (Go's `Images` setter over the size-sorted image list).
pub fn images(mut list: Vec<ImageInfo>, max: i32) -> Vec<ContainerImage> {
    list.sort_by_key(|i| std::cmp::Reverse(i.size));
    if let Ok(max) = usize::try_from(max) {
        list.truncate(max);
    }
    list.into_iter()
        .map(|i| {
            let mut names: Vec<String> = i.repo_digests.into_iter().chain(i.repo_tags).collect();
            names.truncate(MAX_NAMES_PER_IMAGE);
            ContainerImage {
                names: Some(names),
                size_bytes: Some(i.size),
            }
        })
        .collect()
}

/// A CRI condition as Go's `kubecontainer.RuntimeCondition` prints it.
fn condition_text(c: Option<&RuntimeCondition>) -> String {
    match c {
        Some(c) => format!(
            "{}={} reason:{} message:{}",
            c.type_, c.status, c.reason, c.message
        ),
        None => "<nil>".into(),
    }
}

/// Go's `runtimeState.runtimeErrors` and `networkErrors`, in the Ready condition's order.
pub fn ready_errors(health: &RuntimeHealth, pleg_error: Option<&str>) -> Vec<String> {
    let mut errs = Vec::new();
    match health.last_ready_age {
        None => errs.push("container runtime status check may not have completed yet".into()),
        Some(age) if age >= super::RUNTIME_SYNC_THRESHOLD => {
            errs.push("container runtime is down".into())
        }
        Some(_) => {}
    }
    if let Some(e) = pleg_error {
        errs.push(format!("PLEG is not healthy: {e}"));
    }
    match &health.conditions {
        None => errs.push("network state unknown".into()),
        Some(conds) => {
            let find = |t: &str| conds.iter().find(|c| c.type_ == t);
            let runtime = find("RuntimeReady");
            if !runtime.is_some_and(|c| c.status) {
                errs.push(format!(
                    "container runtime not ready: {}",
                    condition_text(runtime)
                ));
            }
            let network = find("NetworkReady");
            if !network.is_some_and(|c| c.status) {
                errs.push(format!(
                    "container runtime network not ready: {}",
                    condition_text(network)
                ));
            }
        }
    }
    errs
}

/// Go's `utilerrors.NewAggregate(errs).Error()`: one message alone, several deduplicated in
/// brackets.
pub fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [one] => (*one).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Sets `type_` in `conditions` to `status`/`reason`/`message` at `now`: the transition time
/// kept while the status holds, `now` when it changes. Returns whether it changed (or is new).
fn set_condition(
    conditions: &mut Vec<NodeCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let pos = conditions.iter().position(|c| c.type_ == type_);
    let previous = pos.map(|i| &conditions[i]);
    let changed = previous.is_none_or(|c| c.status != status);
    let transition = match previous {
        Some(c) if !changed => c.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    let new = NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: transition,
    };
    match pos {
        Some(i) => conditions[i] = new,
        None => conditions.push(new),
    }
    changed
}

/// Sets the MemoryPressure, DiskPressure, PIDPressure and Ready conditions, returning the
/// events Go records for their transitions (a pressure condition's first report included, the
/// Ready condition's not).
pub fn set_conditions(
    status: &mut NodeStatus,
    node: &str,
    pressure: Pressure,
    ready_errs: &[String],
    now: Timestamp,
) -> Vec<NodeEvent> {
    let now = Time(now);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let mut events = Vec::new();
    let pressures = [
        (
            "MemoryPressure",
            pressure.memory,
            (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            ("NodeHasInsufficientMemory", "NodeHasSufficientMemory"),
        ),
        (
            "DiskPressure",
            pressure.disk,
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("NodeHasDiskPressure", "NodeHasNoDiskPressure"),
        ),
        (
            "PIDPressure",
            pressure.pid,
            (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            ("NodeHasInsufficientPID", "NodeHasSufficientPID"),
        ),
    ];
    for (type_, on, yes, no, (event_on, event_off)) in pressures {
        let ((reason, message), status, event) = if on {
            (yes, "True", event_on)
        } else {
            (no, "False", event_off)
        };
        if set_condition(conditions, type_, status, reason, message, &now) {
            events.push(NodeEvent::status(node, event));
        }
    }
    let existed = conditions.iter().any(|c| c.type_ == "Ready");
    let (status, reason, message) = if ready_errs.is_empty() {
        (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_string(),
        )
    } else {
        ("False", "KubeletNotReady", aggregate(ready_errs))
    };
    if set_condition(conditions, "Ready", status, reason, &message, &now) && existed {
        let event = if status == "True" {
            "NodeReady"
        } else {
            "NodeNotReady"
        };
        events.push(NodeEvent::status(node, event));
    }
    events
}

/// The fixed inputs of the status: what the settings and the machine say.
#[derive(Clone, Debug)]
pub struct StatusParams<'a> {
    /// The node's name.
    pub node_name: &'a str,
    /// The `Hostname` address and label.
    pub hostname: &'a str,
    /// The `InternalIP` address.
    pub ip: IpAddr,
    /// Machine facts.
    pub machine: &'a MachineInfo,
    /// `maxPods`.
    pub max_pods: u32,
    /// Allocatable's reservation (see [`reservation`]).
    pub reservation: &'a BTreeMap<String, i64>,
    /// The kubelet's port.
    pub kubelet_port: u16,
    /// `nodeStatusMaxImages`.
    pub max_images: i32,
}

/// The whole status, set on top of `old` (as read from the API server) at `now`, with the
/// events its changes call for (Go's `setNodeStatus` with the default setters).
pub fn node_status(
    old: &NodeStatus,
    params: &StatusParams<'_>,
    inputs: NodeInputs,
    now: Timestamp,
) -> (NodeStatus, Vec<NodeEvent>) {
    let mut status = old.clone();
    let mut events = Vec::new();
    let old_boot = old.node_info.as_ref().map(|i| i.boot_id.as_str());
    if let Some(old_boot) = old_boot.filter(|b| !b.is_empty())
        && old_boot != params.machine.boot_id
    {
        events.push(NodeEvent {
            warning: true,
            reason: "Rebooted".into(),
            message: format!(
                "Node {} has been rebooted, boot id: {}",
                params.node_name, params.machine.boot_id
            ),
        });
    }
    status.addresses = Some(addresses(params.ip, params.hostname));
    let mut cap = capacity(params.machine, params.max_pods);
    // Extended resources stay as last reported, as Go sets keys on the old capacity: others'
    // (an admin's patch) are kept, and a device plugin's resource once gone shows 0.
    for (name, q) in old.capacity.iter().flatten() {
        if crate::admission::resources::is_extended(name) && !cap.contains_key(name) {
            cap.insert(name.clone(), q.clone());
        }
    }
    for (name, n) in &inputs.devices.capacity {
        cap.insert(name.clone(), decimal_quantity(*n));
    }
    for name in &inputs.devices.removed {
        cap.insert(name.clone(), decimal_quantity(0));
    }
    // Hugepage sizes no longer present leave both maps, as Go's reconcileHugePageResource.
    let mut alloc = allocatable(&cap, params.reservation);
    for (name, n) in &inputs.devices.allocatable {
        alloc.insert(name.clone(), decimal_quantity(*n));
    }
    status.allocatable = Some(alloc);
    status.capacity = Some(cap);
    status.node_info = Some(node_info(params.machine, inputs.runtime_version.as_ref()));
    status.daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint {
            port: i32::from(params.kubelet_port),
        }),
    });
    if let Some(list) = inputs.images {
        status.images = Some(images(list, params.max_images));
    }
    if let Some(handlers) = inputs.runtime_handlers {
        status.runtime_handlers = Some(handlers);
    }
    if let Some(in_use) = inputs.volumes_in_use {
        status.volumes_in_use = (!in_use.is_empty()).then_some(in_use);
    }
    let ready_errs = ready_errors(&inputs.runtime, inputs.pleg_error.as_deref());
    events.extend(set_conditions(
        &mut status,
        params.node_name,
        inputs.pressure,
        &ready_errs,
        now,
    ));
    (status, events)
}

/// Whether `new` differs from `old` beyond heartbeat times (Go's `nodeStatusHasChanged`):
/// conditions compared by type with heartbeats ignored, quantities by value.
pub fn status_changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut conds = s.conditions.clone().unwrap_or_default();
        conds.sort_by(|a, b| a.type_.cmp(&b.type_));
        for c in &mut conds {
            c.last_heartbeat_time = None;
        }
        conds
    };
    if strip(old) != strip(new) {
        return true;
    }
    let same_quantities = |a: &Option<BTreeMap<String, Quantity>>,
                           b: &Option<BTreeMap<String, Quantity>>| {
        let (a, b) = (a.clone().unwrap_or_default(), b.clone().unwrap_or_default());
        a.len() == b.len()
            && a.iter().all(|(k, qa)| {
                b.get(k).is_some_and(|qb| {
                    qa == qb
                        || matches!(
                            (parse_quantity(&qa.0), parse_quantity(&qb.0)),
                            (Ok(x), Ok(y)) if x.nanos() == y.nanos()
                        )
                })
            })
    };
    if !same_quantities(&old.capacity, &new.capacity)
        || !same_quantities(&old.allocatable, &new.allocatable)
    {
        return true;
    }
    let rest = |s: &NodeStatus| NodeStatus {
        conditions: None,
        capacity: None,
        allocatable: None,
        ..s.clone()
    };
    rest(old) != rest(new)
}

/// Whether to send the status now (Go's `tryUpdateNodeStatus`): when it changed, or when the
/// report period has passed since the last send (or nothing was sent yet).
pub fn should_send(
    changed: bool,
    since_last_report: Option<std::time::Duration>,
    report_frequency: std::time::Duration,
) -> bool {
    changed || since_last_report.is_none_or(|d| d >= report_frequency)
}
