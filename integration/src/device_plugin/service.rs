//! The test plugin's `v1beta1.DevicePlugin` service, and one server of it on the plugin's
//! socket (a [`Generation`]: a new one per kubelet, as the old socket is gone).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferrolet_proto::deviceplugin::{
    AllocateRequest, AllocateResponse, Answer, ContainerPreferredAllocationResponse, DevicePlugin,
    DevicePluginOptions, DevicePluginServer, DeviceStream, ListAndWatchResponse,
    PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse,
};
use ferrolet_proto::transport::SocketFile;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::Status;

use super::Shared;

/// How long a stopping server may take to close its connections before it is aborted.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// One server on the plugin's socket; dropped, it stops without waiting for its connections.
pub(super) struct Generation {
    /// Set to end this server's `ListAndWatch` streams and the server itself.
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    socket: Option<SocketFile>,
}

impl Generation {
    /// Binds `socket` (mode 0600, as a plugin's socket is only the kubelet's business) and
    /// serves the plugin there.
    pub(super) fn serve(shared: Arc<Shared>, socket: &Path) -> std::io::Result<Self> {
        let (listener, file) =
            ferrolet_proto::transport::bind_owned(&socket.display().to_string(), 0o600)
                .map_err(std::io::Error::other)?;
        let (stop, stopped) = watch::channel(false);
        let service = Service {
            shared,
            stopped: stopped.clone(),
        };
        let mut shutdown = stopped;
        let server = tonic::transport::Server::builder()
            .add_service(DevicePluginServer::new(service))
            .serve_with_incoming_shutdown(
                ferrolet_proto::transport::incoming(listener, true),
                async move {
                    let _ = shutdown.wait_for(|s| *s).await;
                },
            );
        let task = tokio::spawn(async move {
            let _ = server.await;
        });
        Ok(Self {
            stop,
            task: Some(task),
            socket: Some(file),
        })
    }

    /// Ends the streams, removes the socket (if still ours) and waits for the connections to
    /// close; a server that does not drain in time is aborted.
    pub(super) async fn end(mut self) {
        self.signal();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(DRAIN_LIMIT, task).await.is_err() {
                abort.abort();
            }
        }
    }

    /// Tells the streams and the server to end, and removes the socket if it is still ours
    /// (a successor's socket at the same path stays).
    fn signal(&mut self) {
        let _ = self.stop.send(true);
        if let Some(file) = self.socket.take()
            && let Err(e) = file.remove()
        {
            eprintln!("test device plugin: {e}");
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.signal();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The service of one server: its streams end when that server stops.
struct Service {
    shared: Arc<Shared>,
    stopped: watch::Receiver<bool>,
}

impl DevicePlugin for Service {
    fn get_device_plugin_options(&self) -> Answer<DevicePluginOptions> {
        self.shared.calls().options += 1;
        let options = self.shared.options;
        Box::pin(async move { Ok(options) })
    }

    fn list_and_watch(&self) -> Answer<DeviceStream> {
        self.shared.calls().list_and_watch += 1;
        let devices = self.shared.devices.subscribe();
        let stopped = self.stopped.clone();
        // The current devices first, then one update per change, until the server stops.
        let updates = futures::stream::unfold(
            (devices, stopped, true),
            |(mut devices, mut stopped, first)| async move {
                if *stopped.borrow() {
                    return None;
                }
                if !first {
                    tokio::select! {
                        changed = devices.changed() => changed.ok()?,
                        _ = stopped.wait_for(|s| *s) => return None,
                    }
                }
                let list = devices.borrow_and_update().clone();
                let update = ListAndWatchResponse { devices: list };
                Some((Ok(update), (devices, stopped, false)))
            },
        );
        Box::pin(async move { Ok(Box::pin(updates) as DeviceStream) })
    }

    fn get_preferred_allocation(
        &self,
        request: PreferredAllocationRequest,
    ) -> Answer<PreferredAllocationResponse> {
        self.shared.calls().preferred.push(request.clone());
        let answer = request
            .container_requests
            .iter()
            .map(|c| ContainerPreferredAllocationResponse {
                device_ids: (self.shared.prefer)(c),
            })
            .collect();
        Box::pin(async move {
            Ok(PreferredAllocationResponse {
                container_responses: answer,
            })
        })
    }

    fn allocate(&self, request: AllocateRequest) -> Answer<AllocateResponse> {
        let ids: Vec<Vec<String>> = request
            .container_requests
            .into_iter()
            .map(|c| c.devices_ids)
            .collect();
        self.shared.calls().allocate.push(ids.clone());
        // A real plugin refuses what it does not have: the kubelet must only hand out devices
        // the plugin reported.
        let known = self.shared.devices.borrow().clone();
        let unknown = ids
            .iter()
            .flatten()
            .find(|id| !known.iter().any(|d| &d.id == *id))
            .cloned();
        let answer = match unknown {
            Some(id) => Err(Status::invalid_argument(format!("unknown device {id:?}"))),
            None => Ok(AllocateResponse {
                container_responses: ids.iter().map(|c| (self.shared.allocate)(c)).collect(),
            }),
        };
        Box::pin(async move { answer })
    }

    fn pre_start_container(
        &self,
        request: PreStartContainerRequest,
    ) -> Answer<PreStartContainerResponse> {
        self.shared
            .calls()
            .pre_start
            .push(request.devices_ids.clone());
        if let Some(hook) = &self.shared.pre_start {
            hook(&request.devices_ids);
        }
        Box::pin(async { Ok(PreStartContainerResponse {}) })
    }
}
