//! A container's mounts: the CRI bind mounts (with their propagation), the image volumes
//! (the mounts of their read-only views, as the snapshotter gives them), the sandbox's shared
//! files (/etc/hostname, /etc/hosts, /etc/resolv.conf, /dev/shm) unless the request mounts
//! those paths itself, and the default pseudo-filesystems they do not shadow.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use ferrolet_proto::cri::{self, MountPropagation};
use oci_spec::runtime::{Mount, Spec};

use super::OciError;
use super::cgroups::unescape;
use crate::sandbox::files::SandboxFiles;

/// The read-only view of an image volume: the request's `index`-th mount, and the mounts
/// of its snapshot (one overlay or bind mount with the overlayfs snapshotter).
#[derive(Clone, Debug)]
pub struct ImageVolume {
    /// Index of the CRI mount naming the image.
    pub index: usize,
    /// The view's mounts.
    pub mounts: Vec<ferrolet_proto::containerd::types::Mount>,
}

/// The most mount(2) takes as its data argument (one page).
const MOUNT_DATA_MAX: usize = 4096;

/// What a mount shows.
enum Source {
    /// A host path, bind-mounted.
    Host(PathBuf),
    /// An image volume's view, mounted as its snapshotter says.
    Image(Vec<ferrolet_proto::containerd::types::Mount>),
}

/// A mount to make, from the request or from the sandbox.
struct BindRequest {
    /// Request field for errors (`mounts[2]`), or where the mount comes from.
    field: String,
    container_path: String,
    source: Source,
    readonly: bool,
    propagation: MountPropagation,
}

