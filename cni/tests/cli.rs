//! `ferrolet-cni` exit codes and output, with fake plugins: 0 success, 1 plugin/network
//! error, 2 usage error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_ferrolet-cni");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for d in ["bin", "conf", "cache"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let e = Env { dir };
        e.plugin(
            "good",
            r#"case "$CNI_COMMAND" in ADD) echo '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"interface":0,"address":"10.7.0.9/24","gateway":"10.7.0.1"}]}';;
             VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}';; esac"#,
        );
        e.plugin(
            "bad",
            r#"[ "$CNI_COMMAND" = ADD ] && { echo '{"cniVersion":"1.0.0","code":11,"msg":"try later","details":"busy"}'; exit 1; }; true"#,
        );
        e.conf(
            "10-ok.conflist",
            r#"{"cniVersion":"1.0.0","name":"ok","plugins":[{"type":"good"}]}"#,
        );
        e.conf(
            "20-fail.conflist",
            r#"{"cniVersion":"1.0.0","name":"fail","plugins":[{"type":"good"},{"type":"bad"}]}"#,
        );
        e.conf(
            "30-missing.conflist",
            r#"{"cniVersion":"1.0.0","name":"missing","plugins":[{"type":"nosuchplugin"}]}"#,
        );
        e
    }

    fn plugin(&self, name: &str, body: &str) {
        let p = self.dir.path().join("bin").join(name);
        std::fs::write(&p, format!("#!/bin/sh\ncat >/dev/null\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn conf(&self, name: &str, body: &str) {
        std::fs::write(self.dir.path().join("conf").join(name), body).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        let p = |d: &str| self.dir.path().join(d).display().to_string();
        std::process::Command::new(BIN)
            .env_remove("CNI_PATH")
            .env_remove("NETCONFPATH")
            .args([
                "--conf-dir",
                &p("conf"),
                "--bin-dir",
                &p("bin"),
                "--cache-dir",
                &p("cache"),
            ])
            .args(["--netns-dir", &p("ns")])
            .args(args)
            .output()
            .unwrap()
    }
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn usage_errors_exit_2() {
    let e = Env::new();
    for args in [
        &["frobnicate"][..],
        &["add", "ok"],
        &["add", "ok", "/x", "--cap-args", "{not json"],
        &["add", "ok", "/x", "--cap-args", "[1]"],
        &["add", "ok", "/x", "--args", "novalue"],
        &["add", "ok", "/x", "--container-id", "bad id!"],
        &["gc", "ok", "--valid", "nocolon"],
        &["exec", "x"],
    ] {
        let o = e.run(args);
        assert_eq!(code(&o), 2, "{args:?}: {}", text(&o.stderr));
    }
    assert_eq!(code(&e.run(&["--help"])), 0);
}

#[test]
fn success_exits_0_with_human_and_json_output() {
    let e = Env::new();
    let o = e.run(&["add", "ok", "/x", "--container-id", "c1"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("10.7.0.9/24 gateway 10.7.0.1 on eth0"),
        "{out}"
    );
    assert!(Path::new(&e.dir.path().join("cache/results/ok-c1-eth0")).exists());

    let o = e.run(&["check", "ok", "/x", "--container-id", "c1", "--json"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));

    let o = e.run(&["--json", "add", "ok", "/x", "--container-id", "c2"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ips"][0]["address"], "10.7.0.9/24");

    let o = e.run(&["del", "ok", "/x", "--container-id", "c1"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(!e.dir.path().join("cache/results/ok-c1-eth0").exists());

    let o = e.run(&["ls"]);
    assert_eq!(code(&o), 0);
    let out = text(&o.stdout);
    assert!(out.contains("ok (cniVersion 1.0.0)"), "{out}");
    assert!(out.contains("versions: 0.4.0, 1.0.0"), "{out}");
    assert!(out.contains("nosuchplugin MISSING"), "{out}");

    let o = e.run(&["status", "ok"]);
    assert_eq!(code(&o), 0);
}

#[test]
fn plugin_and_network_errors_exit_1() {
    let e = Env::new();
    let o = e.run(&["add", "fail", "/x"]);
    assert_eq!(code(&o), 1);
    let err = text(&o.stderr);
    assert!(
        err.contains(
            "plugin bad (ADD) failed: code 11 (try again later): try later; details: busy"
        ),
        "{err}"
    );

    let o = e.run(&["add", "missing", "/x"]);
    assert_eq!(code(&o), 1);
    let err = text(&o.stderr);
    assert!(
        err.contains("\"nosuchplugin\": binary not found; searched") && err.contains("/bin"),
        "{err}"
    );

    let o = e.run(&["add", "nonet", "/x"]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stderr).contains("network \"nonet\" not found"));

    e.conf("40-broken.conf", "{");
    let o = e.run(&["add", "ok", "/x"]);
    assert_eq!(code(&o), 1);
    assert!(
        text(&o.stderr).contains("40-broken.conf: invalid JSON"),
        "{}",
        text(&o.stderr)
    );
    // nothing cached by the failures
    assert_eq!(
        std::fs::read_dir(e.dir.path().join("cache"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn trace_shows_every_plugin_call() {
    let e = Env::new();
    let o = e.run(&[
        "--trace",
        "add",
        "fail",
        "/x",
        "--container-id",
        "t1",
        "--args",
        "A=1;B=2",
    ]);
    assert_eq!(code(&o), 1);
    let err = text(&o.stderr);
    for needle in [
        "=== ADD good (",
        "=== ADD bad (",
        "=== DEL bad (",
        "CNI_COMMAND=ADD",
        "CNI_CONTAINERID=t1",
        "CNI_ARGS=A=1;B=2",
        "CNI_NETNS=/x",
        "--- stdin",
        "\"name\": \"fail\"",
        "--- stdout",
        "\"code\": 11",
        "--- exit code 1, duration",
    ] {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn ls_without_a_config_says_where_it_looked_and_exits_1() {
    let e = Env::new();
    let conf = e.dir.path().join("conf");
    for f in std::fs::read_dir(&conf).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    std::fs::write(conf.join("README"), "not a config").unwrap();
    for args in [&["ls"][..], &["ls", "--json"]] {
        let o = e.run(args);
        assert_eq!(code(&o), 1, "{args:?}");
        assert_eq!(text(&o.stdout), "", "{args:?}");
        assert_eq!(
            text(&o.stderr),
            format!(
                "ferrolet-cni: error: no network config: looked in {} (from --conf-dir or \
                 NETCONFPATH), which holds no *.conf, *.conflist, *.json file\n",
                conf.display()
            ),
            "{args:?}"
        );
    }

    std::fs::remove_dir_all(&conf).unwrap();
    let o = e.run(&["ls"]);
    assert_eq!(code(&o), 1);
    assert!(
        text(&o.stderr).ends_with(&format!(
            "looked in {} (from --conf-dir or NETCONFPATH), which does not exist\n",
            conf.display()
        )),
        "{}",
        text(&o.stderr)
    );

    std::fs::create_dir(&conf).unwrap();
    e.conf("10-broken.conflist", "{");
    let o = e.run(&["ls"]);
    assert_eq!(code(&o), 1);
    assert!(text(&o.stdout).contains("10-broken.conflist: INVALID"));
    assert!(
        text(&o.stderr).contains("no valid network config: looked in")
            && text(&o.stderr).contains("whose 1 config file(s) are all invalid"),
        "{}",
        text(&o.stderr)
    );

    // The default, named as such: cnitool's /etc/cni/net.d.
    let o = std::process::Command::new(BIN)
        .env_remove("NETCONFPATH")
        .args(["ls", "--help"])
        .output()
        .unwrap();
    assert!(text(&o.stdout).contains("[default: /etc/cni/net.d]"));
}
