//! The spec registry: the spec files of the configured directories, kept parsed, and the
//! devices they define by qualified name.
//!
//! Freshness: every resolution (only CreateContainer calls that ask for CDI devices make one)
//! lists the directories and stats each `.json`/`.yaml` file in them; a file whose identity,
//! size, mtime or ctime changed is read and parsed again, a new one is read, a vanished one is
//! dropped, and the device index is rebuilt when anything changed. That costs one `readdir`
//! per directory and one `stat` per file — microseconds for the handful of files a node has —
//! and needs no watcher thread, yet a spec written a moment before the call is seen, as the
//! reference's fsnotify watch sees it.
//!
//! Priority: a later directory wins over an earlier one (the reference's order: `/var/run/cdi`,
//! where device plugins write at run time, over the static `/etc/cdi`). Two files of the same
//! directory defining the same device make it ambiguous, hence unresolvable, as in the
//! reference; unlike the reference, such a conflict below a higher-priority definition does
//! not hide that definition, since the higher one wins either way.
//!
//! A file that cannot be read or is not a valid spec is logged (path and reason) when it is
//! first seen in that state, and costs only its own devices.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use oci_spec::runtime::Spec;

use super::spec::{self, ContainerEdits, SpecFile};
use super::{CdiError, Unresolved, edits, validate};

/// The spec files of a list of directories, and what they define.
pub struct Registry {
    dirs: Vec<PathBuf>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, Entry>,
    index: HashMap<String, Definition>,
    /// The last error of each directory that could not be listed, so it is logged once.
    dir_errors: HashMap<PathBuf, String>,
}

/// A spec file as last read.
struct Entry {
    stamp: Stamp,
    priority: usize,
    loaded: Result<Arc<LoadedSpec>, String>,
}

/// What tells that a file changed since it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A valid spec file.
struct LoadedSpec {
    path: PathBuf,
    priority: usize,
    spec: SpecFile,
}

/// Who defines a qualified name.
enum Definition {
    /// One spec file: its device at this index.
    One(Arc<LoadedSpec>, usize),
    /// Two files of the same (highest) priority.
    Ambiguous {
        priority: usize,
        first: PathBuf,
        second: PathBuf,
    },
}

impl Definition {
    fn priority(&self) -> usize {
        match self {
            Definition::One(spec, _) => spec.priority,
            Definition::Ambiguous { priority, .. } => *priority,
        }
    }

    fn path(&self) -> &Path {
        match self {
            Definition::One(spec, _) => &spec.path,
            Definition::Ambiguous { first, .. } => first,
        }
    }
}

/// The edits a container's devices bring, in the order they apply: for each device, its
/// spec's own edits (once per spec file) and then the device's.
pub struct Resolved {
    sets: Vec<EditSet>,
}

struct EditSet {
    /// The requested device that brought these edits.
    device: String,
    spec: Arc<LoadedSpec>,
    /// The device's index in its spec; `None` for the spec's own edits.
    index: Option<usize>,
}

impl EditSet {
    fn edits(&self) -> Option<&ContainerEdits> {
        match self.index {
            Some(i) => self.spec.spec.devices.get(i).map(|d| &d.container_edits),
            None => Some(&self.spec.spec.container_edits),
        }
    }
}

impl Resolved {
    /// Applies every edit to `spec`; stats host device nodes, so call it off the async
    /// runtime.
    pub fn apply(&self, spec: &mut Spec) -> Result<(), CdiError> {
        for set in &self.sets {
            let Some(edits) = set.edits() else {
                continue;
            };
            edits::apply(spec, edits).map_err(|reason| CdiError::Edit {
                device: set.device.clone(),
                reason: match set.index {
                    Some(_) => reason,
                    None => format!("{} (edits of {})", reason, set.spec.path.display()),
                },
            })?;
        }
        Ok(())
    }
}

