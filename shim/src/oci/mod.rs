//! OCI runtime specs for pod sandboxes and containers (owned by the oci work; stub).
