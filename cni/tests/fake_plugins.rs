//! Library behaviour against small fake plugins (sh scripts): env contract, stdin config,
//! chaining, version conversion, errors, timeouts, cache, GC/STATUS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrolet_cni::{Cni, CniError, GcAttachment, NetworkConfigList, RuntimeConf};
use serde_json::{Value, json};

struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        Fake { dir }
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// A plugin that logs each call and records its stdin; `add` is the shell code run on ADD.
    fn plugin(&self, name: &str, add: &str) {
        self.plugin_with(name, add, "")
    }

    fn plugin_with(&self, name: &str, add: &str, other: &str) {
        let out = self.out();
        let script = format!(
            r#"#!/bin/sh
input=$(cat)
echo "$CNI_COMMAND {name} cid=$CNI_CONTAINERID netns=$CNI_NETNS if=$CNI_IFNAME args=$CNI_ARGS path=$CNI_PATH" >> {out}/log
printf '%s' "$input" > {out}/{name}.$CNI_COMMAND.stdin
{other}
case "$CNI_COMMAND" in
  ADD) {add} ;;
  VERSION) echo '{{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}}' ;;
esac
"#,
            out = out.display()
        );
        let p = self.bin().join(name);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.out().join("log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn stdin(&self, name: &str, cmd: &str) -> Value {
        let s = std::fs::read_to_string(self.out().join(format!("{name}.{cmd}.stdin"))).unwrap();
        serde_json::from_str(&s).unwrap()
    }

    fn cni(&self) -> Cni {
        Cni::new(
            vec![self.dir.path().join("nope"), self.bin()],
            self.dir.path().join("cache"),
        )
        .with_timeout(Duration::from_secs(10))
    }

    fn cache_files(&self) -> Vec<String> {
        std::fs::read_dir(self.dir.path().join("cache/results"))
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn net(json: Value) -> NetworkConfigList {
    NetworkConfigList::from_conflist_bytes(
        json.to_string().as_bytes(),
        Path::new("/inline.conflist"),
    )
    .unwrap()
}

const R031: &str = r#"'{"cniVersion":"0.3.1","interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"version":"4","interface":0,"address":"10.9.0.7/24","gateway":"10.9.0.1"}]}'"#;

fn rt() -> RuntimeConf {
    RuntimeConf::new("ctr1", "/ns", "eth0")
        .with_arg("K8S_POD_NAME", "p")
        .with_capability(
            "portMappings",
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        )
        .with_capability("bandwidth", json!({"ingressRate": 1000}))
}

#[tokio::test]
async fn add_chains_converts_and_caches_then_del_reverses() {
    let f = Fake::new();
    f.plugin("first", &format!("printf '%s' {R031}"));
    f.plugin("second", r#"echo '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"interface":0,"address":"10.9.0.7/24","gateway":"10.9.0.1"}],"dns":{"nameservers":["10.9.0.1"]}}'"#);
    let n = net(json!({"cniVersion":"1.0.0","name":"net1","plugins":[
        {"type":"first","foo":"bar","capabilities":{"portMappings":true}},
        {"type":"second","capabilities":{"bandwidth":true,"mac":true}}]}));
    let cni = f.cni();
    let res = cni.add(&n, &rt()).await.unwrap();
    assert_eq!(res.first_ipv4().unwrap().to_string(), "10.9.0.7");
    assert_eq!(res.dns.nameservers, ["10.9.0.1"]);

    let first = f.stdin("first", "ADD");
    assert_eq!(first["name"], "net1");
    assert_eq!(first["cniVersion"], "1.0.0");
    assert_eq!(first["foo"], "bar");
    assert!(first.get("prevResult").is_none());
    assert_eq!(
        first["runtimeConfig"],
        json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]})
    );
    let second = f.stdin("second", "ADD");
    // prevResult in the network's version (1.0.0: no per-IP "version").
    assert_eq!(second["prevResult"]["cniVersion"], "1.0.0");
    assert_eq!(second["prevResult"]["ips"][0]["address"], "10.9.0.7/24");
    assert!(second["prevResult"]["ips"][0].get("version").is_none());
    assert_eq!(
        second["runtimeConfig"],
        json!({"bandwidth":{"ingressRate":1000}})
    );

    let log = f.log();
    assert_eq!(log.len(), 2);
    let bin = f.bin();
    assert!(
        log[0].starts_with(&format!(
            "ADD first cid=ctr1 netns=/ns if=eth0 args=K8S_POD_NAME=p path={}:{}",
            f.dir.path().join("nope").display(),
            bin.display()
        )),
        "{}",
        log[0]
    );
    assert_eq!(f.cache_files(), ["net1-ctr1-eth0"]);

    // CHECK gets the cached result.
    cni.check(&n, &rt()).await.unwrap();
    assert_eq!(
        f.stdin("first", "CHECK")["prevResult"]["dns"]["nameservers"][0],
        "10.9.0.1"
    );

    // DEL: reverse order, cached prevResult, cached capability args when none given.
    let bare = RuntimeConf::new("ctr1", "/ns", "eth0");
    cni.del(&n, &bare).await.unwrap();
    let log = f.log();
    assert!(log[4].starts_with("DEL second"), "{log:?}");
    assert!(log[5].starts_with("DEL first"), "{log:?}");
    // /ns is not a live netns: plugins get an empty CNI_NETNS and the cached CNI_ARGS.
    assert!(
        log[5].contains("netns= if=eth0 args=K8S_POD_NAME=p"),
        "{}",
        log[5]
    );
    let d = f.stdin("first", "DEL");
    assert_eq!(d["prevResult"]["ips"][0]["address"], "10.9.0.7/24");
    assert_eq!(d["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
    assert!(f.cache_files().is_empty());

    // DEL again: fine, no prevResult; CHECK now has nothing to check.
    cni.del(&n, &bare).await.unwrap();
    assert!(f.stdin("first", "DEL").get("prevResult").is_none());
    let e = cni.check(&n, &rt()).await.unwrap_err();
    assert!(matches!(e, CniError::NoCachedResult { .. }), "{e}");
}

#[tokio::test]
async fn old_version_network_gets_old_prev_result_and_no_check() {
    let f = Fake::new();
    f.plugin(
        "a",
        r#"echo '{"cniVersion":"1.0.0","ips":[{"address":"fd00::3/64"}]}'"#,
    );
    f.plugin("b", &format!("printf '%s' {R031}"));
    let n = net(json!({"cniVersion":"0.3.1","name":"old","plugins":[{"type":"a"},{"type":"b"}]}));
    let cni = f.cni();
    cni.add(&n, &rt()).await.unwrap();
    let b = f.stdin("b", "ADD");
    assert_eq!(b["prevResult"]["cniVersion"], "0.3.1");
    assert_eq!(b["prevResult"]["ips"][0]["version"], "6");
    assert!(matches!(
        cni.check(&n, &rt()).await,
        Err(CniError::NotSupported { .. })
    ));
    cni.del(&n, &rt()).await.unwrap();
    // 0.3.x DEL carries no prevResult.
    assert!(f.stdin("a", "DEL").get("prevResult").is_none());
}

#[tokio::test]
async fn plugin_error_is_typed_and_add_is_rolled_back() {
    let f = Fake::new();
    f.plugin("ok", &format!("printf '%s' {R031}"));
    f.plugin(
        "bad",
        r#"echo '{"cniVersion":"1.0.0","code":7,"msg":"bad config","details":"field x"}'; exit 1"#,
    );
    let n = net(json!({"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ok"},{"type":"bad"}]}));
    let e = f.cni().add(&n, &rt()).await.unwrap_err();
    let pe = e
        .plugin_error()
        .unwrap_or_else(|| panic!("not a plugin error: {e}"));
    assert_eq!(
        (pe.code, pe.msg.as_str(), pe.details.as_str()),
        (7, "bad config", "field x")
    );
    let msg = e.to_string();
    assert!(
        msg.contains(
            "plugin bad (ADD) failed: code 7 (invalid network config): bad config; details: field x"
        ),
        "{msg}"
    );
    // rolled back: DEL of the whole chain, reverse order, no cache entry
    let log: Vec<_> = f
        .log()
        .iter()
        .map(|l| l.split(" cid").next().unwrap_or("").to_string())
        .collect();
    assert_eq!(log, ["ADD ok", "ADD bad", "DEL bad", "DEL ok"]);
    assert!(f.cache_files().is_empty());
}