impl Registry {
    /// A registry of `dirs`, lowest priority first; nothing is read until asked.
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        Self {
            dirs,
            state: Mutex::new(State::default()),
        }
    }

    /// The directories, lowest priority first.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Brings the registry up to date with the directories (logging what changed) and
    /// returns how many devices are resolvable. Blocking.
    pub fn refresh(&self) -> usize {
        let mut state = self.lock();
        self.rescan(&mut state);
        state
            .index
            .values()
            .filter(|d| matches!(d, Definition::One(..)))
            .count()
    }

    /// The edits for `devices` (qualified names), read from the specs as they are now; every
    /// name that no spec defines, or that two specs of the same priority define, is named in
    /// the error. Blocking.
    pub fn resolve(&self, devices: &[String]) -> Result<Resolved, CdiError> {
        let mut state = self.lock();
        self.rescan(&mut state);
        let mut sets = Vec::new();
        let mut problems = Vec::new();
        let mut specs_seen: Vec<PathBuf> = Vec::new();
        for device in devices {
            match state.index.get(device) {
                Some(Definition::One(spec, index)) => {
                    if !specs_seen.contains(&spec.path) {
                        specs_seen.push(spec.path.clone());
                        sets.push(EditSet {
                            device: device.clone(),
                            spec: spec.clone(),
                            index: None,
                        });
                    }
                    sets.push(EditSet {
                        device: device.clone(),
                        spec: spec.clone(),
                        index: Some(*index),
                    });
                }
                Some(Definition::Ambiguous { first, second, .. }) => {
                    problems.push(Unresolved::Ambiguous {
                        device: device.clone(),
                        first: first.clone(),
                        second: second.clone(),
                    });
                }
                None => problems.push(Unresolved::Unknown(device.clone())),
            }
        }
        if problems.is_empty() {
            return Ok(Resolved { sets });
        }
        let broken = state
            .files
            .iter()
            .filter(|(_, e)| e.loaded.is_err())
            .map(|(p, _)| p.clone())
            .collect();
        Err(CdiError::Unresolved { problems, broken })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic mid-rescan may have left the index behind the files: start afresh.
        self.state.lock().unwrap_or_else(|poisoned| {
            let mut state = poisoned.into_inner();
            *state = State::default();
            state
        })
    }

    /// What the directories hold now: (path, stamp, priority) of every candidate file.
    fn list(&self, state: &mut State) -> BTreeMap<PathBuf, (Stamp, usize)> {
        let mut found = BTreeMap::new();
        for (priority, dir) in self.dirs.iter().enumerate() {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => {
                    if state.dir_errors.remove(dir).is_some() {
                        tracing::info!(dir = %dir.display(), "CDI spec directory readable again");
                    }
                    entries
                }
                // A missing directory is a node without such devices, not a fault.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    let text = e.to_string();
                    if state.dir_errors.get(dir) != Some(&text) {
                        tracing::warn!(dir = %dir.display(), error = %text, "cannot list a CDI spec directory; its devices are unavailable");
                        state.dir_errors.insert(dir.clone(), text);
                    }
                    continue;
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if !matches!(
                    path.extension().and_then(|e| e.to_str()),
                    Some("json" | "yaml")
                ) {
                    continue;
                }
                // Followed through symlinks, as the reference reads them; one that vanished
                // since the listing is simply not there.
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if meta.is_dir() {
                    continue;
                }
                found.insert(path, (Stamp::of(&meta), priority));
            }
        }
        found
    }

    fn rescan(&self, state: &mut State) {
        let found = self.list(state);
        let mut changed = false;
        state.files.retain(|path, _| {
            let keep = found.contains_key(path);
            if !keep {
                tracing::info!(path = %path.display(), "CDI spec file removed");
                changed = true;
            }
            keep
        });
        for (path, (stamp, priority)) in found {
            if state
                .files
                .get(&path)
                .is_some_and(|e| e.stamp == stamp && e.priority == priority)
            {
                continue;
            }
            let loaded = load(&path, priority).map(Arc::new);
            match &loaded {
                Ok(s) => tracing::info!(
                    path = %path.display(),
                    kind = %s.spec.kind,
                    devices = s.spec.devices.len(),
                    "CDI spec file loaded"
                ),
                Err(error) => tracing::warn!(
                    path = %path.display(),
                    %error,
                    "CDI spec file could not be loaded; its devices are unavailable"
                ),
            }
            state.files.insert(
                path,
                Entry {
                    stamp,
                    priority,
                    loaded,
                },
            );
            changed = true;
        }
        if changed {
            state.index = index(&state.files);
        }
    }
}

