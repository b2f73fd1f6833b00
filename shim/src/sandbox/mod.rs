//! Pod sandboxes: the files they share with their containers (the lifecycle lands here too).

pub mod files;
