//! The CSI volume plugin's node side (Go's `pkg/volume/csi`): drivers registering through the
//! plugin manager ([`registration`]) with their versions checked ([`version`]).

pub mod registration;
pub mod version;
