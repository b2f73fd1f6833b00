//! Per-test CNI networks: each [`TestNetwork`] owns a bridge name, a /24 out of
//! `10.199.0.0/16`, and its own conf dir, host-local `dataDir`, CNI cache dir and netns dir
//! under a [`Scratch`] dir. Subnets are reserved across concurrently running test binaries
//! with lock files (`/tmp/ferrolet-it-subnets/<octet>`, holding the owner's pid; a dead
//! owner's lock is taken over). On drop: the bridge and any links the test registered are
//! deleted, the dirs unmounted and removed, and the subnet released.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use ferrolet_cni::{Cni, NetworkConfigList};
use serde_json::{Value, json};

use crate::leak::LeakChecker;
use crate::scratch::Scratch;

/// Where Debian installs the reference plugins.
pub const PLUGIN_DIR: &str = "/usr/lib/cni";

const LOCK_DIR: &str = "/tmp/ferrolet-it-subnets";

/// One test's network environment.
#[derive(Debug)]
pub struct TestNetwork {
    /// Network name (also used by host-local as its data subdir).
    pub name: String,
    /// Bridge interface name (≤ 15 chars).
    pub bridge: String,
    /// Third octet of the subnet.
    pub octet: u8,
    /// `10.199.<octet>.0/24`.
    pub subnet: String,
    /// `10.199.<octet>.1`, the bridge's address.
    pub gateway: Ipv4Addr,
    pub conf_dir: PathBuf,
    pub ipam_dir: PathBuf,
    pub cache_dir: PathBuf,
    pub netns_dir: PathBuf,
    /// Extra plugin dir for fake plugins, searched before [`PLUGIN_DIR`].
    pub fake_bin_dir: PathBuf,
    links: Mutex<Vec<String>>,
    lock: PathBuf,
    scratch: Scratch,
}

impl TestNetwork {
    /// Reserve a subnet and bridge name, and create the dirs.
    pub fn new(tag: &str) -> Self {
        let (octet, lock) = reserve_octet();
        let bridge = format!("flc{octet}");
        // A bridge of that name can only be a leftover of a crashed run holding this subnet.
        if Path::new("/sys/class/net").join(&bridge).exists() {
            let _ = ip(&["link", "del", &bridge]);
        }
        let scratch = Scratch::new(&format!("cni-{tag}"));
        let root = scratch.path().to_path_buf();
        let dir = |d: &str| {
            let p = root.join(d);
            if let Err(e) = std::fs::create_dir_all(&p) {
                panic!("creating {}: {e}", p.display());
            }
            p
        };
        TestNetwork {
            name: format!("flc{octet}"),
            bridge,
            octet,
            subnet: format!("10.199.{octet}.0/24"),
            gateway: Ipv4Addr::new(10, 199, octet, 1),
            conf_dir: dir("conf"),
            ipam_dir: dir("ipam"),
            cache_dir: dir("cache"),
            netns_dir: dir("netns"),
            fake_bin_dir: dir("bin"),
            links: Mutex::new(Vec::new()),
            lock,
            scratch,
        }
    }

    /// A host port no other running test uses (`k` < 5): 30000..30004 + octet*10 belong to
    /// the CNI tests, these are the other five of this network's ten.
    pub fn host_port(&self, k: u16) -> u16 {
        assert!(k < 5, "host_port({k}): only 5 per test");
        30005 + u16::from(self.octet) * 10 + k
    }

    /// The scratch dir everything lives in.
    pub fn root(&self) -> &Path {
        self.scratch.path()
    }

    /// host-local IPAM over this network's subnet, data in [`TestNetwork::ipam_dir`].
    pub fn host_local(&self) -> Value {
        json!({
            "type": "host-local",
            "ranges": [[{ "subnet": self.subnet, "gateway": self.gateway.to_string() }]],
            "routes": [{ "dst": "0.0.0.0/0" }],
            "dataDir": self.ipam_dir,
        })
    }

    /// The bridge plugin on this network's bridge, with host-local.
    pub fn bridge_plugin(&self) -> Value {
        json!({
            "type": "bridge",
            "bridge": self.bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": self.host_local(),
        })
    }

    /// portmap, with the portMappings capability.
    pub fn portmap_plugin(&self) -> Value {
        json!({ "type": "portmap", "capabilities": { "portMappings": true }, "snat": true })
    }

