use std::sync::Mutex;

use ferrolet_proto::pluginregistration::{
    Answer, CSI_PLUGIN, PluginInfo, Registration, RegistrationServer, RegistrationStatus,
    RegistrationStatusResponse,
};

use super::*;

/// A plugin's registration socket: who it says it is, and what it was told.
struct Registrar {
    info: PluginInfo,
    told: Arc<Mutex<Vec<RegistrationStatus>>>,
}

impl Registration for Registrar {
    fn get_info(&self) -> Answer<PluginInfo> {
        let info = self.info.clone();
        Box::pin(async move { Ok(info) })
    }

    fn notify_registration_status(
        &self,
        s: RegistrationStatus,
    ) -> Answer<RegistrationStatusResponse> {
        self.told.lock().unwrap().push(s);
        Box::pin(async { Ok(RegistrationStatusResponse {}) })
    }
}

/// Serves a registrar on `socket` until the task is aborted (the socket file stays).
fn serve(
    socket: &Path,
    plugin_type: &str,
    name: &str,
) -> (
    tokio::task::JoinHandle<()>,
    Arc<Mutex<Vec<RegistrationStatus>>>,
) {
    let told = Arc::new(Mutex::new(Vec::new()));
    let registrar = Registrar {
        info: PluginInfo {
            r#type: plugin_type.into(),
            name: name.into(),
            endpoint: String::new(),
            supported_versions: vec!["1.0.0".into()],
        },
        told: told.clone(),
    };
    let listener = ferrolet_proto::transport::bind(&socket.display().to_string(), 0o600).unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(registrar))
        .serve_with_incoming(ferrolet_proto::transport::incoming(listener, true));
    let task = tokio::spawn(async move {
        let _ = server.await;
    });
    (task, told)
}

/// A handler recording calls; refuses names starting with `bad`.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
}

impl PluginHandler for Recorder {
    fn validate(&self, name: &str, _: &str, versions: &[String]) -> Result<(), String> {
        if name.starts_with("bad") {
            return Err(format!("plugin {name} speaks none of {versions:?}"));
        }
        Ok(())
    }

    fn register<'a>(
        &'a self,
        name: &'a str,
        endpoint: &'a str,
        versions: &'a [String],
    ) -> BoxFuture<'a, Result<(), String>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("register {name} {endpoint} {versions:?}"));
        Box::pin(async { Ok(()) })
    }

    fn deregister<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("deregister {name}"));
        Box::pin(async {})
    }
}

fn manager(dir: &Path, recorder: &Arc<Recorder>) -> PluginManager {
    let handler: Arc<dyn PluginHandler> = recorder.clone();
    PluginManager::new(
        dir.to_path_buf(),
        [(CSI_PLUGIN.to_string(), handler)].into(),
    )
}

fn calls(recorder: &Recorder) -> Vec<String> {
    std::mem::take(&mut *recorder.calls.lock().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_register_deregister_and_register_again_when_restarted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("hostpath")).unwrap();
    let socket = dir.path().join("hostpath/reg.sock");
    // Neither a file that is no socket nor a dot-named socket is a plugin.
    std::fs::write(dir.path().join("notes"), "x").unwrap();
    let (hidden, hidden_told) = serve(&dir.path().join(".hidden.sock"), CSI_PLUGIN, "hidden");
    let recorder = Arc::new(Recorder::default());
    let pm = manager(dir.path(), &recorder);

    let (first, told) = serve(&socket, CSI_PLUGIN, "hostpath.csi.k8s.io");
    pm.reconcile().await;
    assert_eq!(
        calls(&recorder),
        [format!(
            "register hostpath.csi.k8s.io {} [\"1.0.0\"]",
            socket.display()
        )]
    );
    assert_eq!(
        *told.lock().unwrap(),
        [RegistrationStatus {
            plugin_registered: true,
            error: String::new()
        }]
    );
    assert_eq!(
        pm.registered().get(&socket),
        Some(&(CSI_PLUGIN.to_string(), "hostpath.csi.k8s.io".to_string()))
    );
    // Nothing changed: nothing happens.
    pm.reconcile().await;
    assert!(calls(&recorder).is_empty());
    assert!(hidden_told.lock().unwrap().is_empty());

    // The plugin restarts: a new socket at the same path is a new registration.
    first.abort();
    std::fs::remove_file(&socket).unwrap();
    let (second, told_again) = serve(&socket, CSI_PLUGIN, "hostpath.csi.k8s.io");
    pm.reconcile().await;
    assert_eq!(
        calls(&recorder),
        [
            "deregister hostpath.csi.k8s.io".to_string(),
            format!(
                "register hostpath.csi.k8s.io {} [\"1.0.0\"]",
                socket.display()
            )
        ]
    );
    assert_eq!(told_again.lock().unwrap().len(), 1);

    // The socket goes: the plugin is de-registered.
    second.abort();
    std::fs::remove_file(&socket).unwrap();
    pm.reconcile().await;
    assert_eq!(calls(&recorder), ["deregister hostpath.csi.k8s.io"]);
    assert!(pm.registered().is_empty());
    hidden.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_told_to_the_plugin_and_retried_after_a_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder::default());
    let pm = manager(dir.path(), &recorder);
    let bad = dir.path().join("bad.sock");
    let (bad_task, bad_told) = serve(&bad, CSI_PLUGIN, "bad.example.com");
    let odd = dir.path().join("odd.sock");
    let (odd_task, odd_told) = serve(&odd, "FancyPlugin", "odd.example.com");
    pm.reconcile().await;
    assert!(calls(&recorder).is_empty());
    assert!(pm.registered().is_empty());
    assert_eq!(
        *bad_told.lock().unwrap(),
        [RegistrationStatus {
            plugin_registered: false,
            error: "RegisterPlugin error -- plugin validation failed with err: plugin \
                    bad.example.com speaks none of [\"1.0.0\"]"
                .into()
        }]
    );
    assert_eq!(
        *odd_told.lock().unwrap(),
        [RegistrationStatus {
            plugin_registered: false,
            error: format!(
                "RegisterPlugin error -- no handler registered for plugin type: FancyPlugin \
                 at socket {}",
                odd.display()
            )
        }]
    );
    // Within the back-off nothing is asked again; after it, they are.
    pm.reconcile().await;
    assert_eq!(bad_told.lock().unwrap().len(), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    pm.reconcile().await;
    assert_eq!(bad_told.lock().unwrap().len(), 2);
    assert_eq!(odd_told.lock().unwrap().len(), 2);

    // A socket nobody answers on is a dial failure, retried likewise.
    bad_task.abort();
    odd_task.abort();
    let dead = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let err = pm
        .register(&dead, scan(dir.path())[&dead])
        .await
        .unwrap_err();
    assert!(
        err.starts_with(&format!(
            "RegisterPlugin error -- dial failed at socket {}",
            dead.display()
        )),
        "{err}"
    );
}
