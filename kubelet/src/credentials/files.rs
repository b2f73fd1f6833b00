//! The node's default keyring: the Docker config files the Go kubelet searches
//! (`ReadDockerConfigFile` with the root dir as the preferred path). The first valid
//! `config.json` of `<root-dir>`, the working dir, `$HOME/.docker` and `/.docker` wins; only
//! when none is valid does the first valid `.dockercfg` of `<root-dir>`, the working dir,
//! `$HOME` and `/` count. An invalid file is skipped, not fatal.
//!
//! The files are read at start and again when any candidate's stat (inode, size, mtime or
//! ctime) changes, checked before each lookup: a few `stat`s per pull, no watcher.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::docker_config::{self, ConfigError, DockerConfig};
use super::keyring::{DockerKeyring, Source};

/// Where the default keyring looks, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPaths {
    /// `config.json` candidates (full paths).
    pub config_json: Vec<PathBuf>,
    /// Legacy `.dockercfg` candidates (full paths), used only when no `config.json` is valid.
    pub dockercfg: Vec<PathBuf>,
}

impl SearchPaths {
    /// The Go kubelet's list for a kubelet with root dir `root_dir`, the current working dir
    /// and `$HOME` (skipped when unset or empty).
    pub fn kubelet(root_dir: &Path) -> Self {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        Self::new(root_dir, std::env::current_dir().ok(), home)
    }

    /// The list for explicit working and home dirs.
    pub fn new(root_dir: &Path, cwd: Option<PathBuf>, home: Option<PathBuf>) -> Self {
        let mut config_json = vec![root_dir.join("config.json")];
        let mut dockercfg = vec![root_dir.join(".dockercfg")];
        if let Some(cwd) = &cwd {
            config_json.push(cwd.join("config.json"));
            dockercfg.push(cwd.join(".dockercfg"));
        }
        if let Some(home) = &home {
            config_json.push(home.join(".docker").join("config.json"));
            dockercfg.push(home.join(".dockercfg"));
        }
        config_json.push(PathBuf::from("/.docker/config.json"));
        dockercfg.push(PathBuf::from("/.dockercfg"));
        Self {
            config_json,
            dockercfg,
        }
    }

    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.config_json.iter().chain(&self.dockercfg)
    }
}

