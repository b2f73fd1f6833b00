//! Network configuration: parsing, validation and conf-dir loading like libcni.
//!
//! A conf dir holds `*.conf`, `*.conflist` and `*.json` files, read in lexical order. A
//! `.conflist` (or any file with a `plugins` array) is a network configuration list; a single
//! plugin config (`.conf`/`.json` without `plugins`) is wrapped into a one-plugin list.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{CniError, Result};

/// Spec versions this library speaks, oldest first. The last one is the "current" form.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The version results are converted to for callers.
pub const CURRENT_VERSION: &str = "1.1.0";

/// Default conf dir (libcni's).
pub const DEFAULT_CONF_DIR: &str = "/etc/cni/net.d";

/// Extensions recognised in a conf dir (libcni's defaults).
pub const CONF_EXTENSIONS: &[&str] = &["conf", "conflist", "json"];

/// Whether `version` is one of [`SUPPORTED_VERSIONS`].
pub fn is_supported(version: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

/// Compare two dotted versions numerically (`"0.4.0" < "1.0.0"`); unparseable parts count as 0.
pub fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let parse = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(a).cmp(&parse(b))
}

/// `version >= min`.
pub fn version_at_least(version: &str, min: &str) -> bool {
    version_cmp(version, min) != std::cmp::Ordering::Less
}

/// One plugin of a chain: its `type`, declared capabilities, and its raw JSON object (kept
/// verbatim so plugin-specific fields reach the plugin untouched).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    pub plugin_type: String,
    pub capabilities: BTreeMap<String, bool>,
    pub raw: Map<String, Value>,
}

impl PluginConf {
    /// Whether the plugin declared `capability: true`.
    pub fn has_capability(&self, cap: &str) -> bool {
        self.capabilities.get(cap).copied().unwrap_or(false)
    }
}

/// A network configuration list (SPEC "Configuration format").
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    pub name: String,
    pub cni_version: String,
    pub disable_check: bool,
    pub disable_gc: bool,
    pub plugins: Vec<PluginConf>,
    /// The file it was loaded from, if any.
    pub source: Option<PathBuf>,
}

impl NetworkConfigList {
    /// Parse a `.conflist` document.
    pub fn from_conflist_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        let obj = parse_object(bytes, file)?;
        let name = required_name(&obj, file, "name")?;
        let cni_version = required_version(&obj, file, "cniVersion")?;
        let disable_check = optional_bool(&obj, file, "disableCheck")?;
        let disable_gc = optional_bool(&obj, file, "disableGC")?;
        let plugins = match obj.get("plugins") {
            None => {
                return Err(invalid(
                    file,
                    "plugins",
                    "missing (a conflist needs a `plugins` array)",
                ));
            }
            Some(Value::Array(a)) if a.is_empty() => {
                return Err(invalid(
                    file,
                    "plugins",
                    "empty: at least one plugin is required",
                ));
            }
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, p)| plugin_from_value(p, file, &format!("plugins[{i}]")))
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(invalid(file, "plugins", "must be an array")),
        };
        Ok(NetworkConfigList {
            name,
            cni_version,
            disable_check,
            disable_gc,
            plugins,
            source: Some(file.to_path_buf()),
        })
    }

    /// Parse a single plugin `.conf` document and wrap it into a one-plugin list.
    pub fn from_conf_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        let obj = parse_object(bytes, file)?;
        let name = required_name(&obj, file, "name")?;
        let cni_version = required_version(&obj, file, "cniVersion")?;
        let disable_check = optional_bool(&obj, file, "disableCheck")?;
        let plugin = plugin_from_value(&Value::Object(obj), file, "")?;
        Ok(NetworkConfigList {
            name,
            cni_version,
            disable_check,
            disable_gc: false,
            plugins: vec![plugin],
            source: Some(file.to_path_buf()),
        })
    }

    /// Parse either form: a document with a `plugins` key is a list, otherwise a single conf.
    pub fn from_bytes(bytes: &[u8], file: &Path) -> Result<Self> {
        let is_list = file.extension().is_some_and(|e| e == "conflist")
            || serde_json::from_slice::<Value>(bytes)
                .ok()
                .is_some_and(|v| v.get("plugins").is_some());
        if is_list {
            Self::from_conflist_bytes(bytes, file)
        } else {
            Self::from_conf_bytes(bytes, file)
        }
    }

    /// Read and parse one file.
    pub fn from_file(file: &Path) -> Result<Self> {
        let bytes = std::fs::read(file)
            .map_err(|e| CniError::io(format!("reading {}", file.display()), e))?;
        Self::from_bytes(&bytes, file)
    }

    /// The source file for messages (`<inline>` when built in memory).
    pub fn source_display(&self) -> String {
        self.source
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "<inline>".into())
    }
}