#[tokio::test]
async fn non_json_failure_missing_plugin_timeout_bad_result() {
    let f = Fake::new();
    f.plugin("crash", "echo oops >&2; exit 3");
    f.plugin("slow", "sleep 30");
    f.plugin("garbage", "echo not-json");
    let cni = f.cni().with_timeout(Duration::from_millis(500));
    let one = |t: &str| net(json!({"cniVersion":"1.0.0","name":"n","plugins":[{"type":t}]}));

    let e = cni.add(&one("crash"), &rt()).await.unwrap_err();
    assert!(matches!(e, CniError::PluginExit { .. }), "{e}");
    assert!(e.to_string().contains("exit code 3: stderr: oops"), "{e}");

    let e = cni.add(&one("nosuch"), &rt()).await.unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, CniError::PluginNotFound { .. }));
    assert!(
        msg.contains(&f.bin().display().to_string()) && msg.contains("nope"),
        "{msg}"
    );

    let t = std::time::Instant::now();
    let e = cni.add(&one("slow"), &rt()).await.unwrap_err();
    assert!(matches!(e, CniError::Timeout { .. }), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5));

    let e = cni.add(&one("garbage"), &rt()).await.unwrap_err();
    assert!(matches!(e, CniError::InvalidResult { .. }), "{e}");
    assert!(f.cache_files().is_empty());

    let e = cni
        .add(&one("crash"), &RuntimeConf::new("bad id!", "/ns", "eth0"))
        .await
        .unwrap_err();
    assert!(matches!(e, CniError::InvalidArgument { .. }), "{e}");
}

