//! Pull secrets read from the API server, as the Go kubelet's secret manager with the `Get`
//! strategy: one GET per pull (pulls are rare, and the Node authorizer lets a node read only
//! the secrets of pods bound to it). A secret that cannot be read is logged by name only.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;

use super::SecretSource;
use crate::kube_client::ApiHandle;

/// Secrets from the API server.
#[derive(Clone, Debug)]
pub struct ApiSecrets {
    api: ApiHandle,
}

impl ApiSecrets {
    /// Secrets read through `api`.
    pub fn new(api: ApiHandle) -> Self {
        Self { api }
    }
}

impl SecretSource for ApiSecrets {
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Option<Secret>> {
        Box::pin(async move {
            let secrets: kube::Api<Secret> = kube::Api::namespaced(self.api.client(), namespace);
            match secrets.get_opt(name).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::warn!(namespace, secret = name, error = %e, "reading a pull secret");
                    None
                }
            }
        })
    }
}
