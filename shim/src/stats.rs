//! Container and sandbox stats from containerd's task metrics (stub).
