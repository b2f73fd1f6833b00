//! `ferrolet-cni`: the CNI debugging tool. Runs a network's plugin chain by hand
//! (add/check/del/status/gc), lists networks and plugins, manages named network namespaces,
//! and with `--trace` shows exactly what every plugin was given and answered.
//!
//! Exit status: 0 success, 1 plugin or network error (`ls` finding no valid network config
//! is one: nothing would get a pod network from that dir), 2 usage error.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::Parser;
use ferrolet_cni::config::{self, NetworkConfigList};
use ferrolet_cni::invoke::{self, TraceRecord};
use ferrolet_cni::{Cni, CniError, GcAttachment, RuntimeConf, netns};
use serde_json::{Map, Value, json};

mod cli;

use cli::{Attach, Cli, Cmd, NetnsCmd};

/// An error in how the tool was called: exit status 2.
#[derive(Debug)]
struct Usage(String);
impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Usage {}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match &cli.cmd {
        // exec must run on the main thread, before any runtime thread exists.
        Cmd::Exec { netns, command } => exec_in(&cli, netns, command),
        _ => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting runtime")
            .and_then(|rt| rt.block_on(run(&cli))),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrolet-cni: error: {e:#}");
            let is_usage = e.downcast_ref::<Usage>().is_some()
                || matches!(
                    e.downcast_ref::<CniError>(),
                    Some(CniError::InvalidArgument { .. })
                );
            ExitCode::from(if is_usage { 2 } else { 1 })
        }
    }
}

fn exec_in(cli: &Cli, ns: &str, command: &[String]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let path = netns::resolve(&cli.netns_dir, ns);
    let Some((prog, args)) = command.split_first() else {
        return Err(usage("exec needs a command after `--`"));
    };
    netns::enter_current_thread(&path)?;
    let err = std::process::Command::new(prog).args(args).exec();
    Err(anyhow!("exec {prog}: {err}"))
}

fn cni(cli: &Cli) -> Cni {
    let mut cni = Cni::new(invoke::split_paths(&cli.bin_dir), &cli.cache_dir)
        .with_timeout(std::time::Duration::from_secs(cli.timeout));
    if cli.trace {
        cni = cni.with_tracer(Arc::new(print_trace));
    }
    cni
}

fn load(cli: &Cli, network: &str) -> anyhow::Result<NetworkConfigList> {
    Ok(config::find_network(&cli.conf_dir, network)?)
}

