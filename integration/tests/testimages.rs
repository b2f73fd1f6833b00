//! The test image builder: reproducibility, OCI layout consistency and image contents.
//! Needs only `/bin/busybox` (Debian's busybox-static), no containerd.

// Clippy's allow-unwrap-in-tests covers #[test] fns but not the helpers they share here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use ferrolet_integration::testimages::{self, BIG_FILE_SIZE, BuiltImage, Error, NAMES};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const BUSYBOX: &str = "/bin/busybox";

fn busybox() -> &'static Path {
    Path::new(BUSYBOX)
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn blob_path(dir: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
    dir.join("blobs/sha256").join(hex)
}

fn read_blob(dir: &Path, digest: &str) -> Vec<u8> {
    fs::read(blob_path(dir, digest)).unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

fn config_of(image: &BuiltImage) -> Value {
    serde_json::from_slice(&read_blob(&image.dir, &image.config_digest)).unwrap()
}

/// File names under `blobs/sha256`, sorted.
fn blob_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir.join("blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// One tar entry as the tests need it.
#[derive(Debug)]
struct TarEntry {
    path: String,
    kind: tar::EntryType,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    link: Option<String>,
    data: Vec<u8>,
}

/// Entries of a gzipped layer blob, in archive order.
fn layer_entries(image: &BuiltImage, layer: usize) -> Vec<TarEntry> {
    let blob = fs::File::open(blob_path(&image.dir, &image.layer_digests[layer])).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(blob));
    let mut entries = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let header = entry.header().clone();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        entries.push(TarEntry {
            path: String::from_utf8(entry.path_bytes().into_owned()).unwrap(),
            kind: header.entry_type(),
            mode: header.mode().unwrap(),
            uid: header.uid().unwrap(),
            gid: header.gid().unwrap(),
            mtime: header.mtime().unwrap(),
            link: header
                .link_name()
                .unwrap()
                .map(|l| l.to_string_lossy().into_owned()),
            data,
        });
    }
    entries
}

fn entry<'a>(entries: &'a [TarEntry], path: &str) -> &'a TarEntry {
    entries
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("no {path} in layer"))
}

#[test]
fn rebuilding_gives_byte_identical_layouts() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = testimages::build_all(a.path(), busybox()).unwrap();
    let second = testimages::build_all(b.path(), busybox()).unwrap();
    let names: Vec<&str> = first.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, NAMES);

    for (x, y) in first.iter().zip(&second) {
        let strip = |i: &BuiltImage| BuiltImage {
            dir: PathBuf::new(),
            ..i.clone()
        };
        assert_eq!(
            strip(x),
            strip(y),
            "{} differs between builds",
            x.reference()
        );
        assert_eq!(blob_names(&x.dir), blob_names(&y.dir));
        for name in blob_names(&x.dir) {
            let (bx, by) = (
                x.dir.join("blobs/sha256").join(&name),
                y.dir.join("blobs/sha256").join(&name),
            );
            assert!(
                fs::read(bx).unwrap() == fs::read(by).unwrap(),
                "blob {name} differs"
            );
        }
        for file in ["index.json", "oci-layout"] {
            assert_eq!(
                fs::read(x.dir.join(file)).unwrap(),
                fs::read(y.dir.join(file)).unwrap()
            );
        }
    }

    // Every image except `layers` starts from the very same base blob.
    let base = &first[0].layer_digests[0];
    for image in first.iter().filter(|i| i.name != "layers") {
        assert_eq!(
            &image.layer_digests[0],
            base,
            "{} has its own base",
            image.reference()
        );
    }

    // Rebuilding over an existing layout changes nothing and leaves no temp files behind.
    let again = testimages::build("busybox", a.path(), busybox()).unwrap();
    assert_eq!(again, first[0]);
    assert_eq!(blob_names(&again.dir), blob_names(&second[0].dir));
    let mut top: Vec<String> = fs::read_dir(&again.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(top, ["blobs", "index.json", "oci-layout"]);
}

