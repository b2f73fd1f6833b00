//! One device plugin's connection (Go's plugin client and endpoint): dialled when the plugin
//! registers, asked for its options, then followed over `ListAndWatch` until the stream ends,
//! which the manager takes as the plugin going away. The kubelet never redials: a plugin that
//! comes back registers again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferrolet_proto::deviceplugin::DevicePluginClient;

use super::DeviceManager;

/// How long dialling a plugin and asking its options may take (Go's dial timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a registering plugin could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The socket did not answer.
    #[error("failed to dial device plugin: {0}")]
    Dial(String),
    /// Dialling or the options call took too long.
    #[error("failed to dial device plugin: timed out after {0:?}")]
    Timeout(Duration),
    /// The options call failed.
    #[error("failed to get device plugin options: {0}")]
    Options(tonic::Status),
}

/// Connects to `resource`'s plugin at `socket`, makes it the resource's endpoint and follows
/// its devices in a task of its own.
pub async fn connect(
    manager: &Arc<DeviceManager>,
    resource: &str,
    socket: &Path,
) -> Result<(), ConnectError> {
    let endpoint = socket.display().to_string();
    let dialled = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let channel = ferrolet_proto::transport::connect(&endpoint)
            .await
            .map_err(|e| ConnectError::Dial(e.to_string()))?;
        let mut client = DevicePluginClient::new(channel);
        let options = client
            .get_device_plugin_options()
            .await
            .map_err(ConnectError::Options)?;
        Ok::<_, ConnectError>((client, options))
    })
    .await
    .map_err(|_| ConnectError::Timeout(CONNECT_TIMEOUT))?;
    let (client, options) = dialled?;
    tracing::info!(
        resource,
        endpoint,
        pre_start_required = options.pre_start_required,
        preferred_allocation = options.get_preferred_allocation_available,
        "device plugin connected"
    );
    let generation = manager.connected(resource, client.clone(), options);
    let task = tokio::spawn(follow(
        manager.clone(),
        resource.to_string(),
        generation,
        client,
    ));
    manager.set_task(resource, generation, task.abort_handle());
    Ok(())
}

/// Hands every `ListAndWatch` update to the manager until the stream ends.
async fn follow(
    manager: Arc<DeviceManager>,
    resource: String,
    generation: u64,
    mut client: DevicePluginClient,
) {
    match client.list_and_watch().await {
        Ok(mut stream) => loop {
            match stream.message().await {
                Ok(Some(update)) => {
                    manager
                        .devices_listed(&resource, generation, update.devices)
                        .await;
                }
                Ok(None) => {
                    tracing::info!(resource, "device plugin ended its ListAndWatch stream");
                    break;
                }
                Err(e) => {
                    tracing::warn!(resource, error = %e, "device plugin's ListAndWatch stream failed");
                    break;
                }
            }
        },
        Err(e) => tracing::warn!(resource, error = %e, "device plugin's ListAndWatch failed"),
    }
    manager.disconnected(&resource, generation).await;
}
