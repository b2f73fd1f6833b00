//! The dependency rule of ARCHITECTURE.md, held: within `ferrolet` (kubelet/), `ferrolet-cri`
//! (shim/) and the task shim (task-shim/), top-level modules import only modules of their own layer or a lower
//! one, and never in a cycle. Read from the sources' `crate::` and `super::` paths; comments
//! and test code (`tests.rs`, `tests/`, a trailing `#[cfg(test)] mod tests { … }`) are left out,
//! since tests may assemble higher layers.
//!
//! Needs neither root nor containerd (part of `make unit`).

#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's layers, lowest first: each a list of top-level module names.
struct Rule {
    /// The crate's source dir, relative to the workspace root.
    src: &'static str,
    layers: &'static [(&'static str, &'static [&'static str])],
}

const KUBELET: Rule = Rule {
    src: "kubelet/src",
    layers: &[
        (
            "foundations",
            &[
                "types",
                "backoff",
                "heap",
                "logging",
                "node",
                "cri_log",
                "metrics",
                "kube_client",
                "events",
                "objects",
                "timeline",
                "yaml",
            ],
        ),
        (
            "pod model",
            &[
                "manifest",
                "source",
                "credentials",
                "podspec",
                "volume",
                "status",
            ],
        ),
        (
            "runtime access",
            &[
                "cri",
                "pleg",
                "certificate",
                "object_cache",
                "token",
                "plugin_manager",
                "csi",
                "storage_api",
            ],
        ),
        (
            "managers",
            &[
                "pod_actions",
                "prober",
                "lifecycle",
                "images",
                "stats",
                "eviction",
                "gc",
                "log_rotation",
                "pod_workers",
                "event_recorder",
                "node_status",
                "admission",
                "allocation",
                "status_manager",
                "mirror_pods",
                "volume_manager",
                "cm",
                "userns",
            ],
        ),
        (
            "assembly",
            &["config", "kubelet", "sync_pod", "view", "server"],
        ),
        ("process", &["app", "trace", "check"]),
    ],
};

const FERROLET_CRI: Rule = Rule {
    src: "shim/src",
    layers: &[
        (
            "foundations",
            &[
                "completion",
                "task",
                "shim_socket",
                "content",
                "lease",
                "store",
                "mount",
                "idmap",
                "image_config",
                "reference",
            ],
        ),
        (
            "domain",
            &[
                "oci",
                "cdi",
                "sandbox",
                "container",
                "stats",
                "archive",
                "oci_layout",
                "config",
                "registry",
            ],
        ),
        ("services", &["runtime", "image", "streaming"]),
        ("process", &["server", "deadline", "cli", "logging"]),
    ],
};

const TASK_SHIM: Rule = Rule {
    src: "task-shim/src",
    layers: &[
        (
            "foundations",
            &[
                "time", "log", "error", "address", "args", "stdio", "console", "pump", "rootfs",
                "cgroup", "runtime",
            ],
        ),
        ("domain", &["task", "io", "publisher", "cleanup"]),
        ("services", &["service", "start"]),
        ("process", &["server"]),
    ],
};

/// One import: where it is written and what it names.
#[derive(Clone, Debug)]
struct Import {
    from: String,
    to: String,
    at: String,
}

/// The top-level module a file belongs to, and its module path below the crate root.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The source without comments and without a trailing `#[cfg(test)] mod tests { … }`.
fn production_code(text: &str) -> String {
    let mut kept = Vec::new();
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        if pending_cfg_test && (t.starts_with("mod tests") || t.starts_with("#[")) {
            if t.starts_with("mod tests") && t.ends_with('{') {
                // Test modules end the file by convention; everything after is test code.
                break;
            }
            continue;
        }
        pending_cfg_test = false;
        if t.starts_with("//") {
            continue;
        }
        kept.push(line.split(" // ").next().unwrap_or(line));
    }
    kept.join("\n")
}

