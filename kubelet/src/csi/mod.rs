//! The CSI volume plugin's node side (Go's `pkg/volume/csi`): drivers registering through the
//! plugin manager ([`registration`]) with their versions checked ([`version`]), and their node
//! identity written to the API ([`node_info`]); calls to their Node service ([`client`]); a
//! volume's paths, `vol_data.json` and requests ([`volume`]).

pub mod client;
pub mod node_info;
pub mod registration;
pub mod version;
pub mod volume;