#[test]
fn layouts_are_consistent_and_diff_ids_match() {
    let out = tempfile::tempdir().unwrap();
    let images = testimages::build_all(out.path(), busybox()).unwrap();
    let mut uncompressed: BTreeMap<String, Vec<u64>> = BTreeMap::new();

    for image in &images {
        let dir = &image.dir;
        assert_eq!(dir, &out.path().join(&image.name));
        assert_eq!(
            read_json(&dir.join("oci-layout")),
            json!({"imageLayoutVersion": "1.0.0"})
        );

        let index = read_json(&dir.join("index.json"));
        assert_eq!(index["schemaVersion"], 2);
        assert_eq!(
            index["mediaType"],
            "application/vnd.oci.image.index.v1+json"
        );
        let manifests = index["manifests"].as_array().unwrap();
        assert_eq!(manifests.len(), 1);
        let desc = &manifests[0];
        assert_eq!(
            desc["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
        assert_eq!(desc["digest"], image.manifest_digest.as_str());
        assert_eq!(
            desc["annotations"]["org.opencontainers.image.ref.name"],
            "1"
        );

        let manifest_bytes = read_blob(dir, &image.manifest_digest);
        assert_eq!(sha256(&manifest_bytes), image.manifest_digest);
        assert_eq!(desc["size"], manifest_bytes.len());
        let manifest: Value = serde_json::from_slice(&manifest_bytes).unwrap();
        assert_eq!(manifest["schemaVersion"], 2);
        assert_eq!(
            manifest["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
        assert!(manifest.get("annotations").is_none());

        let config_bytes = read_blob(dir, &image.config_digest);
        assert_eq!(sha256(&config_bytes), image.config_digest);
        assert_eq!(manifest["config"]["digest"], image.config_digest.as_str());
        assert_eq!(manifest["config"]["size"], config_bytes.len());
        assert_eq!(
            manifest["config"]["mediaType"],
            "application/vnd.oci.image.config.v1+json"
        );

        let config: Value = serde_json::from_slice(&config_bytes).unwrap();
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["os"], "linux");
        assert_eq!(config["created"], "1970-01-01T00:00:00Z");
        assert_eq!(config["rootfs"]["type"], "layers");
        assert_eq!(config["rootfs"]["diff_ids"], json!(image.diff_ids));
        assert_eq!(
            config["history"].as_array().unwrap().len(),
            image.layer_digests.len()
        );

        let layers = manifest["layers"].as_array().unwrap();
        assert_eq!(layers.len(), image.layer_digests.len());
        assert_eq!(image.diff_ids.len(), image.layer_digests.len());
        let mut total = (manifest_bytes.len() + config_bytes.len()) as u64;
        for ((layer, digest), diff_id) in
            layers.iter().zip(&image.layer_digests).zip(&image.diff_ids)
        {
            assert_eq!(
                layer["mediaType"],
                "application/vnd.oci.image.layer.v1.tar+gzip"
            );
            assert_eq!(layer["digest"], digest.as_str());
            let blob = read_blob(dir, digest);
            assert_eq!(&sha256(&blob), digest);
            assert_eq!(layer["size"], blob.len());
            total += blob.len() as u64;

            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(&blob[..])
                .read_to_end(&mut tar)
                .unwrap();
            assert_eq!(
                &sha256(&tar),
                diff_id,
                "diff_id of {digest} in {}",
                image.reference()
            );
            uncompressed
                .entry(image.name.clone())
                .or_default()
                .push(tar.len() as u64);
        }
        assert_eq!(image.size, total);
    }

    // One 512-byte header, the data (already block-aligned), and the two zero end blocks.
    let big = &uncompressed["big"];
    assert_eq!(big.len(), 2);
    assert_eq!(big[1], BIG_FILE_SIZE + 512 + 1024);
    assert_eq!(BIG_FILE_SIZE, 64 << 20);
}

#[test]
fn base_layer_is_busybox_with_pinned_metadata() {
    let out = tempfile::tempdir().unwrap();
    let image = testimages::build("busybox", out.path(), busybox()).unwrap();
    assert_eq!(image.layer_digests.len(), 1);
    let entries = layer_entries(&image, 0);

    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "entries are not sorted");
    for e in &entries {
        assert_eq!((e.uid, e.gid, e.mtime), (0, 0, 0), "{}", e.path);
    }

    let bin = entry(&entries, "bin/busybox");
    assert_eq!(bin.kind, tar::EntryType::Regular);
    assert_eq!(bin.mode, 0o755);
    assert_eq!(bin.data, fs::read(BUSYBOX).unwrap());
    let sh = entry(&entries, "bin/sh");
    assert_eq!(sh.kind, tar::EntryType::Symlink);
    assert_eq!(sh.link.as_deref(), Some("busybox"));
    assert_eq!(
        entries.iter().filter(|e| e.path == "bin/busybox").count(),
        1
    );
    let applets = entries
        .iter()
        .filter(|e| e.kind == tar::EntryType::Symlink)
        .count();
    assert!(applets > 100, "only {applets} applet links");

    assert_eq!(entry(&entries, "tmp/").mode, 0o1777);
    assert_eq!(entry(&entries, "tmp/").kind, tar::EntryType::Directory);
    for dir in ["etc/", "root/", "proc/", "sys/", "dev/", "var/", "home/"] {
        assert_eq!(
            entry(&entries, dir).kind,
            tar::EntryType::Directory,
            "{dir}"
        );
    }
    let passwd = String::from_utf8(entry(&entries, "etc/passwd").data.clone()).unwrap();
    assert!(
        passwd.lines().any(|l| l.starts_with("root:x:0:0:")),
        "{passwd}"
    );
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nobody:x:65534:65534:")),
        "{passwd}"
    );
    let group = String::from_utf8(entry(&entries, "etc/group").data.clone()).unwrap();
    assert!(group.lines().any(|l| l.starts_with("root:x:0:")), "{group}");

    let config = config_of(&image);
    assert_eq!(config["config"]["Cmd"], json!(["sh"]));
    assert_eq!(
        config["config"]["Env"],
        json!(["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    );
}

#[test]
fn user_image_has_app_user() {
    let out = tempfile::tempdir().unwrap();
    let image = testimages::build("user", out.path(), busybox()).unwrap();
    assert_eq!(image.layer_digests.len(), 2);
    let entries = layer_entries(&image, 1);

    let passwd = String::from_utf8(entry(&entries, "etc/passwd").data.clone()).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l == "app:x:1000:1000:app:/home/app:/bin/sh"),
        "{passwd}"
    );
    assert!(
        passwd.lines().any(|l| l.starts_with("root:x:0:0:")),
        "{passwd}"
    );
    let group = String::from_utf8(entry(&entries, "etc/group").data.clone()).unwrap();
    assert!(group.lines().any(|l| l == "app:x:1000:"), "{group}");
    let home = entry(&entries, "home/app/");
    assert_eq!(home.kind, tar::EntryType::Directory);
    assert_eq!((home.uid, home.gid), (1000, 1000));

    let config = config_of(&image);
    assert_eq!(config["config"]["User"], "app");
    assert_eq!(config["config"]["Cmd"], json!(["sh"]));
}

#[test]
fn layers_image_has_whiteouts() {
    let out = tempfile::tempdir().unwrap();
    let image = testimages::build("layers", out.path(), busybox()).unwrap();
    assert_eq!(image.layer_digests.len(), 3);

    let first = layer_entries(&image, 0);
    for path in [
        "bin/busybox",
        "data/keep.txt",
        "data/remove-me.txt",
        "olddir/a.txt",
        "olddir/b.txt",
    ] {
        entry(&first, path);
    }
    let second = layer_entries(&image, 1);
    assert_eq!(entry(&second, "data/layer2.txt").data, b"layer 2\n");

    let third = layer_entries(&image, 2);
    let paths: Vec<&str> = third.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "data/",
            "data/.wh.remove-me.txt",
            "olddir/",
            "olddir/.wh..wh..opq",
            "olddir/new.txt"
        ]
    );
    for whiteout in ["data/.wh.remove-me.txt", "olddir/.wh..wh..opq"] {
        let e = entry(&third, whiteout);
        assert_eq!(e.kind, tar::EntryType::Regular);
        assert!(e.data.is_empty());
    }
    assert_eq!(config_of(&image)["config"]["Cmd"], json!(["sh"]));
}