/// Reads and checks one spec file.
fn load(path: &Path, priority: usize) -> Result<LoadedSpec, String> {
    let data = std::fs::read(path).map_err(|e| format!("failed to read CDI Spec: {e}"))?;
    let spec = spec::parse(&data)?;
    validate::spec(&spec).map_err(|e| format!("invalid CDI Spec: {e}"))?;
    Ok(LoadedSpec {
        path: path.to_path_buf(),
        priority,
        spec,
    })
}

/// Every qualified name of the valid specs, to the definition that wins.
fn index(files: &BTreeMap<PathBuf, Entry>) -> HashMap<String, Definition> {
    let mut index: HashMap<String, Definition> = HashMap::new();
    for spec in files.values().filter_map(|e| e.loaded.as_ref().ok()) {
        for (i, device) in spec.spec.devices.iter().enumerate() {
            let name = format!("{}={}", spec.spec.kind, device.name);
            let new = match index.get(&name) {
                None => Definition::One(spec.clone(), i),
                Some(old) if spec.priority > old.priority() => Definition::One(spec.clone(), i),
                Some(old) if spec.priority < old.priority() => continue,
                Some(Definition::Ambiguous { .. }) => continue,
                Some(old) => Definition::Ambiguous {
                    priority: spec.priority,
                    first: old.path().to_path_buf(),
                    second: spec.path.clone(),
                },
            };
            index.insert(name, new);
        }
    }
    for (name, d) in &index {
        if let Definition::Ambiguous { first, second, .. } = d {
            tracing::warn!(
                device = %name,
                first = %first.display(),
                second = %second.display(),
                "CDI device defined by two spec files of the same priority; it cannot be injected"
            );
        }
    }
    index
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn spec_text(kind: &str, device: &str, env: &str) -> String {
        format!(
            "cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n  - name: {device}\n    \
             containerEdits:\n      env: [{env}]\ncontainerEdits:\n  env: [SPEC={kind}]\n"
        )
    }

    fn env_after(registry: &Registry, devices: &[&str]) -> Vec<String> {
        let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        let resolved = registry.resolve(&names).unwrap();
        let mut spec = Spec::default();
        spec.process_mut().as_mut().unwrap().set_env(Some(vec![]));
        resolved.apply(&mut spec).unwrap();
        spec.process().as_ref().unwrap().env().clone().unwrap()
    }

    #[test]
    fn devices_resolve_with_their_spec_edits_once() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("gpu.yaml"),
            "cdiVersion: 0.5.0\nkind: v.com/gpu\ndevices:\n  - name: a\n    containerEdits: {env: [A=1]}\n  \
             - name: b\n    containerEdits: {env: [B=1]}\ncontainerEdits: {env: [SPEC=1]}\n",
        )
        .unwrap();
        let registry = Registry::new(vec![tmp.path().to_path_buf()]);
        assert_eq!(registry.refresh(), 2);
        assert_eq!(
            env_after(&registry, &["v.com/gpu=a", "v.com/gpu=b"]),
            ["SPEC=1", "A=1", "B=1"]
        );
    }

    #[test]
    fn later_directories_win_and_same_priority_is_ambiguous() {
        let low = tempfile::tempdir().unwrap();
        let high = tempfile::tempdir().unwrap();
        std::fs::write(
            low.path().join("a.yaml"),
            spec_text("v.com/c", "x", "FROM=low"),
        )
        .unwrap();
        std::fs::write(
            high.path().join("a.json"),
            spec_text("v.com/c", "x", "FROM=high"),
        )
        .unwrap();
        // Two low-priority files conflict, but the high one wins anyway.
        std::fs::write(
            low.path().join("b.yaml"),
            spec_text("v.com/c", "x", "FROM=low2"),
        )
        .unwrap();
        // Ambiguous where it is highest.
        std::fs::write(
            high.path().join("d1.yaml"),
            spec_text("v.com/d", "y", "D=1"),
        )
        .unwrap();
        std::fs::write(
            high.path().join("d2.yaml"),
            spec_text("v.com/d", "y", "D=2"),
        )
        .unwrap();
        let registry = Registry::new(vec![low.path().to_path_buf(), high.path().to_path_buf()]);
        assert_eq!(
            env_after(&registry, &["v.com/c=x"]),
            ["SPEC=v.com/c", "FROM=high"]
        );
        let err = registry
            .resolve(&["v.com/d=y".into(), "v.com/e=z".into()])
            .err()
            .unwrap();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "CDI device \"v.com/d=y\": unresolvable: defined by both {:?} and {:?} at the same priority",
                high.path().join("d1.yaml"),
                high.path().join("d2.yaml")
            )),
            "{text}"
        );
        assert!(
            text.contains("CDI device \"v.com/e=z\": unresolvable"),
            "{text}"
        );
    }

    #[test]
    fn changes_are_seen_at_the_next_resolution() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = Registry::new(vec![tmp.path().join("not-yet")]);
        let err = registry.resolve(&["v.com/c=x".into()]).err().unwrap();
        assert_eq!(err.to_string(), "CDI device \"v.com/c=x\": unresolvable");
        let dir = tmp.path().join("not-yet");
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(&file, spec_text("v.com/c", "x", "V=1")).unwrap();
        assert_eq!(
            env_after(&registry, &["v.com/c=x"]),
            ["SPEC=v.com/c", "V=1"]
        );
        // Rewritten with a different size: re-read.
        std::fs::write(&file, spec_text("v.com/c", "x", "V=22")).unwrap();
        assert_eq!(
            env_after(&registry, &["v.com/c=x"]),
            ["SPEC=v.com/c", "V=22"]
        );
        // Replaced by rename (how producers write atomically): re-read.
        let tmp_file = dir.join("c.tmp");
        std::fs::write(&tmp_file, spec_text("v.com/c", "x", "V=33")).unwrap();
        std::fs::rename(&tmp_file, &file).unwrap();
        assert_eq!(
            env_after(&registry, &["v.com/c=x"]),
            ["SPEC=v.com/c", "V=33"]
        );
        std::fs::remove_file(&file).unwrap();
        assert!(registry.resolve(&["v.com/c=x".into()]).is_err());
    }

    #[test]
    fn a_broken_file_costs_only_its_own_devices() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("good.yaml"),
            spec_text("v.com/c", "x", "G=1"),
        )
        .unwrap();
        std::fs::write(tmp.path().join("broken.yaml"), "cdiVersion: [").unwrap();
        std::fs::write(
            tmp.path().join("invalid.json"),
            r#"{"cdiVersion":"9.9.9","kind":"v.com/b","devices":[]}"#,
        )
        .unwrap();
        std::fs::write(tmp.path().join("ignored.txt"), "not a spec").unwrap();
        std::fs::create_dir(tmp.path().join("sub.yaml")).unwrap();
        let registry = Registry::new(vec![tmp.path().to_path_buf()]);
        assert_eq!(registry.refresh(), 1);
        assert_eq!(
            env_after(&registry, &["v.com/c=x"]),
            ["SPEC=v.com/c", "G=1"]
        );
        let err = registry.resolve(&["v.com/b=y".into()]).err().unwrap();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "CDI device \"v.com/b=y\": unresolvable (CDI spec files that could not be loaded: "
            ),
            "{text}"
        );
        assert!(
            text.contains("broken.yaml") && text.contains("invalid.json"),
            "{text}"
        );
    }

    #[test]
    fn edit_failures_name_the_device() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("d.yaml"),
            "cdiVersion: 0.5.0\nkind: v.com/c\ndevices:\n  - name: x\n    containerEdits:\n      \
             deviceNodes: [{path: /dev/x, hostPath: /dev/ferrolet-not-there}]\n",
        )
        .unwrap();
        let registry = Registry::new(vec![tmp.path().to_path_buf()]);
        let resolved = registry.resolve(&["v.com/c=x".into()]).unwrap();
        let err = resolved.apply(&mut Spec::default()).unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(
            err.to_string().starts_with(
                "CDI device \"v.com/c=x\": injection failed: failed to stat CDI host device \"/dev/ferrolet-not-there\""
            ),
            "{err}"
        );
    }
}