/// The config files of a conf dir, in lexical order (libcni's `ConfFiles`). A missing dir is
/// an empty list.
pub fn conf_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CniError::io(
                format!("reading conf dir {}", dir.display()),
                e,
            ));
        }
    };
    let mut files = Vec::new();
    for entry in rd {
        let entry =
            entry.map_err(|e| CniError::io(format!("reading conf dir {}", dir.display()), e))?;
        let path = entry.path();
        let ext_ok = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| CONF_EXTENSIONS.contains(&e));
        if ext_ok && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Load every network of a conf dir, strictly: the first invalid file or duplicate name is an
/// error naming it.
pub fn load_dir(dir: &Path) -> Result<Vec<NetworkConfigList>> {
    let mut nets: Vec<NetworkConfigList> = Vec::new();
    for file in conf_files(dir)? {
        let net = NetworkConfigList::from_file(&file)?;
        if let Some(prev) = nets.iter().find(|n| n.name == net.name) {
            return Err(CniError::DuplicateName {
                name: net.name,
                first: prev.source.clone().unwrap_or_default(),
                second: file,
            });
        }
        nets.push(net);
    }
    Ok(nets)
}

/// Load every file of a conf dir, keeping per-file errors (for `ferrolet-cni ls`).
pub fn scan_dir(dir: &Path) -> Result<Vec<(PathBuf, Result<NetworkConfigList>)>> {
    Ok(conf_files(dir)?
        .into_iter()
        .map(|f| {
            let r = NetworkConfigList::from_file(&f);
            (f, r)
        })
        .collect())
}

/// Find the network called `name` in a conf dir (the whole dir is validated).
pub fn find_network(dir: &Path, name: &str) -> Result<NetworkConfigList> {
    load_dir(dir)?
        .into_iter()
        .find(|n| n.name == name)
        .ok_or_else(|| CniError::NetworkNotFound {
            name: name.into(),
            dir: dir.to_path_buf(),
        })
}

fn invalid(file: &Path, field: &str, reason: impl Into<String>) -> CniError {
    CniError::InvalidConfig {
        file: file.to_path_buf(),
        field: field.into(),
        reason: reason.into(),
    }
}