/// What identifies one version of a file; `None` when it does not exist (or cannot be read).
type Stamp = Option<(u64, u64, u64, i64, i64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

#[derive(Debug)]
struct Loaded {
    stamps: Vec<Stamp>,
    keyring: Arc<DockerKeyring>,
}

#[derive(Debug)]
struct Inner {
    paths: SearchPaths,
    loaded: Mutex<Option<Loaded>>,
}

/// The node's Docker config files as a keyring, re-read when they change.
#[derive(Clone, Debug)]
pub struct FileKeyring {
    inner: Arc<Inner>,
}

impl FileKeyring {
    /// A keyring over `paths`, read now.
    pub async fn load(paths: SearchPaths) -> Self {
        let keyring = Self {
            inner: Arc::new(Inner {
                paths,
                loaded: Mutex::new(None),
            }),
        };
        keyring.current().await;
        keyring
    }

    /// The search paths.
    pub fn paths(&self) -> &SearchPaths {
        &self.inner.paths
    }

    /// The keyring as the files are now: re-read if any candidate changed since last time.
    pub async fn current(&self) -> Arc<DockerKeyring> {
        let inner = self.inner.clone();
        match tokio::task::spawn_blocking(move || inner.refresh()).await {
            Ok(keyring) => keyring,
            Err(e) => {
                // Only a panic gets here; the last good keyring is still the best answer.
                tracing::warn!(error = %e, "re-reading docker config files");
                self.inner.cached()
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        // Each update replaces the whole value, so a poisoned lock holds a consistent one.
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cached(&self) -> Arc<DockerKeyring> {
        self.lock()
            .as_ref()
            .map(|l| l.keyring.clone())
            .unwrap_or_default()
    }

    /// Blocking: stats every candidate, re-reads when any changed. Holding the lock while
    /// reading keeps concurrent pulls from reading the same files twice.
    fn refresh(&self) -> Arc<DockerKeyring> {
        let stamps: Vec<Stamp> = self.paths.all().map(|p| stamp(p)).collect();
        let mut loaded = self.lock();
        if let Some(l) = loaded.as_ref()
            && l.stamps == stamps
        {
            return l.keyring.clone();
        }
        let keyring = Arc::new(read(&self.paths));
        *loaded = Some(Loaded {
            stamps,
            keyring: keyring.clone(),
        });
        keyring
    }
}

/// Blocking: the keyring from the first valid file, as Go's `ReadDockerConfigFile` picks it.
fn read(paths: &SearchPaths) -> DockerKeyring {
    let mut keyring = DockerKeyring::new();
    let found = first_valid(&paths.config_json, docker_config::parse_config_json)
        .or_else(|| first_valid(&paths.dockercfg, docker_config::parse_dockercfg));
    match found {
        Some((path, config)) => {
            keyring.add(Source::File(path.clone()), config);
            let registries: Vec<&str> = keyring.registries().collect();
            tracing::info!(file = %path.display(), ?registries, "read registry credentials");
        }
        None => tracing::debug!("no docker config file with registry credentials"),
    }
    keyring
}

fn first_valid(
    candidates: &[PathBuf],
    parse: fn(&[u8]) -> Result<DockerConfig, ConfigError>,
) -> Option<(PathBuf, DockerConfig)> {
    candidates.iter().find_map(|path| {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "reading docker config");
                return None;
            }
        };
        match parse(&bytes) {
            Ok(config) => Some((path.clone(), config)),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "skipping an invalid docker config");
                None
            }
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    struct Dirs {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        cwd: PathBuf,
        home: PathBuf,
    }

    fn dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let [root, cwd, home] = ["root", "cwd", "home"].map(|d| tmp.path().join(d));
        for d in [&root, &cwd, &home.join(".docker")] {
            std::fs::create_dir_all(d).unwrap();
        }
        Dirs {
            _tmp: tmp,
            root,
            cwd,
            home,
        }
    }

    impl Dirs {
        fn paths(&self) -> SearchPaths {
            SearchPaths::new(&self.root, Some(self.cwd.clone()), Some(self.home.clone()))
        }
    }

    fn config_json(user: &str) -> String {
        format!(r#"{{"auths": {{"r.io": {{"username": "{user}", "password": "p"}}}}}}"#)
    }

    fn users(k: Arc<DockerKeyring>) -> Vec<String> {
        k.lookup("r.io/app")
            .into_iter()
            .map(|a| a.username)
            .collect()
    }

    #[test]
    fn search_order_is_the_go_kubelets() {
        let p = SearchPaths::new(
            Path::new("/var/lib/kubelet"),
            Some("/work".into()),
            Some("/root".into()),
        );
        let s = |v: &[PathBuf]| {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            s(&p.config_json),
            [
                "/var/lib/kubelet/config.json",
                "/work/config.json",
                "/root/.docker/config.json",
                "/.docker/config.json"
            ]
        );
        assert_eq!(
            s(&p.dockercfg),
            [
                "/var/lib/kubelet/.dockercfg",
                "/work/.dockercfg",
                "/root/.dockercfg",
                "/.dockercfg"
            ]
        );
        let no_home = SearchPaths::new(Path::new("/k"), None, None);
        assert_eq!(
            s(&no_home.config_json),
            ["/k/config.json", "/.docker/config.json"]
        );
    }

    #[tokio::test]
    async fn first_valid_config_json_wins_then_dockercfg() {
        let d = dirs();
        std::fs::write(d.home.join(".docker/config.json"), config_json("home")).unwrap();
        std::fs::write(d.cwd.join("config.json"), "{broken").unwrap();
        std::fs::write(
            d.root.join(".dockercfg"),
            r#"{"r.io": {"username": "legacy", "password": "p"}}"#,
        )
        .unwrap();
        let k = FileKeyring::load(d.paths()).await;
        // The broken cwd file is skipped; a valid config.json beats any .dockercfg.
        assert_eq!(users(k.current().await), ["home"]);
        let m = k.current().await;
        let found = m.matches("r.io/app");
        assert_eq!(
            found[0].source,
            &Source::File(d.home.join(".docker/config.json"))
        );

        std::fs::remove_file(d.home.join(".docker/config.json")).unwrap();
        assert_eq!(users(k.current().await), ["legacy"]);
    }

    #[tokio::test]
    async fn files_are_re_read_when_they_change() {
        let d = dirs();
        let k = FileKeyring::load(d.paths()).await;
        assert!(k.current().await.is_empty());

        let file = d.root.join("config.json");
        std::fs::write(&file, config_json("one")).unwrap();
        assert_eq!(users(k.current().await), ["one"]);
        // Unchanged files: the same keyring, not a re-read.
        let a = k.current().await;
        let b = k.current().await;
        assert!(Arc::ptr_eq(&a, &b));

        // Same length and inode, new content: the mtime tells (set explicitly, since two
        // writes within one clock tick may share a timestamp).
        std::fs::write(&file, config_json("two")).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1))
            .unwrap();
        assert_eq!(users(k.current().await), ["two"]);
        // A file written elsewhere and renamed into place (a new inode).
        let tmp = d.root.join("config.json.tmp");
        std::fs::write(&tmp, config_json("three")).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        assert_eq!(users(k.current().await), ["three"]);

        std::fs::remove_file(&file).unwrap();
        assert!(k.current().await.is_empty());
    }

    #[tokio::test]
    async fn a_config_json_without_auths_still_wins() {
        let d = dirs();
        std::fs::write(d.root.join("config.json"), r#"{"credHelpers": {}}"#).unwrap();
        std::fs::write(d.cwd.join("config.json"), config_json("cwd")).unwrap();
        let k = FileKeyring::load(d.paths()).await;
        assert!(k.current().await.is_empty());
    }
}
