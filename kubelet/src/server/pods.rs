//! `/pods` and `/runningpods/`: pods as a v1 PodList, encoded as the Go kubelet encodes it
//! (`kind`/`apiVersion` on the list only, a trailing newline).

use hyper::{Response, StatusCode};
use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::{Body, NodeView, json, text};
use crate::types::Pod;

/// A pod as a list item: Go's encoding gives items no `kind`/`apiVersion` of their own.
#[derive(Serialize)]
struct Item<'a> {
    metadata: &'a ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<&'a PodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a PodStatus>,
}

/// The PodList JSON of `pods`, fields in Go's order.
pub fn pod_list(pods: &[Pod]) -> Result<Vec<u8>, serde_json::Error> {
    let items: Vec<Item<'_>> = pods
        .iter()
        .map(|p| Item {
            metadata: &p.metadata,
            spec: p.spec.as_ref(),
            status: p.status.as_ref(),
        })
        .collect();
    let mut out = br#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":"#.to_vec();
    serde_json::to_writer(&mut out, &items)?;
    out.extend_from_slice(b"}\n");
    Ok(out)
}

fn respond(pods: &[Pod]) -> Response<Body> {
    match pod_list(pods) {
        Ok(body) => json(body),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `/pods`: the desired pods with their statuses.
pub fn pods(view: &dyn NodeView) -> Response<Body> {
    respond(&view.pods())
}

/// `/runningpods/`: the pods the runtime runs.
pub fn running_pods(view: &dyn NodeView) -> Response<Body> {
    respond(&view.running_pods())
}
