//! Reproducible OCI image layouts for the tests, built offline from Debian's static busybox.
//!
//! Every input that could differ between two builds is pinned (mtimes, owners, entry order,
//! gzip header, compression level, JSON key order), so building twice — on any machine with
//! the same busybox binary — gives byte-identical blobs and therefore the same digests. Tests
//! can then assert on digests, and registries see one shared base blob (every image but
//! `layers:1`, whose first layer must carry the files its later layers white out).

mod layer;
mod layout;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use layer::{Body, Layer};

/// Names of the images [`build_all`] produces, in build order.
pub const NAMES: &[&str] = &["busybox", "user", "entry", "layers", "httpd", "big"];

/// Tag every test image is published under.
pub const TAG: &str = "1";

/// Size of the single file in `big:1`'s extra layer.
pub const BIG_FILE_SIZE: u64 = 64 << 20;

/// Path (inside the rootfs) of that file.
pub const BIG_FILE_PATH: &str = "big.bin";

const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const BASE_PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                           nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const BASE_GROUP: &str = "root:x:0:\nnobody:x:65534:\n";
const APP_ID: u64 = 1000;
// Level 6 is zlib's default; pinning it keeps digests stable if flate2's default ever moves.
const LEVEL: u32 = 6;

/// One image written to its own OCI layout directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltImage {
    /// Repository name, e.g. `busybox`.
    pub name: String,
    /// Tag, recorded as the manifest's `org.opencontainers.image.ref.name` in `index.json`.
    pub tag: String,
    /// The OCI layout directory (`<out>/<name>`).
    pub dir: PathBuf,
    /// `sha256:<hex>` of the image manifest.
    pub manifest_digest: String,
    /// `sha256:<hex>` of the image config.
    pub config_digest: String,
    /// `sha256:<hex>` of each compressed layer blob, base layer first.
    pub layer_digests: Vec<String>,
    /// `sha256:<hex>` of each uncompressed layer tar, in the same order.
    pub diff_ids: Vec<String>,
    /// Bytes of manifest, config and layer blobs together.
    pub size: u64,
}

impl BuiltImage {
    /// The `name:tag` reference, e.g. `busybox:1`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }
}

/// Why a test image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name is not one of [`NAMES`].
    #[error("unknown test image {0:?} (known: {known})", known = NAMES.join(", "))]
    UnknownImage(String),
    /// A filesystem or archive operation failed.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `busybox --list` could not be run or failed.
    #[error("{} --list: {reason}", .path.display())]
    BusyboxList {
        /// The busybox binary.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A manifest, config or index could not be serialised.
    #[error("encoding {what}: {source}")]
    Json {
        /// Which document.
        what: &'static str,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// oci-spec refused a descriptor, manifest or index we built.
    #[error("building {what}: {source}")]
    Spec {
        /// Which document.
        what: &'static str,
        /// The underlying error.
        source: oci_spec::OciSpecError,
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { what, path, source }
}

/// Builds every image in [`NAMES`] into `<out>/<name>`.
pub fn build_all(out: &Path, busybox: &Path) -> Result<Vec<BuiltImage>, Error> {
    let base = Base::load(busybox)?;
    NAMES
        .iter()
        .map(|name| build_with(&base, name, out))
        .collect()
}

/// Builds the one image `name` (see [`NAMES`]) into `<out>/<name>`.
pub fn build(name: &str, out: &Path, busybox: &Path) -> Result<BuiltImage, Error> {
    // Reject typos before paying for `busybox --list` and reading the binary.
    if !NAMES.contains(&name) {
        return Err(Error::UnknownImage(name.to_owned()));
    }
    build_with(&Base::load(busybox)?, name, out)
}

/// The busybox binary and the applet names it reports; every image starts from these.
struct Base {
    binary: Vec<u8>,
    applets: Vec<String>,
}

impl Base {
    fn load(path: &Path) -> Result<Self, Error> {
        let list_err = |reason: String| Error::BusyboxList {
            path: path.to_path_buf(),
            reason,
        };
        let output = Command::new(path)
            .arg("--list")
            .output()
            .map_err(|e| list_err(e.to_string()))?;
        if !output.status.success() {
            return Err(list_err(format!("exited with {}", output.status)));
        }
        let stdout = String::from_utf8(output.stdout).map_err(|e| list_err(e.to_string()))?;
        let mut applets: Vec<String> = stdout
            .lines()
            .map(str::trim)
            .filter(|a| !a.is_empty() && *a != "busybox")
            .map(str::to_owned)
            .collect();
        // Applet names become paths; refuse anything that could escape /bin.
        if let Some(bad) = applets
            .iter()
            .find(|a| a.contains('/') || *a == "." || *a == "..")
        {
            return Err(list_err(format!("unusable applet name {bad:?}")));
        }
        if applets.is_empty() {
            return Err(list_err("printed no applets".to_owned()));
        }
        applets.sort();
        applets.dedup();
        let binary = fs::read(path).map_err(io_err("reading", path))?;
        Ok(Self { binary, applets })
    }

    /// The shared base layer's contents.
    fn rootfs(&self) -> Layer<'_> {
        let mut layer = Layer::new("busybox base", LEVEL);
        for d in ["bin", "dev", "etc", "home", "proc", "sys", "var"] {
            layer.dir(d, 0o755, 0);
        }
        layer.dir("root", 0o700, 0);
        layer.dir("tmp", 0o1777, 0);
        layer.file("bin/busybox", 0o755, 0, Cow::Borrowed(&self.binary));
        for applet in &self.applets {
            layer.symlink(&format!("bin/{applet}"), "busybox");
        }
        layer.text("etc/passwd", BASE_PASSWD);
        layer.text("etc/group", BASE_GROUP);
        layer
    }
}

/// Process defaults recorded in the image config (the OCI `config` object).
#[derive(Serialize, Default)]
#[serde(rename_all = "PascalCase")]
struct RunConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    exposed_ports: BTreeMap<&'static str, Empty>,
    env: Vec<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    entrypoint: Vec<&'static str>,
    cmd: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    working_dir: Option<&'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<&'static str, &'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_signal: Option<&'static str>,
}