fn parse_object(bytes: &[u8], file: &Path) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(CniError::InvalidJson {
            file: file.to_path_buf(),
            reason: format!("expected a JSON object, found {}", json_kind(&other)),
        }),
        Err(e) => Err(CniError::InvalidJson {
            file: file.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn required_string(obj: &Map<String, Value>, file: &Path, field: &str) -> Result<String> {
    match obj.get(field) {
        None => Err(invalid(file, field, "missing")),
        Some(Value::String(s)) if s.is_empty() => Err(invalid(file, field, "empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(invalid(
            file,
            field,
            format!("must be a string, found {}", json_kind(v)),
        )),
    }
}

fn required_name(obj: &Map<String, Value>, file: &Path, field: &str) -> Result<String> {
    let name = required_string(obj, file, field)?;
    // SPEC: the network name must match ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !ok {
        return Err(invalid(
            file,
            field,
            format!("{name:?} is not a valid network name (letters, digits, `_`, `.`, `-`)"),
        ));
    }
    Ok(name)
}

fn required_version(obj: &Map<String, Value>, file: &Path, field: &str) -> Result<String> {
    let v = required_string(obj, file, field)?;
    if !is_supported(&v) {
        return Err(invalid(
            file,
            field,
            format!(
                "unsupported version {v:?} (supported: {})",
                SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    Ok(v)
}

fn optional_bool(obj: &Map<String, Value>, file: &Path, field: &str) -> Result<bool> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        // libcni accepts the strings "true"/"false" too.
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(invalid(
            file,
            field,
            format!("must be a boolean, found {}", json_kind(v)),
        )),
    }
}

fn plugin_from_value(v: &Value, file: &Path, prefix: &str) -> Result<PluginConf> {
    let field = |f: &str| {
        if prefix.is_empty() {
            f.to_string()
        } else {
            format!("{prefix}.{f}")
        }
    };
    let Value::Object(raw) = v else {
        return Err(invalid(
            file,
            prefix,
            format!("must be an object, found {}", json_kind(v)),
        ));
    };
    let plugin_type = match raw.get("type") {
        None => return Err(invalid(file, &field("type"), "missing")),
        Some(Value::String(s)) if s.is_empty() => {
            return Err(invalid(file, &field("type"), "empty"));
        }
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(invalid(
                file,
                &field("type"),
                format!("must be a string, found {}", json_kind(v)),
            ));
        }
    };
    if plugin_type.contains('/') || plugin_type == "." || plugin_type == ".." {
        return Err(invalid(
            file,
            &field("type"),
            format!("{plugin_type:?} must be a plain binary name, not a path"),
        ));
    }
    let mut capabilities = BTreeMap::new();
    match raw.get("capabilities") {
        None | Some(Value::Null) => {}
        Some(Value::Object(caps)) => {
            for (k, v) in caps {
                match v {
                    Value::Bool(b) => {
                        capabilities.insert(k.clone(), *b);
                    }
                    other => {
                        return Err(invalid(
                            file,
                            &field(&format!("capabilities.{k}")),
                            format!("must be a boolean, found {}", json_kind(other)),
                        ));
                    }
                }
            }
        }
        Some(v) => {
            return Err(invalid(
                file,
                &field("capabilities"),
                format!("must be an object, found {}", json_kind(v)),
            ));
        }
    }
    Ok(PluginConf {
        plugin_type,
        capabilities,
        raw: raw.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> PathBuf {
        PathBuf::from("/x/10-test.conflist")
    }

    fn err_of(json: &str) -> String {
        match NetworkConfigList::from_conflist_bytes(json.as_bytes(), &p()) {
            Ok(n) => panic!("expected error, got {n:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_conflist() {
        let n = NetworkConfigList::from_conflist_bytes(
            br#"{"cniVersion":"1.0.0","name":"n1","disableCheck":true,
                "plugins":[{"type":"bridge","x":1},{"type":"portmap","capabilities":{"portMappings":true}}]}"#,
            &p(),
        )
        .unwrap();
        assert_eq!(n.name, "n1");
        assert!(n.disable_check);
        assert!(!n.disable_gc);
        assert_eq!(n.plugins.len(), 2);
        assert!(n.plugins[1].has_capability("portMappings"));
        assert_eq!(n.plugins[0].raw["x"], 1);
    }

    #[test]
    fn precise_errors() {
        assert_eq!(
            err_of("{nope"),
            "/x/10-test.conflist: invalid JSON: key must be a string at line 1 column 2"
        );
        assert!(err_of("[1]").contains("expected a JSON object, found an array"));
        assert_eq!(
            err_of(r#"{"cniVersion":"1.0.0","plugins":[{"type":"a"}]}"#),
            "/x/10-test.conflist: field `name`: missing"
        );
        assert_eq!(
            err_of(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"},{"x":1}]}"#),
            "/x/10-test.conflist: field `plugins[1].type`: missing"
        );
        assert!(
            err_of(r#"{"cniVersion":"9.9.9","name":"n","plugins":[{"type":"a"}]}"#)
                .contains("field `cniVersion`: unsupported version \"9.9.9\"")
        );
        assert!(
            err_of(r#"{"name":"n","plugins":[{"type":"a"}]}"#)
                .contains("field `cniVersion`: missing")
        );
        assert!(
            err_of(r#"{"cniVersion":"1.0.0","name":"n","plugins":[]}"#)
                .contains("`plugins`: empty")
        );
        assert!(
            err_of(r#"{"cniVersion":"1.0.0","name":"n w","plugins":[{"type":"a"}]}"#)
                .contains("not a valid network name")
        );
        assert!(
            err_of(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"../x"}]}"#)
                .contains("plain binary name")
        );
        assert!(
            err_of(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a","capabilities":{"mac":1}}]}"#)
                .contains("`plugins[0].capabilities.mac`: must be a boolean")
        );
    }

    #[test]
    fn dir_loading_order_wrap_and_duplicates() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("20-b.conflist"),
            r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"x"}]}"#,
        )
        .unwrap();
        std::fs::write(
            d.path().join("10-a.conf"),
            r#"{"cniVersion":"0.4.0","name":"a","type":"loopback"}"#,
        )
        .unwrap();
        std::fs::write(
            d.path().join("30-c.json"),
            r#"{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"y"}]}"#,
        )
        .unwrap();
        std::fs::write(d.path().join("README.txt"), "ignored").unwrap();
        let nets = load_dir(d.path()).unwrap();
        let names: Vec<_> = nets.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(nets[0].plugins[0].plugin_type, "loopback");
        assert_eq!(
            find_network(d.path(), "c").unwrap().plugins[0].plugin_type,
            "y"
        );
        assert!(matches!(
            find_network(d.path(), "zz"),
            Err(CniError::NetworkNotFound { .. })
        ));

        std::fs::write(
            d.path().join("40-dup.conf"),
            r#"{"cniVersion":"1.0.0","name":"b","type":"z"}"#,
        )
        .unwrap();
        let e = load_dir(d.path()).unwrap_err().to_string();
        assert!(e.contains("duplicate network name \"b\""), "{e}");
        assert!(
            e.contains("20-b.conflist") && e.contains("40-dup.conf"),
            "{e}"
        );
    }

    #[test]
    fn versions() {
        assert!(version_at_least("1.0.0", "0.4.0"));
        assert!(!version_at_least("0.3.1", "0.4.0"));
        assert!(version_at_least("1.1.0", "1.1.0"));
    }
}