/// Lexically cleaned absolute path (`//a/./b/../c` → `/a/c`), for comparing destinations.
fn clean(path: &str) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Depth of a destination; shallower mounts go first so they never hide deeper ones.
fn depth(path: &Path) -> usize {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

fn from_request(
    i: usize,
    m: &cri::Mount,
    image_volumes: &[ImageVolume],
) -> Result<BindRequest, OciError> {
    let field = format!("mounts[{i}]");
    let image = match &m.image {
        None => None,
        Some(img) => {
            let view = image_volumes.iter().find(|v| v.index == i).ok_or_else(|| {
                OciError::invalid(
                    format!("{field}.image"),
                    &img.image,
                    "no view of the image was made",
                )
            })?;
            if !m.readonly {
                return Err(OciError::invalid(
                    format!("{field}.readonly"),
                    "false",
                    "an image volume is mounted read-only",
                ));
            }
            if m.propagation != MountPropagation::PropagationPrivate as i32 {
                return Err(OciError::invalid(
                    format!("{field}.propagation"),
                    m.propagation.to_string(),
                    "an image volume is mounted private",
                ));
            }
            Some(view.mounts.clone())
        }
    };
    if m.container_path.is_empty() {
        return Err(OciError::invalid(
            format!("{field}.container_path"),
            "",
            "must not be empty",
        ));
    }
    if !m.container_path.starts_with('/') {
        return Err(OciError::invalid(
            format!("{field}.container_path"),
            &m.container_path,
            "must be an absolute path",
        ));
    }
    let source = match image {
        Some(mounts) => Source::Image(mounts),
        None if m.host_path.is_empty() => {
            return Err(OciError::invalid(
                format!("{field}.host_path"),
                "",
                "must not be empty",
            ));
        }
        None => Source::Host(PathBuf::from(&m.host_path)),
    };
    if m.recursive_read_only {
        let why = if m.readonly {
            "recursive read-only mounts are not supported by this runtime"
        } else {
            "recursive read-only conflicts with a writable mount"
        };
        return Err(OciError::invalid(
            format!("{field}.recursive_read_only"),
            "true",
            why,
        ));
    }
    let propagation = MountPropagation::try_from(m.propagation).map_err(|_| {
        OciError::invalid(
            format!("{field}.propagation"),
            m.propagation.to_string(),
            "unknown propagation",
        )
    })?;
    Ok(BindRequest {
        field,
        container_path: m.container_path.clone(),
        source,
        readonly: m.readonly,
        propagation,
    })
}

/// The OCI mount of an image volume's view: its one mount as the snapshotter gives it (a
/// bind of the single layer, or an overlay of the layers with no upper dir), read-only and
/// private.
fn image_volume_mount(
    req: &BindRequest,
    view: &[ferrolet_proto::containerd::types::Mount],
) -> Result<Mount, OciError> {
    let [one] = view else {
        return Err(OciError::invalid(
            format!("{}.image", req.field),
            format!("{} mounts", view.len()),
            "the image's view must be one mount",
        ));
    };
    let mut options: Vec<String> = one
        .options
        .iter()
        .filter(|o| !matches!(o.as_str(), "rw" | "ro"))
        .cloned()
        .collect();
    if one.r#type == "bind" && !options.iter().any(|o| o == "rbind" || o == "bind") {
        options.push("rbind".into());
    }
    // runc hands the options that are not flags (`lowerdir=…`) to mount(2) as one string,
    // which the kernel takes up to a page long: an image of very many layers cannot be
    // mounted this way, and is refused here rather than when the container starts.
    let data: usize = options.iter().map(|o| o.len() + 1).sum();
    if data >= MOUNT_DATA_MAX {
        return Err(OciError::invalid(
            format!("{}.image", req.field),
            format!("{data} bytes of {} mount options", one.r#type),
            format!(
                "the image has too many layers to mount (the kernel takes {MOUNT_DATA_MAX} bytes of options)"
            ),
        ));
    }
    options.extend(["rprivate".to_string(), "ro".to_string()]);
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(&req.container_path))
        .set_typ(Some(one.r#type.clone()))
        .set_source(Some(PathBuf::from(&one.source)))
        .set_options(Some(options));
    Ok(m)
}

/// The sandbox's files a container gets, skipping paths the request mounts itself and files
/// that do not exist (so a missing file never turns into a created directory).
fn sandbox_mounts(
    files: &SandboxFiles,
    requested: &HashSet<PathBuf>,
    readonly_rootfs: bool,
) -> Vec<BindRequest> {
    let shm = files
        .shm
        .clone()
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    [
        ("/etc/hostname", files.hostname.clone(), readonly_rootfs),
        ("/etc/hosts", files.hosts.clone(), readonly_rootfs),
        (
            "/etc/resolv.conf",
            files.resolv_conf.clone(),
            readonly_rootfs,
        ),
        ("/dev/shm", shm, false),
    ]
    .into_iter()
    .filter(|(dest, host, _)| !requested.contains(Path::new(dest)) && host.exists())
    .map(|(dest, host, readonly)| BindRequest {
        field: format!("sandbox file {dest}"),
        container_path: dest.to_string(),
        source: Source::Host(host),
        readonly,
        propagation: MountPropagation::PropagationPrivate,
    })
    .collect()
}

/// One line of /proc/self/mountinfo: where, and its propagation tags.
struct MountInfo {
    mount_point: PathBuf,
    optional: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mount_point = unescape(fields.get(4)?);
            let sep = fields.iter().position(|f| *f == "-")?;
            let optional = fields.get(6..sep)?.iter().map(|s| s.to_string()).collect();
            Some(MountInfo {
                mount_point: PathBuf::from(mount_point),
                optional,
            })
        })
        .collect()
}

/// The mount `path` lives on: the deepest mount point containing it (the last one listed when
/// several are stacked).
fn mount_of<'a>(mounts: &'a [MountInfo], path: &Path) -> Option<&'a MountInfo> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.mount_point))
        .fold(None, |best: Option<&MountInfo>, m| match best {
            Some(b) if depth(&b.mount_point) > depth(&m.mount_point) => Some(b),
            _ => Some(m),
        })
}