/// Serialises as `{}`, which is how OCI spells set members such as exposed ports.
#[derive(Serialize)]
struct Empty {}

fn shell_config() -> RunConfig {
    RunConfig {
        env: vec![PATH_ENV],
        cmd: vec!["sh"],
        ..RunConfig::default()
    }
}

/// Layers (bottom first) and config of the image `name`.
fn define<'a>(base: &'a Base, name: &str) -> Result<(Vec<Layer<'a>>, RunConfig), Error> {
    let image = match name {
        "busybox" => (vec![base.rootfs()], shell_config()),
        "user" => {
            let mut layer = Layer::new("add user app", LEVEL);
            layer.dir("etc", 0o755, 0);
            let passwd = format!("{BASE_PASSWD}app:x:{APP_ID}:{APP_ID}:app:/home/app:/bin/sh\n");
            layer.file("etc/passwd", 0o644, 0, Cow::Owned(passwd.into_bytes()));
            let group = format!("{BASE_GROUP}app:x:{APP_ID}:\n");
            layer.file("etc/group", 0o644, 0, Cow::Owned(group.into_bytes()));
            layer.dir("home", 0o755, 0);
            layer.dir("home/app", 0o755, APP_ID);
            (
                vec![base.rootfs(), layer],
                RunConfig {
                    user: Some("app"),
                    ..shell_config()
                },
            )
        }
        "entry" => {
            let mut layer = Layer::new("add /work", LEVEL);
            layer.dir("work", 0o755, 0);
            let config = RunConfig {
                entrypoint: vec!["/bin/echo", "entry"],
                cmd: vec!["default-arg"],
                env: vec![PATH_ENV, "GREETING=hello", "FERROLET_IMAGE=entry"],
                working_dir: Some("/work"),
                stop_signal: Some("SIGUSR1"),
                labels: BTreeMap::from([
                    ("org.ferrolet.test", "entry"),
                    ("maintainer", "ferrolet"),
                ]),
                exposed_ports: BTreeMap::from([("8080/tcp", Empty {})]),
                ..RunConfig::default()
            };
            (vec![base.rootfs(), layer], config)
        }
        "layers" => {
            // Deliberately not the shared base blob: the first layer must itself carry data so
            // that the later whiteouts have something to hide.
            let mut first = base.rootfs();
            first.created_by = "busybox base + /data + /olddir".to_owned();
            first.dir("data", 0o755, 0);
            first.text("data/keep.txt", "keep\n");
            first.text("data/remove-me.txt", "removed by layer 3\n");
            first.dir("olddir", 0o755, 0);
            first.text("olddir/a.txt", "a\n");
            first.text("olddir/b.txt", "b\n");
            let mut second = Layer::new("add /data/layer2.txt", LEVEL);
            second.dir("data", 0o755, 0);
            second.text("data/layer2.txt", "layer 2\n");
            let mut third = Layer::new("whiteout remove-me.txt, make /olddir opaque", LEVEL);
            third.dir("data", 0o755, 0);
            third.text("data/.wh.remove-me.txt", "");
            third.dir("olddir", 0o755, 0);
            third.text("olddir/.wh..wh..opq", "");
            third.text("olddir/new.txt", "new\n");
            (vec![first, second, third], shell_config())
        }
        "httpd" => {
            let mut layer = Layer::new("add /www", LEVEL);
            layer.dir("www", 0o755, 0);
            layer.text("www/index.html", "ferrolet httpd ok\n");
            let config = RunConfig {
                cmd: vec!["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"],
                exposed_ports: BTreeMap::from([("8080/tcp", Empty {})]),
                ..shell_config()
            };
            (vec![base.rootfs(), layer], config)
        }
        "big" => {
            // Random data does not compress, so storing it is as small as deflating it and
            // far faster.
            let mut layer = Layer::new("add 64 MiB of PRNG noise", 0);
            layer.insert(BIG_FILE_PATH, 0o644, 0, Body::Noise(BIG_FILE_SIZE));
            (vec![base.rootfs(), layer], shell_config())
        }
        other => return Err(Error::UnknownImage(other.to_owned())),
    };
    Ok(image)
}

fn build_with(base: &Base, name: &str, out: &Path) -> Result<BuiltImage, Error> {
    let (layers, config) = define(base, name)?;
    layout::write_image(out.join(name), name, &layers, &config)
}
