//! Pod manifests: parsing (YAML/JSON; Pod, PodList, List), static-pod identity, the API's
//! defaults and its validation, and resource quantities.

pub mod defaults;
pub mod names;
mod parse;
pub mod quantity;
mod static_pod;
pub mod validate;

pub use parse::parse;
pub use static_pod::{now_rfc3339_nano, static_pod};
