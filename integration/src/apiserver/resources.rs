//! The resource table: which group/version/plural the server knows, their kind and scope.

/// What the server may do with a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbs {
    /// Full CRUD, list and watch.
    All,
    /// Review resources: create only, answered and never stored.
    CreateOnly,
}

/// One served resource.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, "" for core.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// URL plural, e.g. `pods`.
    pub plural: &'static str,
    /// Object kind, e.g. `Pod`.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Subresources served besides the main one.
    pub subresources: &'static [&'static str],
    /// Allowed verbs.
    pub verbs: Verbs,
}

impl ResourceType {
    /// `v1` or `group/version`, as in an object's `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `leases.coordination.k8s.io`: the store key and the in-process API's name.
    pub fn key(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `sub` is a subresource one may only create (TokenRequest's `token`).
    pub fn create_only_subresource(&self, sub: &str) -> bool {
        self.plural == "serviceaccounts" && self.group.is_empty() && sub == "token"
    }

    /// Whether `status` is a subresource: then the main resource ignores status changes.
    pub fn has_status(&self) -> bool {
        self.subresources.contains(&"status")
    }
}

const fn res(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    subresources: &'static [&'static str],
    verbs: Verbs,
) -> ResourceType {
    ResourceType {
        group,
        version,
        plural,
        kind,
        namespaced,
        subresources,
        verbs,
    }
}

/// Every resource the server serves.
pub static RESOURCES: &[ResourceType] = &[
    res(
        "",
        "v1",
        "pods",
        "Pod",
        true,
        &["status", "ephemeralcontainers"],
        Verbs::All,
    ),
    res("", "v1", "nodes", "Node", false, &["status"], Verbs::All),
    res(
        "",
        "v1",
        "namespaces",
        "Namespace",
        false,
        &["status"],
        Verbs::All,
    ),
    res("", "v1", "secrets", "Secret", true, &[], Verbs::All),
    res("", "v1", "configmaps", "ConfigMap", true, &[], Verbs::All),
    res("", "v1", "events", "Event", true, &[], Verbs::All),
    res(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["token"],
        Verbs::All,
    ),
    res(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["status"],
        Verbs::All,
    ),
    res(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["status"],
        Verbs::All,
    ),
    res(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "StorageClass",
        false,
        &[],
        Verbs::All,
    ),
    res(
        "storage.k8s.io",
        "v1",
        "csidrivers",
        "CSIDriver",
        false,
        &[],
        Verbs::All,
    ),
    res(
        "storage.k8s.io",
        "v1",
        "csinodes",
        "CSINode",
        false,
        &[],
        Verbs::All,
    ),
    res(
        "storage.k8s.io",
        "v1",
        "volumeattachments",
        "VolumeAttachment",
        false,
        &["status"],
        Verbs::All,
    ),
    res(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        Verbs::All,
    ),
    res(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &[],
        Verbs::All,
    ),
    res(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        false,
        &["status", "approval"],
        Verbs::All,
    ),
    res(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        false,
        &[],
        Verbs::CreateOnly,
    ),
    res(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
        &[],
        Verbs::CreateOnly,
    ),
];

/// The resource served at `group/version/plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource named `pods`, `events.events.k8s.io`, `leases.coordination.k8s.io` or just
/// `leases` (the first match in table order: core wins).
pub fn by_name(name: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.key() == name)
        .or_else(|| RESOURCES.iter().find(|r| r.plural == name))
}

/// The group versions served, for discovery.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}
