//! The handle through which every part reaches the API server. The client behind it changes
//! when the kubelet's client certificate rotates (kube-rs reads a certificate once, when a
//! client is built), so long-lived loops ask the handle for the current client each time they
//! (re)connect instead of keeping one.

use std::sync::{Arc, RwLock};

/// The current API client, shared; cheap to clone.
#[derive(Clone)]
pub struct ApiHandle {
    current: Arc<RwLock<kube::Client>>,
    node_name: Arc<str>,
}

impl ApiHandle {
    /// A handle on `client`, for the node named `node_name`.
    pub fn new(client: kube::Client, node_name: &str) -> Self {
        Self {
            current: Arc::new(RwLock::new(client)),
            node_name: node_name.into(),
        }
    }

    /// The client to use now.
    pub fn client(&self) -> kube::Client {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the client (a rotated certificate); calls already made keep the old one.
    pub fn replace(&self, client: kube::Client) {
        match self.current.write() {
            Ok(mut c) => *c = client,
            Err(poisoned) => *poisoned.into_inner() = client,
        }
    }

    /// This node's name, as registered.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }
}

impl std::fmt::Debug for ApiHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiHandle")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}