#[test]
fn entry_and_httpd_configs() {
    let out = tempfile::tempdir().unwrap();
    let entry_image = testimages::build("entry", out.path(), busybox()).unwrap();
    let config = config_of(&entry_image)["config"].clone();
    assert_eq!(
        config,
        json!({
            "Entrypoint": ["/bin/echo", "entry"],
            "Cmd": ["default-arg"],
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "GREETING=hello",
                "FERROLET_IMAGE=entry",
            ],
            "WorkingDir": "/work",
            "StopSignal": "SIGUSR1",
            "Labels": {"org.ferrolet.test": "entry", "maintainer": "ferrolet"},
            "ExposedPorts": {"8080/tcp": {}},
        })
    );
    assert_eq!(
        entry(&layer_entries(&entry_image, 1), "work/").kind,
        tar::EntryType::Directory
    );

    let httpd = testimages::build("httpd", out.path(), busybox()).unwrap();
    let config = config_of(&httpd)["config"].clone();
    assert_eq!(
        config["Cmd"],
        json!(["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"])
    );
    assert_eq!(config["ExposedPorts"], json!({"8080/tcp": {}}));
    let www = layer_entries(&httpd, 1);
    assert_eq!(entry(&www, "www/index.html").data, b"ferrolet httpd ok\n");
}

#[test]
fn unknown_image_is_rejected() {
    let out = tempfile::tempdir().unwrap();
    let err = testimages::build("nope", out.path(), busybox()).unwrap_err();
    assert!(
        matches!(err, Error::UnknownImage(ref n) if n == "nope"),
        "{err}"
    );
    assert!(
        fs::read_dir(out.path()).unwrap().next().is_none(),
        "wrote something for a bad name"
    );
}
