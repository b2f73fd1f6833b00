//! Kubernetes streaming (exec, attach, port-forward) over SPDY/3.1 and WebSocket: the upgrade
//! handshake, the remotecommand and portforward subprotocols, server and client sides.
