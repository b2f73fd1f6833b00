//! SPDY/3.1 as Kubernetes speaks it (`Upgrade: SPDY/3.1`, moby/spdystream): frames, zlib
//! header blocks with the SPDY/3 dictionary, and a multiplexed async connection with
//! per-stream flow control, for both the client and the server side.
