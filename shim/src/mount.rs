//! Reading files out of snapshot mounts, and the sandbox's tmpfs mounts (stub).