#[tokio::test]
async fn gc_and_status_110() {
    let f = Fake::new();
    f.plugin_with("p", &format!("printf '%s' {R031}"), r#"[ "$CNI_COMMAND" = STATUS ] && [ -e STATUSFAIL ] && { echo '{"code":50,"msg":"not ready"}'; exit 1; }"#);
    let n = net(json!({"cniVersion":"1.1.0","name":"g","plugins":[{"type":"p"}]}));
    let cni = f.cni();
    for id in ["c1", "c2", "c3"] {
        cni.add(&n, &RuntimeConf::new(id, "/ns", "eth0"))
            .await
            .unwrap();
    }
    let valid = [GcAttachment {
        container_id: "c2".into(),
        ifname: "eth0".into(),
    }];
    cni.gc(&n, &valid).await.unwrap();
    assert_eq!(f.cache_files(), ["g-c2-eth0"]);
    let dels: Vec<_> = f
        .log()
        .into_iter()
        .filter(|l| l.starts_with("DEL"))
        .collect();
    assert_eq!(dels.len(), 2, "{dels:?}");
    let gc = f.stdin("p", "GC");
    assert_eq!(
        gc["cni.dev/valid-attachments"],
        json!([{"containerID":"c2","ifname":"eth0"}])
    );
    assert!(
        f.log()
            .iter()
            .any(|l| l.starts_with("GC p cid= netns= if="))
    );

    cni.status(&n).await.unwrap();
    assert!(f.log().iter().any(|l| l.starts_with("STATUS p")));

    let v = cni.version("p").await.unwrap();
    assert!(v.supported_versions.contains(&"1.1.0".to_string()));

    // disableGC: nothing runs.
    let before = f.log().len();
    let n2 =
        net(json!({"cniVersion":"1.1.0","name":"g","disableGC":true,"plugins":[{"type":"p"}]}));
    cni.gc(&n2, &[]).await.unwrap();
    assert_eq!(f.log().len(), before);
    assert_eq!(f.cache_files(), ["g-c2-eth0"]);
}

#[tokio::test]
async fn status_failure_is_plugin_error() {
    let f = Fake::new();
    f.plugin_with("p", "true", r#"[ "$CNI_COMMAND" = STATUS ] && { echo '{"cniVersion":"1.1.0","code":50,"msg":"not ready"}'; exit 1; }"#);
    let n = net(json!({"cniVersion":"1.1.0","name":"s","plugins":[{"type":"p"}]}));
    let e = f.cni().status(&n).await.unwrap_err();
    assert_eq!(e.plugin_error().map(|p| p.code), Some(50), "{e}");
    // Below 1.1.0 STATUS does not run plugins.
    let n = net(json!({"cniVersion":"1.0.0","name":"s","plugins":[{"type":"p"}]}));
    f.cni().status(&n).await.unwrap();
}

#[tokio::test]
async fn concurrent_adds() {
    let f = Fake::new();
    f.plugin("p", r#"n=$(echo "$CNI_CONTAINERID" | tr -dc 0-9); echo "{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.8.0.$n/24\"}]}""#);
    let n = net(json!({"cniVersion":"1.0.0","name":"c","plugins":[{"type":"p"}]}));
    let cni = f.cni();
    let futs = (1..=20).map(|i| {
        let (cni, n) = (cni.clone(), n.clone());
        async move {
            cni.add(&n, &RuntimeConf::new(format!("c{i}"), "/ns", "eth0"))
                .await
        }
    });
    let res = futures_join_all(futs).await;
    let mut ips: Vec<_> = res
        .into_iter()
        .map(|r| r.unwrap().first_ipv4().unwrap())
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 20);
    assert_eq!(f.cache_files().len(), 20);
}

async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_plugin_busy_being_written_is_run_once_it_is_not() {
    let f = Fake::new();
    f.plugin_with("p", "true", r#"[ "$CNI_COMMAND" = STATUS ] && exit 0"#);
    // A descriptor open for writing makes exec fail with ETXTBSY (a plugin being installed,
    // or a fork elsewhere in the process holding a copy of one): the call waits it out.
    let writer = std::fs::OpenOptions::new()
        .append(true)
        .open(f.bin().join("p"))
        .unwrap();
    let busy = std::process::Command::new(f.bin().join("p")).output();
    assert_eq!(
        busy.unwrap_err().kind(),
        std::io::ErrorKind::ExecutableFileBusy
    );
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(250));
        drop(writer);
    });
    let n = net(json!({"cniVersion":"1.1.0","name":"s","plugins":[{"type":"p"}]}));
    f.cni().status(&n).await.unwrap();
    release.join().unwrap();
    assert_eq!(f.log().len(), 1, "{:?}", f.log());
}
