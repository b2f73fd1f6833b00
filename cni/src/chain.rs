//! The operations on a network configuration list: ADD (in order, each plugin gets the
//! previous result), DEL (reverse order, cached result as `prevResult`), CHECK, STATUS, GC and
//! VERSION. Like libcni, but a failed ADD is rolled back (DEL of the whole chain) so that
//! nothing is left behind.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::cache::{CachedAttachment, ResultCache};
use crate::config::{CURRENT_VERSION, NetworkConfigList, PluginConf, version_at_least};
use crate::error::{CniError, Result};
use crate::invoke::{Command, Env, Invoker, Tracer};
use crate::result::CniResult;

/// The per-attachment inputs of an operation (libcni's `RuntimeConf`).
#[derive(Debug, Clone, Default)]
pub struct RuntimeConf {
    pub container_id: String,
    /// Netns path (may be empty or gone on DEL).
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS` pairs.
    pub args: Vec<(String, String)>,
    /// Capability arguments (`portMappings`, `bandwidth`, ...): each reaches the plugins that
    /// declare the capability, under `runtimeConfig`.
    pub capability_args: Map<String, Value>,
}

impl RuntimeConf {
    pub fn new(
        container_id: impl Into<String>,
        netns: impl Into<String>,
        ifname: impl Into<String>,
    ) -> Self {
        RuntimeConf {
            container_id: container_id.into(),
            netns: netns.into(),
            ifname: ifname.into(),
            ..Default::default()
        }
    }

    pub fn with_capability(mut self, key: &str, value: Value) -> Self {
        self.capability_args.insert(key.into(), value);
        self
    }

    pub fn with_arg(mut self, k: &str, v: &str) -> Self {
        self.args.push((k.into(), v.into()));
        self
    }

    fn env(&self) -> Env {
        Env {
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            args: self
                .args
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(";"),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |what: &str, reason: String| {
            Err(CniError::InvalidArgument {
                what: what.into(),
                reason,
            })
        };
        let cid = &self.container_id;
        if cid.is_empty()
            || !cid
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            || !cid
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return bad(
                "container id",
                format!("{cid:?}: must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"),
            );
        }
        let ifn = &self.ifname;
        if ifn.is_empty()
            || ifn.len() > 15
            || ifn == "."
            || ifn == ".."
            || ifn
                .chars()
                .any(|c| c == '/' || c == ':' || c.is_whitespace())
        {
            return bad(
                "ifname",
                format!("{ifn:?}: 1-15 chars, no `/`, `:` or spaces"),
            );
        }
        for (k, v) in &self.args {
            if k.is_empty() || k.contains(['=', ';']) || v.contains(';') {
                return bad(
                    "CNI_ARGS",
                    format!("{k:?}={v:?}: keys need no `=`/`;`, values no `;`"),
                );
            }
        }
        Ok(())
    }
}

/// A still-valid attachment, for GC (`cni.dev/valid-attachments`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GcAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// A plugin's VERSION answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VersionInfo {
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    #[serde(rename = "supportedVersions", default)]
    pub supported_versions: Vec<String>,
}

/// The CNI client: plugin dirs, result cache, timeout and tracer.
#[derive(Debug, Clone)]
pub struct Cni {
    invoker: Invoker,
    cache: ResultCache,
}

impl Cni {
    /// A client searching `plugin_dirs`, caching results under `cache_dir`.
    pub fn new(plugin_dirs: Vec<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        Cni {
            invoker: Invoker::new(plugin_dirs),
            cache: ResultCache::new(cache_dir),
        }
    }

    /// The Go world's defaults: plugins in `/opt/cni/bin` then `/usr/lib/cni`, cache in
    /// `/var/lib/cni`.
    pub fn with_defaults() -> Self {
        Self::new(
            crate::invoke::default_plugin_dirs(),
            crate::cache::DEFAULT_CACHE_DIR,
        )
    }

    /// Per-plugin-call timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.invoker.timeout = timeout;
        self
    }

    /// Receive a trace record after each plugin call.
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.invoker.tracer = Some(tracer);
        self
    }

    pub fn invoker(&self) -> &Invoker {
        &self.invoker
    }

    pub fn cache(&self) -> &ResultCache {
        &self.cache
    }

    /// fsync cache entries before renaming them into place (see [`ResultCache::with_fsync`]).
    pub fn with_durable_cache(mut self, fsync: bool) -> Self {
        self.cache = self.cache.with_fsync(fsync);
        self
    }

    /// ADD: run the chain in order; cache and return the final result (current form). On
    /// failure the chain is rolled back with DEL before the error is returned.
    pub async fn add(&self, net: &NetworkConfigList, rt: &RuntimeConf) -> Result<CniResult> {
        rt.validate()?;
        let env = rt.env();
        let mut prev: Option<CniResult> = None;
        for plugin in &net.plugins {
            let prev_wire = prev
                .as_ref()
                .map(|r| r.to_version(&net.cni_version))
                .transpose()?;
            let stdin = plugin_stdin(net, plugin, prev_wire, rt, None);
            let step = async {
                let out = self
                    .invoker
                    .exec(&plugin.plugin_type, Command::Add, &env, &stdin)
                    .await?;
                CniResult::parse(&out, &net.cni_version).map_err(|reason| CniError::InvalidResult {
                    plugin: plugin.plugin_type.clone(),
                    command: "ADD",
                    reason,
                })
            };
            match step.await {
                Ok(r) => prev = Some(r),
                Err(e) => {
                    self.rollback(net, rt, prev.as_ref()).await;
                    return Err(e);
                }
            }
        }
        let result = prev.unwrap_or_default();
        let mut entry = CachedAttachment::new(&net.name, &rt.container_id, &rt.ifname);
        entry.netns = rt.netns.clone();
        entry.cni_args = rt.args.clone();
        entry.capability_args = rt.capability_args.clone();
        entry.result = Some(result.to_version(&net.cni_version)?);
        if let Err(e) = self.cache.write(&entry).await {
            self.rollback(net, rt, Some(&result)).await;
            return Err(e);
        }
        Ok(result)
    }

    async fn rollback(&self, net: &NetworkConfigList, rt: &RuntimeConf, prev: Option<&CniResult>) {
        let prev_wire = prev.and_then(|r| r.to_version(&net.cni_version).ok());
        if let Err(e) = self.del_chain(net, rt, prev_wire, false).await {
            tracing::warn!(network = %net.name, container = %rt.container_id, error = %e, "rollback of failed ADD incomplete");
        }
    }

    /// The cached ADD result of an attachment, in current form.
    pub async fn cached_result(
        &self,
        net: &NetworkConfigList,
        rt: &RuntimeConf,
    ) -> Result<Option<CniResult>> {
        let Some(entry) = self
            .cache
            .read(&net.name, &rt.container_id, &rt.ifname)
            .await?
        else {
            return Ok(None);
        };
        let Some(v) = entry.result else {
            return Ok(None);
        };
        CniResult::parse(v.to_string().as_bytes(), &net.cni_version)
            .map(Some)
            .map_err(|reason| CniError::io("decoding cached result", std::io::Error::other(reason)))
    }

    /// DEL: reverse order, with the cached result as `prevResult` (0.4.0+). Succeeds when the
    /// netns or the cache entry is already gone, and when repeated. The cache entry is removed
    /// once every plugin succeeded.
    pub async fn del(&self, net: &NetworkConfigList, rt: &RuntimeConf) -> Result<()> {
        rt.validate()?;
        let entry = match self
            .cache
            .read(&net.name, &rt.container_id, &rt.ifname)
            .await
        {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring unreadable cache entry on DEL");
                None
            }
        };
        let mut rt = rt.clone();
        let mut prev_wire = None;
        if let Some(entry) = entry {
            // Plugins such as portmap need the ADD's capability args to undo it: when the
            // caller gives none, use the cached ones (likewise CNI_ARGS).
            if rt.capability_args.is_empty() {
                rt.capability_args = entry.capability_args;
            }
            if rt.args.is_empty() {
                rt.args = entry.cni_args;
            }
            if let Some(v) = entry.result {
                match CniResult::parse(v.to_string().as_bytes(), &net.cni_version) {
                    Ok(r) => prev_wire = Some(r.to_version(&net.cni_version)?),
                    Err(e) => {
                        tracing::warn!(error = %e, "ignoring undecodable cached result on DEL")
                    }
                }
            }
        }
        self.del_chain(net, &rt, prev_wire, true).await?;
        self.cache
            .remove(&net.name, &rt.container_id, &rt.ifname)
            .await
    }

    async fn del_chain(
        &self,
        net: &NetworkConfigList,
        rt: &RuntimeConf,
        prev: Option<Value>,
        stop_on_error: bool,
    ) -> Result<()> {
        let prev = if version_at_least(&net.cni_version, "0.4.0") {
            prev
        } else {
            None
        };
        let mut env = rt.env();
        if !env.netns.is_empty() {
            let path = env.netns.clone();
            let live = tokio::task::spawn_blocking(move || {
                crate::netns::is_netns(std::path::Path::new(&path))
            })
            .await
            .unwrap_or(false);
            if !live {
                // The namespace is gone: plugins skip in-namespace cleanup on an empty netns.
                env.netns.clear();
            }
        }
        let mut errors = Vec::new();
        for plugin in net.plugins.iter().rev() {
            let stdin = plugin_stdin(net, plugin, prev.clone(), rt, None);
            if let Err(e) = self
                .invoker
                .exec(&plugin.plugin_type, Command::Del, &env, &stdin)
                .await
            {
                if stop_on_error {
                    return Err(e);
                }
                errors.push(e);
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(CniError::Multiple(errors)),
        }
    }

    /// CHECK (0.4.0+): every plugin in order, with the cached result as `prevResult`. A
    /// network with `disableCheck` passes without running plugins.
    pub async fn check(&self, net: &NetworkConfigList, rt: &RuntimeConf) -> Result<()> {
        rt.validate()?;
        if !version_at_least(&net.cni_version, "0.4.0") {
            return Err(CniError::NotSupported {
                network: net.name.clone(),
                op: "CHECK",
                reason: format!("cniVersion {} < 0.4.0", net.cni_version),
            });
        }
        if net.disable_check {
            return Ok(());
        }
        let Some(prev) = self.cached_result(net, rt).await? else {
            return Err(CniError::NoCachedResult {
                network: net.name.clone(),
                container_id: rt.container_id.clone(),
                ifname: rt.ifname.clone(),
            });
        };
        let prev = prev.to_version(&net.cni_version)?;
        let env = rt.env();
        for plugin in &net.plugins {
            let stdin = plugin_stdin(net, plugin, Some(prev.clone()), rt, None);
            self.invoker
                .exec(&plugin.plugin_type, Command::Check, &env, &stdin)
                .await?;
        }
        Ok(())
    }

    /// STATUS (1.1.0): whether every plugin is ready for ADDs. Networks below 1.1.0 are
    /// reported ready without running plugins (libcni).
    pub async fn status(&self, net: &NetworkConfigList) -> Result<()> {
        if !version_at_least(&net.cni_version, "1.1.0") {
            return Ok(());
        }
        let rt = RuntimeConf::default();
        for plugin in &net.plugins {
            let stdin = plugin_stdin(net, plugin, None, &rt, None);
            self.invoker
                .exec(
                    &plugin.plugin_type,
                    Command::Status,
                    &Env::default(),
                    &stdin,
                )
                .await?;
        }
        Ok(())
    }

    /// GC: DEL every cached attachment of the network not in `valid`, then (1.1.0+) run GC on
    /// each plugin with `cni.dev/valid-attachments`. Does nothing with `disableGC`.
    pub async fn gc(&self, net: &NetworkConfigList, valid: &[GcAttachment]) -> Result<()> {
        if net.disable_gc {
            return Ok(());
        }
        let mut errors = Vec::new();
        for cached in self.cache.list(&net.name).await? {
            let key = GcAttachment {
                container_id: cached.container_id.clone(),
                ifname: cached.ifname.clone(),
            };
            if valid.contains(&key) {
                continue;
            }
            let rt = RuntimeConf {
                container_id: cached.container_id,
                netns: cached.netns,
                ifname: cached.ifname,
                args: cached.cni_args,
                capability_args: cached.capability_args,
            };
            if let Err(e) = self.del(net, &rt).await {
                errors.push(e);
            }
        }
        if version_at_least(&net.cni_version, "1.1.0") {
            let valid_json = serde_json::to_value(valid).unwrap_or_else(|_| json!([]));
            let rt = RuntimeConf::default();
            for plugin in &net.plugins {
                let stdin = plugin_stdin(
                    net,
                    plugin,
                    None,
                    &rt,
                    Some(("cni.dev/valid-attachments", valid_json.clone())),
                );
                if let Err(e) = self
                    .invoker
                    .exec(&plugin.plugin_type, Command::Gc, &Env::default(), &stdin)
                    .await
                {
                    errors.push(e);
                }
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(CniError::Multiple(errors)),
        }
    }

    /// VERSION of one plugin.
    pub async fn version(&self, plugin_type: &str) -> Result<VersionInfo> {
        let stdin = json!({ "cniVersion": CURRENT_VERSION }).to_string();
        let out = self
            .invoker
            .exec(
                plugin_type,
                Command::Version,
                &Env::default(),
                stdin.as_bytes(),
            )
            .await?;
        serde_json::from_slice(&out).map_err(|e| CniError::InvalidResult {
            plugin: plugin_type.into(),
            command: "VERSION",
            reason: e.to_string(),
        })
    }
}

/// The stdin config of one plugin: its own object plus `name`, `cniVersion`, `prevResult`
/// and `runtimeConfig` (capability args of the capabilities it declared), like libcni.
pub fn plugin_stdin(
    net: &NetworkConfigList,
    plugin: &PluginConf,
    prev: Option<Value>,
    rt: &RuntimeConf,
    extra: Option<(&str, Value)>,
) -> Vec<u8> {
    let mut m = plugin.raw.clone();
    m.insert("name".into(), json!(net.name));
    m.insert("cniVersion".into(), json!(net.cni_version));
    if let Some(p) = prev {
        m.insert("prevResult".into(), p);
    }
    let rc: Map<String, Value> = rt
        .capability_args
        .iter()
        .filter(|(k, _)| plugin.has_capability(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !rc.is_empty() {
        m.insert("runtimeConfig".into(), Value::Object(rc));
    }
    if let Some((k, v)) = extra {
        m.insert(k.into(), v);
    }
    serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
}