/// Checks the host side of a propagating mount can propagate at all: shared for
/// bidirectional, shared or slave for host-to-container.
fn check_propagation(
    req: &BindRequest,
    source: &Path,
    mounts: &[MountInfo],
) -> Result<(), OciError> {
    let (wanted, prefixes): (&str, &[&str]) = match req.propagation {
        MountPropagation::PropagationPrivate => return Ok(()),
        MountPropagation::PropagationBidirectional => ("shared", &["shared:"]),
        MountPropagation::PropagationHostToContainer => {
            ("shared or slave", &["shared:", "master:"])
        }
    };
    let Some(info) = mount_of(mounts, source) else {
        return Err(OciError::invalid(
            format!("{}.host_path", req.field),
            source.to_string_lossy(),
            "cannot find the mount it lives on",
        ));
    };
    if info
        .optional
        .iter()
        .any(|o| prefixes.iter().any(|p| o.starts_with(p)))
    {
        return Ok(());
    }
    Err(OciError::invalid(
        format!("{}.propagation", req.field),
        req.propagation.as_str_name(),
        format!(
            "{} is on mount {} which is not a {wanted} mount",
            source.display(),
            info.mount_point.display()
        ),
    ))
}

/// The host side of a bind mount: created as a directory when missing (as containerd does),
/// symlinks resolved so the kernel binds what the user named.
fn prepare_source(path: &PathBuf) -> Result<PathBuf, OciError> {
    let io = |what: &'static str| {
        move |source| OciError::Io {
            what,
            path: path.clone(),
            source,
        }
    };
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(path).map_err(io("creating the mount source"))?;
        }
        Err(e) => return Err(io("checking the mount source")(e)),
    }
    std::fs::canonicalize(path).map_err(io("resolving the mount source"))
}