/// The first segment under the crate root of each path in `code` (`crate::a::b` → `a`;
/// `super::x` resolved against `module`), with `use crate::{a, b::c}` groups expanded.
fn imported_modules(code: &str, module: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if boundary && rest.starts_with("crate::") {
            let after = &rest["crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                let end = matching_brace(group);
                for item in split_top_level(&group[..end]) {
                    if let Some(first) = first_ident(item) {
                        found.push(first.to_string());
                    }
                }
            } else if let Some(first) = first_ident(after) {
                found.push(first.to_string());
            }
            i += "crate::".len();
            continue;
        }
        if boundary && rest.starts_with("super::") {
            let mut depth = 0;
            let mut tail = rest;
            while let Some(t) = tail.strip_prefix("super::") {
                depth += 1;
                tail = t;
            }
            // A file's own module is `module`; `super` from a file's top scope is its parent.
            if depth <= module.len() {
                let base = &module[..module.len() - depth];
                let first = match base.first() {
                    Some(top) => Some(top.clone()),
                    None => first_ident(tail).map(str::to_string),
                };
                if let Some(first) = first {
                    found.push(first);
                }
            }
            i += rest.len() - tail.len();
            continue;
        }
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    found
}

fn matching_brace(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

fn first_ident(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if path.is_dir() {
            if name.as_deref() != Some("tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !matches!(name.as_deref(), Some("tests.rs" | "lib.rs" | "main.rs"))
        {
            out.push(path);
        }
    }
}

/// Every import between two different top-level modules of the crate at `src`.
fn imports(src: &Path) -> (BTreeSet<String>, Vec<Import>) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    let mut found = Vec::new();
    for file in &files {
        let module = module_path(src, file);
        let Some(top) = module.first().cloned() else {
            continue;
        };
        modules.insert(top.clone());
        let text = std::fs::read_to_string(file).expect("a source file");
        for to in imported_modules(&production_code(&text), &module) {
            found.push(Import {
                from: top.clone(),
                to,
                at: file.strip_prefix(src).unwrap_or(file).display().to_string(),
            });
        }
    }
    let edges = found
        .into_iter()
        .filter(|i| i.from != i.to && modules.contains(&i.to))
        .collect();
    (modules, edges)
}

/// A cycle in the import graph, if there is one, as the list of modules along it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let start = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if !state.contains_key(node.as_str())
            && let Some(c) = visit(node, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// Everything wrong with `rule`'s crate: modules with no layer, imports upward, a cycle.
fn violations(rule: &Rule) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rule.src);
    let (modules, imports) = imports(&src);
    let layer_of: BTreeMap<&str, (usize, &str)> = rule
        .layers
        .iter()
        .enumerate()
        .flat_map(|(n, (name, mods))| mods.iter().map(move |m| (*m, (n, *name))))
        .collect();
    let mut problems = Vec::new();
    for m in &modules {
        if !layer_of.contains_key(m.as_str()) {
            problems.push(format!(
                "{}: module `{m}` has no layer: add it to this test's rule and to ARCHITECTURE.md",
                rule.src
            ));
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut reported = BTreeSet::new();
    for i in &imports {
        edges
            .entry(i.from.clone())
            .or_default()
            .insert(i.to.clone());
        let (Some(&(from, from_name)), Some(&(to, to_name))) =
            (layer_of.get(i.from.as_str()), layer_of.get(i.to.as_str()))
        else {
            continue;
        };
        if to > from && reported.insert((i.at.clone(), i.to.clone())) {
            problems.push(format!(
                "{}/{}: `{}` ({from_name}) imports `{}` ({to_name}), a higher layer",
                rule.src, i.at, i.from, i.to
            ));
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        let witness: Vec<String> = cycle
            .windows(2)
            .filter_map(|w| {
                imports
                    .iter()
                    .find(|i| i.from == w[0] && i.to == w[1])
                    .map(|i| format!("{} → {} ({})", i.from, i.to, i.at))
            })
            .collect();
        problems.push(format!(
            "{}: import cycle {}: {}",
            rule.src,
            cycle.join(" → "),
            witness.join("; ")
        ));
    }
    problems
}

#[test]
fn kubelet_modules_follow_the_layers_without_cycles() {
    let problems = violations(&KUBELET);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn ferrolet_cri_modules_follow_the_layers_without_cycles() {
    let problems = violations(&FERROLET_CRI);
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn task_shim_modules_follow_the_layers_without_cycles() {
    let v = violations(&TASK_SHIM);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

#[test]
fn the_reader_sees_through_groups_supers_and_comments() {
    let code = production_code(
        "use crate::{a, b::{c, d}};\n// crate::commented\nlet x = crate::e::f(super::g::h);\n#[cfg(test)]\nmod tests {\n    use crate::t;\n}\n",
    );
    let module = vec!["m".to_string(), "n".to_string()];
    assert_eq!(imported_modules(&code, &module), ["a", "b", "e", "m"]);
    let top = vec!["m".to_string()];
    assert_eq!(imported_modules("super::z::y", &top), ["z"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&edges),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