async fn run(cli: &Cli) -> anyhow::Result<()> {
    match &cli.cmd {
        Cmd::Ls => ls(cli).await,
        Cmd::Add(a) => {
            let (net, rt) = attach(cli, a)?;
            let res = cni(cli).add(&net, &rt).await?;
            if cli.json {
                println!("{}", pretty(&res.to_version(&net.cni_version)?));
            } else {
                println!(
                    "ADD {} on {} ok (container {}, ifname {})",
                    net.name, rt.netns, rt.container_id, rt.ifname
                );
                print!("{res}");
            }
            Ok(())
        }
        Cmd::Check(a) => {
            let (net, rt) = attach(cli, a)?;
            cni(cli).check(&net, &rt).await?;
            if net.disable_check {
                println!("CHECK {}: skipped (disableCheck)", net.name);
            } else {
                println!("CHECK {} on {} ok", net.name, rt.netns);
            }
            Ok(())
        }
        Cmd::Del(a) => {
            let (net, rt) = attach(cli, a)?;
            cni(cli).del(&net, &rt).await?;
            println!("DEL {} on {} ok", net.name, rt.netns);
            Ok(())
        }
        Cmd::Status { network } => {
            let net = load(cli, network)?;
            cni(cli).status(&net).await?;
            if config::version_at_least(&net.cni_version, "1.1.0") {
                println!("STATUS {}: ready", net.name);
            } else {
                println!(
                    "STATUS {}: cniVersion {} has no STATUS; assumed ready",
                    net.name, net.cni_version
                );
            }
            Ok(())
        }
        Cmd::Gc { network, valid } => {
            let net = load(cli, network)?;
            let valid = valid
                .iter()
                .map(|v| {
                    v.split_once(':')
                        .map(|(c, i)| GcAttachment {
                            container_id: c.into(),
                            ifname: i.into(),
                        })
                        .ok_or_else(|| usage(format!("--valid {v:?}: want CONTAINERID:IFNAME")))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            cni(cli).gc(&net, &valid).await?;
            if net.disable_gc {
                println!("GC {}: skipped (disableGC)", net.name);
            } else {
                println!("GC {} ok", net.name);
            }
            Ok(())
        }
        Cmd::Netns { cmd } => match cmd {
            NetnsCmd::Add { name } => {
                let p = netns::create(&cli.netns_dir, name).await?;
                println!("{}", p.display());
                Ok(())
            }
            NetnsCmd::Del { name } => {
                netns::delete(&netns::resolve(&cli.netns_dir, name)).await?;
                Ok(())
            }
            NetnsCmd::Ls => {
                for p in netns::list(&cli.netns_dir)? {
                    println!("{}", p.display());
                }
                Ok(())
            }
        },
        Cmd::Exec { .. } => Err(usage("exec is handled before the runtime starts")),
    }
}

fn attach(cli: &Cli, a: &Attach) -> anyhow::Result<(NetworkConfigList, RuntimeConf)> {
    let args = match &a.args {
        None => Vec::new(),
        Some(s) => s
            .split(';')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| usage(format!("--args: {kv:?} is not K=V")))
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    let capability_args: Map<String, Value> = match &a.cap_args {
        None => Map::new(),
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err(usage("--cap-args must be a JSON object")),
            Err(e) => return Err(usage(format!("--cap-args: invalid JSON: {e}"))),
        },
    };
    let path = netns::resolve(&cli.netns_dir, &a.netns);
    let netns = path.display().to_string();
    let container_id = a
        .container_id
        .clone()
        .unwrap_or_else(|| default_container_id(&path));
    let net = load(cli, &a.network)?;
    Ok((
        net,
        RuntimeConf {
            container_id,
            netns,
            ifname: a.ifname.clone(),
            args,
            capability_args,
        },
    ))
}

/// Like cnitool: a stable ID derived from the netns path (FNV-1a, 64 bits).
fn default_container_id(path: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("cni-{h:016x}")
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

async fn ls(cli: &Cli) -> anyhow::Result<()> {
    let c = cni(cli);
    let dirs = invoke::split_paths(&cli.bin_dir);
    let mut out = Vec::new();
    let files = config::scan_dir(&cli.conf_dir)?;
    if files.is_empty() {
        return Err(anyhow!(no_config(&cli.conf_dir, 0)));
    }
    let invalid = files.iter().filter(|(_, parsed)| parsed.is_err()).count();
    let all_invalid = invalid == files.len();
    for (file, parsed) in files {
        let net = match parsed {
            Ok(n) => n,
            Err(e) => {
                if cli.json {
                    out.push(json!({ "file": file, "error": e.to_string() }));
                } else {
                    println!("{}: INVALID: {e}", file.display());
                }
                continue;
            }
        };
        if !cli.json {
            let mut flags = Vec::new();
            if net.disable_check {
                flags.push("disableCheck");
            }
            if net.disable_gc {
                flags.push("disableGC");
            }
            println!(
                "{} (cniVersion {}{}) from {}",
                net.name,
                net.cni_version,
                if flags.is_empty() {
                    String::new()
                } else {
                    format!(", {}", flags.join(", "))
                },
                file.display()
            );
        }
        let mut plugins = Vec::new();
        for p in &net.plugins {
            let (bin, versions) = match invoke::find_plugin(&p.plugin_type, &dirs) {
                Ok(bin) => {
                    let v = match c.version(&p.plugin_type).await {
                        Ok(v) => Ok(v.supported_versions),
                        Err(e) => Err(e.to_string()),
                    };
                    (Ok(bin), v)
                }
                Err(e) => (Err(e.to_string()), Err("not run".to_string())),
            };
            if cli.json {
                plugins.push(json!({
                    "type": p.plugin_type,
                    "binary": bin.as_ref().ok(),
                    "error": bin.as_ref().err(),
                    "supportedVersions": versions.as_ref().ok(),
                    "versionError": versions.as_ref().err(),
                    "supportsNetworkVersion": versions.as_ref().ok().map(|v| v.contains(&net.cni_version)),
                }));
            } else {
                match (&bin, &versions) {
                    (Ok(b), Ok(v)) => {
                        let note = if v.contains(&net.cni_version) {
                            ""
                        } else {
                            "  [does not support the network's cniVersion]"
                        };
                        println!(
                            "  {:<12} {}  versions: {}{note}",
                            p.plugin_type,
                            b.display(),
                            v.join(", ")
                        );
                    }
                    (Ok(b), Err(e)) => println!(
                        "  {:<12} {}  VERSION failed: {e}",
                        p.plugin_type,
                        b.display()
                    ),
                    (Err(e), _) => println!("  {:<12} MISSING: {e}", p.plugin_type),
                }
            }
        }
        if cli.json {
            out.push(json!({
                "file": file, "name": net.name, "cniVersion": net.cni_version,
                "disableCheck": net.disable_check, "disableGC": net.disable_gc, "plugins": plugins,
            }));
        }
    }
    if cli.json {
        println!("{}", pretty(&Value::Array(out)));
    }
    if all_invalid {
        return Err(anyhow!(no_config(&cli.conf_dir, invalid)));
    }
    Ok(())
}

/// Why `ls` found no network: where it looked (a newcomer knows neither the default nor that
/// runtimes often keep their config elsewhere) and what it found there.
fn no_config(dir: &Path, invalid: usize) -> String {
    let origin = if dir == Path::new(config::DEFAULT_CONF_DIR) {
        " (the default; --conf-dir or NETCONFPATH names another)"
    } else {
        " (from --conf-dir or NETCONFPATH)"
    };
    let (what, found) = if invalid > 0 {
        (
            "no valid network config",
            format!("whose {invalid} config file(s) are all invalid (listed above)"),
        )
    } else if dir.is_dir() {
        let names = config::CONF_EXTENSIONS
            .iter()
            .map(|e| format!("*.{e}"))
            .collect::<Vec<_>>()
            .join(", ");
        ("no network config", format!("which holds no {names} file"))
    } else {
        ("no network config", "which does not exist".to_string())
    };
    format!("{what}: looked in {}{origin}, {found}", dir.display())
}

fn print_trace(r: &TraceRecord) {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "=== {} {} ({}) ===",
        r.command,
        r.plugin,
        r.binary.display()
    );
    let _ = writeln!(s, "--- env");
    for (k, v) in &r.env {
        let _ = writeln!(s, "{k}={v}");
    }
    let stdin = serde_json::from_str::<Value>(&r.stdin)
        .map(|v| pretty(&v))
        .unwrap_or_else(|_| r.stdin.clone());
    let _ = writeln!(s, "--- stdin\n{stdin}");
    let stdout = serde_json::from_str::<Value>(&r.stdout)
        .map(|v| pretty(&v))
        .unwrap_or_else(|_| r.stdout.clone());
    let _ = writeln!(s, "--- stdout\n{}", stdout.trim_end());
    let _ = writeln!(s, "--- stderr\n{}", r.stderr.trim_end());
    let status = match (r.exit_code, r.signal, &r.error) {
        (_, _, Some(e)) => format!("error: {e}"),
        (Some(c), _, _) => format!("exit code {c}"),
        (None, Some(sig), _) => format!("killed by signal {sig}"),
        _ => "unknown".into(),
    };
    let _ = writeln!(
        s,
        "--- {status}, duration {:.1} ms",
        r.duration.as_secs_f64() * 1e3
    );
    eprint!("{s}");
}