/// Adds the request's and the sandbox's bind mounts and drops default mounts they replace.
pub(crate) fn apply(
    spec: &mut Spec,
    config: &cri::ContainerConfig,
    image_volumes: &[ImageVolume],
    files: &SandboxFiles,
    readonly_rootfs: bool,
) -> Result<(), OciError> {
    let mut binds = config
        .mounts
        .iter()
        .enumerate()
        .map(|(i, m)| from_request(i, m, image_volumes))
        .collect::<Result<Vec<_>, _>>()?;
    let requested: HashSet<PathBuf> = binds.iter().map(|b| clean(&b.container_path)).collect();
    binds.extend(sandbox_mounts(files, &requested, readonly_rootfs));
    binds.sort_by_key(|b| depth(&clean(&b.container_path)));

    let destinations: HashSet<PathBuf> = binds.iter().map(|b| clean(&b.container_path)).collect();
    let own_dev = destinations.contains(Path::new("/dev"));
    let mut mounts: Vec<Mount> = spec
        .mounts()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            let dest = clean(&m.destination().to_string_lossy());
            let under_own_dev = own_dev && dest.starts_with("/dev");
            !(destinations.contains(&dest) || under_own_dev)
        })
        .collect();

    let needs_mountinfo = binds
        .iter()
        .any(|b| b.propagation != MountPropagation::PropagationPrivate);
    let mountinfo = if needs_mountinfo {
        let text =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| OciError::Io {
                what: "reading",
                path: "/proc/self/mountinfo".into(),
                source,
            })?;
        parse_mountinfo(&text)
    } else {
        Vec::new()
    };

    let mut rootfs_propagation: Option<&str> = None;
    for b in &binds {
        let host_path = match &b.source {
            Source::Host(path) => path,
            Source::Image(view) => {
                mounts.push(image_volume_mount(b, view)?);
                continue;
            }
        };
        let source = prepare_source(host_path)?;
        check_propagation(b, &source, &mountinfo)?;
        let propagation = match b.propagation {
            MountPropagation::PropagationPrivate => "rprivate",
            MountPropagation::PropagationBidirectional => {
                rootfs_propagation = Some("rshared");
                "rshared"
            }
            MountPropagation::PropagationHostToContainer => {
                if rootfs_propagation != Some("rshared") {
                    rootfs_propagation = Some("rslave");
                }
                "rslave"
            }
        };
        let mode = if b.readonly { "ro" } else { "rw" };
        let mut m = Mount::default();
        m.set_destination(PathBuf::from(&b.container_path))
            .set_typ(Some("bind".into()))
            .set_source(Some(source))
            .set_options(Some(vec!["rbind".into(), propagation.into(), mode.into()]));
        mounts.push(m);
    }
    spec.set_mounts(Some(mounts));
    if let (Some(p), Some(l)) = (rootfs_propagation, spec.linux_mut()) {
        l.set_rootfs_propagation(Some(p.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::super::defaults::default_spec;
    use super::*;

    fn files(dir: &Path, shm: Option<PathBuf>) -> SandboxFiles {
        for f in ["hostname", "hosts", "resolv.conf"] {
            std::fs::write(dir.join(f), "x\n").unwrap();
        }
        SandboxFiles {
            dir: dir.to_path_buf(),
            hostname: dir.join("hostname"),
            hosts: dir.join("hosts"),
            resolv_conf: dir.join("resolv.conf"),
            shm,
        }
    }

    fn bind(host: &Path, dest: &str, readonly: bool, p: MountPropagation) -> cri::Mount {
        cri::Mount {
            container_path: dest.into(),
            host_path: host.to_string_lossy().into_owned(),
            readonly,
            propagation: p as i32,
            ..Default::default()
        }
    }

    fn find<'a>(spec: &'a Spec, dest: &str) -> Option<&'a Mount> {
        spec.mounts()
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.destination() == Path::new(dest))
    }

    fn options(m: &Mount) -> Vec<String> {
        m.options().clone().unwrap()
    }

    #[test]
    fn image_volumes_mount_their_views_read_only() {
        use ferrolet_proto::containerd::types::Mount as CdMount;
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path(), None);
        let image = |path: &str| cri::Mount {
            container_path: path.into(),
            image: Some(cri::ImageSpec {
                image: "tools:1".into(),
                ..Default::default()
            }),
            readonly: true,
            ..Default::default()
        };
        let config = cri::ContainerConfig {
            mounts: vec![image("/layers"), image("/one")],
            ..Default::default()
        };
        let views = [
            ImageVolume {
                index: 0,
                mounts: vec![CdMount {
                    r#type: "overlay".into(),
                    source: "overlay".into(),
                    target: String::new(),
                    options: vec!["index=off".into(), "lowerdir=/s/2/fs:/s/1/fs".into()],
                }],
            },
            ImageVolume {
                index: 1,
                mounts: vec![CdMount {
                    r#type: "bind".into(),
                    source: "/s/1/fs".into(),
                    target: String::new(),
                    options: vec!["ro".into(), "rbind".into()],
                }],
            },
        ];
        let mut spec = default_spec();
        apply(&mut spec, &config, &views, &f, false).unwrap();
        let m = find(&spec, "/layers").unwrap();
        assert_eq!(m.typ().as_deref(), Some("overlay"));
        assert_eq!(m.source().as_deref(), Some(Path::new("overlay")));
        assert_eq!(
            options(m),
            ["index=off", "lowerdir=/s/2/fs:/s/1/fs", "rprivate", "ro"]
        );
        let m = find(&spec, "/one").unwrap();
        assert_eq!(m.typ().as_deref(), Some("bind"));
        assert_eq!(options(m), ["rbind", "rprivate", "ro"]);

        // So many layers that the overlay's options pass a page: refused.
        let mut many = views.clone();
        many[0].mounts[0].options = vec![format!("lowerdir={}", "/s/123456/fs:".repeat(400))];
        let err = apply(&mut default_spec(), &config, &many, &f, false).unwrap_err();
        assert!(err.to_string().contains("too many layers"), "{err}");

        // No view made for it, or writable: refused.
        let err = apply(&mut default_spec(), &config, &views[..1], &f, false).unwrap_err();
        assert!(err.to_string().contains("mounts[1].image"), "{err}");
        let mut writable = config.clone();
        writable.mounts[0].readonly = false;
        let err = apply(&mut default_spec(), &writable, &views, &f, false).unwrap_err();
        assert!(err.to_string().contains("mounts[0].readonly"), "{err}");
    }

    #[test]
    fn request_and_sandbox_mounts() {
        let tmp = tempfile::tempdir().unwrap();
        let shm = tmp.path().join("shm");
        std::fs::create_dir(&shm).unwrap();
        let f = files(tmp.path(), Some(shm.clone()));
        let data = tmp.path().join("data");
        let missing = tmp.path().join("made/on/demand");
        let config = cri::ContainerConfig {
            mounts: vec![
                bind(
                    &data,
                    "/data/deep/er",
                    true,
                    MountPropagation::PropagationPrivate,
                ),
                bind(
                    &missing,
                    "/made",
                    false,
                    MountPropagation::PropagationPrivate,
                ),
            ],
            ..Default::default()
        };
        let mut spec = default_spec();
        apply(&mut spec, &config, &[], &f, false).unwrap();

        let m = find(&spec, "/data/deep/er").unwrap();
        assert_eq!(m.typ().as_deref(), Some("bind"));
        assert_eq!(options(m), ["rbind", "rprivate", "ro"]);
        assert_eq!(
            m.source().as_deref(),
            Some(data.canonicalize().unwrap().as_path())
        );
        assert!(missing.is_dir(), "missing host paths are created");
        assert_eq!(
            options(find(&spec, "/made").unwrap()),
            ["rbind", "rprivate", "rw"]
        );

        for (dest, host) in [
            ("/etc/hostname", &f.hostname),
            ("/etc/hosts", &f.hosts),
            ("/etc/resolv.conf", &f.resolv_conf),
            ("/dev/shm", &shm),
        ] {
            let m = find(&spec, dest).unwrap();
            assert_eq!(
                m.source().as_deref(),
                Some(host.canonicalize().unwrap().as_path())
            );
            assert_eq!(options(m), ["rbind", "rprivate", "rw"], "{dest}");
        }
        // The default /dev/shm tmpfs gave way to the sandbox's.
        let shms: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.destination() == Path::new("/dev/shm"))
            .collect();
        assert_eq!(shms.len(), 1);
        assert!(find(&spec, "/proc").is_some());

        // Shallow mounts first among the binds.
        let order: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.typ().as_deref() == Some("bind"))
            .map(|m| depth(m.destination()))
            .collect();
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
        assert!(
            spec.linux()
                .as_ref()
                .unwrap()
                .rootfs_propagation()
                .is_none()
        );
    }

    #[test]
    fn readonly_rootfs_makes_etc_files_readonly_and_requests_win() {
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path(), None);
        let own_hosts = tmp.path().join("myhosts");
        std::fs::write(&own_hosts, "1.2.3.4 x\n").unwrap();
        let config = cri::ContainerConfig {
            mounts: vec![bind(
                &own_hosts,
                "/etc//hosts",
                false,
                MountPropagation::PropagationPrivate,
            )],
            ..Default::default()
        };
        let mut spec = default_spec();
        apply(&mut spec, &config, &[], &f, true).unwrap();
        assert_eq!(
            options(find(&spec, "/etc/hostname").unwrap()),
            ["rbind", "rprivate", "ro"]
        );
        let hosts: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| clean(&m.destination().to_string_lossy()) == Path::new("/etc/hosts"))
            .collect();
        assert_eq!(hosts.len(), 1);
        assert_eq!(hosts[0].source().as_deref(), Some(own_hosts.as_path()));
        // Host IPC: the node's /dev/shm, writable.
        let m = find(&spec, "/dev/shm").unwrap();
        assert_eq!(m.source().as_deref(), Some(Path::new("/dev/shm")));
        assert_eq!(m.typ().as_deref(), Some("bind"));
    }

    #[test]
    fn a_dev_mount_replaces_everything_under_dev() {
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path(), None);
        let config = cri::ContainerConfig {
            mounts: vec![bind(
                tmp.path(),
                "/dev",
                false,
                MountPropagation::PropagationPrivate,
            )],
            ..Default::default()
        };
        let mut spec = default_spec();
        apply(&mut spec, &config, &[], &f, false).unwrap();
        let devs: Vec<_> = spec
            .mounts()
            .as_ref()
            .unwrap()
            .iter()
            .filter(|m| m.destination().starts_with("/dev"))
            .map(|m| {
                let dest = m.destination().to_string_lossy().into_owned();
                (dest, m.typ().clone().unwrap_or_default())
            })
            .collect();
        // The default pts, mqueue and shm mounts are gone; the sandbox's shm still goes on top.
        assert_eq!(
            devs,
            [
                ("/dev".into(), "bind".into()),
                ("/dev/shm".into(), "bind".into())
            ]
        );
    }

    #[test]
    fn symlinked_sources_are_resolved() {
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path(), None);
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let config = cri::ContainerConfig {
            mounts: vec![bind(
                &link,
                "/v",
                false,
                MountPropagation::PropagationPrivate,
            )],
            ..Default::default()
        };
        let mut spec = default_spec();
        apply(&mut spec, &config, &[], &f, false).unwrap();
        assert_eq!(
            find(&spec, "/v").unwrap().source().as_deref(),
            Some(real.canonicalize().unwrap().as_path())
        );
    }

    #[test]
    fn bad_requests_are_invalid() {
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path(), None);
        let cases = [
            (
                cri::Mount {
                    container_path: "/x".into(),
                    ..Default::default()
                },
                "mounts[1].host_path \"\": must not be empty",
            ),
            (
                cri::Mount {
                    container_path: "rel".into(),
                    host_path: "/tmp".into(),
                    ..Default::default()
                },
                "mounts[1].container_path \"rel\": must be an absolute path",
            ),
            (
                cri::Mount {
                    container_path: "/x".into(),
                    host_path: "/tmp".into(),
                    readonly: true,
                    recursive_read_only: true,
                    ..Default::default()
                },
                "mounts[1].recursive_read_only \"true\": recursive read-only mounts are not supported by this runtime",
            ),
            (
                cri::Mount {
                    container_path: "/x".into(),
                    host_path: "/tmp".into(),
                    propagation: 9,
                    ..Default::default()
                },
                "mounts[1].propagation \"9\": unknown propagation",
            ),
        ];
        for (bad, want) in cases {
            let config = cri::ContainerConfig {
                mounts: vec![
                    bind(
                        tmp.path(),
                        "/ok",
                        false,
                        MountPropagation::PropagationPrivate,
                    ),
                    bad,
                ],
                ..Default::default()
            };
            let err = apply(&mut default_spec(), &config, &[], &f, false).unwrap_err();
            assert_eq!(err.to_string(), want);
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
        }
    }

    #[test]
    fn mountinfo_parsing_and_lookup() {
        let text = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                    27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n\
                    90 27 0:50 / /mnt/with\\040space rw shared:7 - tmpfs none rw\n\
                    91 27 0:51 / /mnt/slave rw master:3 - tmpfs none rw\n\
                    92 91 0:52 / /mnt/slave rw shared:9 - tmpfs none rw\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 5);
        let m = mount_of(&mounts, Path::new("/mnt/with space/a/b")).unwrap();
        assert_eq!(m.mount_point, Path::new("/mnt/with space"));
        assert_eq!(m.optional, ["shared:7"]);
        assert_eq!(
            mount_of(&mounts, Path::new("/usr/bin"))
                .unwrap()
                .mount_point,
            Path::new("/")
        );
        // Stacked: the topmost (last) wins.
        assert_eq!(
            mount_of(&mounts, Path::new("/mnt/slave/x"))
                .unwrap()
                .optional,
            ["shared:9"]
        );
        assert_eq!(
            mount_of(&mounts, Path::new("/mnt/withx"))
                .unwrap()
                .mount_point,
            Path::new("/")
        );
    }

    #[test]
    fn propagation_needs_a_matching_host_mount() {
        let mounts = parse_mountinfo(
            "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
             2 1 0:5 / /shared rw shared:1 - tmpfs t rw\n\
             3 1 0:6 / /slave rw master:1 - tmpfs t rw\n",
        );
        let req = |p| BindRequest {
            field: "mounts[0]".into(),
            container_path: "/c".into(),
            source: Source::Host("/x".into()),
            readonly: false,
            propagation: p,
        };
        let bi = req(MountPropagation::PropagationBidirectional);
        let h2c = req(MountPropagation::PropagationHostToContainer);
        assert!(check_propagation(&bi, Path::new("/shared/a"), &mounts).is_ok());
        assert!(check_propagation(&h2c, Path::new("/shared/a"), &mounts).is_ok());
        assert!(check_propagation(&h2c, Path::new("/slave/a"), &mounts).is_ok());
        let err = check_propagation(&bi, Path::new("/slave/a"), &mounts).unwrap_err();
        assert!(err.to_string().contains("not a shared mount"), "{err}");
        assert!(check_propagation(&h2c, Path::new("/private"), &mounts).is_err());
        let private = req(MountPropagation::PropagationPrivate);
        assert!(check_propagation(&private, Path::new("/private"), &[]).is_ok());
    }

    #[test]
    fn propagating_mounts_set_rootfs_propagation() {
        // A real shared and a slave mount: tests run as root.
        let tmp = tempfile::tempdir().unwrap();
        let f = files(tmp.path(), None);
        let shared = tmp.path().join("shared");
        let slave = tmp.path().join("slave");
        std::fs::create_dir(&shared).unwrap();
        std::fs::create_dir(&slave).unwrap();
        use nix::mount::{MntFlags, MsFlags, mount, umount2};
        let none: Option<&str> = None;
        mount(Some(&shared), &shared, none, MsFlags::MS_BIND, none).unwrap();
        mount(none, &shared, none, MsFlags::MS_SHARED, none).unwrap();
        mount(Some(&shared), &slave, none, MsFlags::MS_BIND, none).unwrap();
        mount(none, &slave, none, MsFlags::MS_SLAVE, none).unwrap();
        let result = (|| {
            let config = cri::ContainerConfig {
                mounts: vec![bind(
                    &slave,
                    "/s",
                    false,
                    MountPropagation::PropagationHostToContainer,
                )],
                ..Default::default()
            };
            let mut spec = default_spec();
            apply(&mut spec, &config, &[], &f, false)?;
            assert_eq!(
                options(find(&spec, "/s").unwrap()),
                ["rbind", "rslave", "rw"]
            );
            let l = spec.linux().as_ref().unwrap();
            assert_eq!(l.rootfs_propagation().as_deref(), Some("rslave"));

            let config = cri::ContainerConfig {
                mounts: vec![
                    bind(
                        &slave,
                        "/s",
                        false,
                        MountPropagation::PropagationHostToContainer,
                    ),
                    bind(
                        &shared,
                        "/b",
                        false,
                        MountPropagation::PropagationBidirectional,
                    ),
                ],
                ..Default::default()
            };
            let mut spec = default_spec();
            apply(&mut spec, &config, &[], &f, false)?;
            assert_eq!(
                options(find(&spec, "/b").unwrap()),
                ["rbind", "rshared", "rw"]
            );
            let l = spec.linux().as_ref().unwrap();
            assert_eq!(l.rootfs_propagation().as_deref(), Some("rshared"));

            // A bidirectional mount of a slave-only path is refused.
            let config = cri::ContainerConfig {
                mounts: vec![bind(
                    &slave,
                    "/s",
                    false,
                    MountPropagation::PropagationBidirectional,
                )],
                ..Default::default()
            };
            let err = apply(&mut default_spec(), &config, &[], &f, false).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            Ok::<_, OciError>(())
        })();
        umount2(&slave, MntFlags::MNT_DETACH).unwrap();
        umount2(&shared, MntFlags::MNT_DETACH).unwrap();
        result.unwrap();
    }

    #[test]
    fn clean_normalizes_lexically() {
        assert_eq!(clean("//a/./b/../c/"), Path::new("/a/c"));
        assert_eq!(clean("/../x"), Path::new("/x"));
        assert_eq!(depth(&clean("/")), 0);
        assert_eq!(depth(&clean("/a/b")), 2);
        assert_eq!(unescape("a\\040b\\134c"), "a b\\c");
        assert_eq!(unescape("tail\\04"), "tail\\04");
    }
}
