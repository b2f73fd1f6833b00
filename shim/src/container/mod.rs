//! Containers: their IO, logs and exec (the lifecycle lands here too).

pub mod exec;
pub mod io;
pub mod log;