    /// Write `plugins` as this network's conflist (cniVersion 1.0.0) and return it parsed.
    pub fn write_conflist(&self, plugins: Vec<Value>) -> NetworkConfigList {
        let doc = json!({ "cniVersion": "1.0.0", "name": self.name, "plugins": plugins });
        let file = self.conf_dir.join(format!("10-{}.conflist", self.name));
        self.write_conf_file(&file, &doc.to_string());
        match NetworkConfigList::from_file(&file) {
            Ok(n) => n,
            Err(e) => panic!("test conflist invalid: {e}"),
        }
    }

    /// Write an arbitrary file into the conf dir.
    pub fn write_conf_file(&self, file: &Path, contents: &str) {
        if let Err(e) = std::fs::write(file, contents) {
            panic!("writing {}: {e}", file.display());
        }
    }

    /// A CNI client for this network: fake plugin dir, then [`PLUGIN_DIR`]; own cache dir.
    pub fn cni(&self) -> Cni {
        Cni::new(
            vec![self.fake_bin_dir.clone(), PathBuf::from(PLUGIN_DIR)],
            &self.cache_dir,
        )
        .with_timeout(std::time::Duration::from_secs(60))
    }

    /// Create a named netns in this network's netns dir.
    pub async fn netns(&self, name: &str) -> PathBuf {
        match ferrolet_cni::netns::create(&self.netns_dir, name).await {
            Ok(p) => p,
            Err(e) => panic!("creating netns {name}: {e}"),
        }
    }

    /// Write an executable fake plugin (an sh script) into [`TestNetwork::fake_bin_dir`].
    pub fn fake_plugin(&self, name: &str, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        let p = self.fake_bin_dir.join(name);
        let res = std::fs::write(&p, script)
            .and_then(|()| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)));
        if let Err(e) = res {
            panic!("writing fake plugin {}: {e}", p.display());
        }
    }

    /// Delete link `name` when this network is dropped (e.g. a macvlan parent).
    pub fn own_link(&self, name: &str) {
        if let Ok(mut l) = self.links.lock() {
            l.push(name.to_string());
        }
    }

    /// A leak checker for everything this network's tests create.
    pub fn leak_checker(&self) -> LeakChecker {
        LeakChecker::new()
            .netns_dir(&self.netns_dir)
            .bridge(&self.bridge)
            .ipam_dir(&self.ipam_dir)
            .cni_cache_dir(&self.cache_dir)
            .mounts_under(self.root())
    }

    /// Lines of `iptables-save` (all tables) containing `needle`.
    pub fn iptables_lines(needle: &str) -> Vec<String> {
        let out = Command::new("iptables-save").output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains(needle))
                .map(String::from)
                .collect(),
            Err(e) => panic!("iptables-save: {e}"),
        }
    }

    /// Names of veth interfaces on the host.
    pub fn host_veths() -> Vec<String> {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "type", "veth"])
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split(": ").nth(1))
                .map(|n| n.split('@').next().unwrap_or(n).to_string())
                .collect(),
            Err(e) => panic!("ip link: {e}"),
        }
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        if let Ok(links) = self.links.lock() {
            for l in links.iter() {
                if Path::new("/sys/class/net").join(l).exists() {
                    let _ = ip(&["link", "del", l]);
                }
            }
        }
        if Path::new("/sys/class/net").join(&self.bridge).exists()
            && let Err(e) = ip(&["link", "del", &self.bridge])
        {
            eprintln!("TestNetwork: deleting bridge {}: {e}", self.bridge);
        }
        // Netns bind mounts go with the scratch dir (it unmounts what is under it).
        let _ = std::fs::remove_file(&self.lock);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
    }
}

/// Reserve a third octet in 10.199.0.0/16 for this process, via an exclusive lock file.
fn reserve_octet() -> (u8, PathBuf) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if let Err(e) = std::fs::create_dir_all(LOCK_DIR) {
        panic!("creating {LOCK_DIR}: {e}");
    }
    let pid = std::process::id();
    let start = pid.wrapping_mul(37);
    for _ in 0..1024 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Octets 1..=250: .0 and the top few are left alone.
        let octet = (start.wrapping_add(n) % 250 + 1) as u8;
        let path = Path::new(LOCK_DIR).join(octet.to_string());
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                use std::io::Write;
                let _ = write!(f, "{pid}");
                return (octet, path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                let alive = owner
                    .trim()
                    .parse::<u32>()
                    .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
                if !alive && !owner.trim().is_empty() {
                    // Stale: its owner died. Remove it; a later round may take it.
                    let _ = std::fs::remove_file(&path);
                }
            }
            Err(e) => panic!("creating {}: {e}", path.display()),
        }
    }
    panic!("no free test subnet in 10.199.0.0/16 (see {LOCK_DIR})");
}
