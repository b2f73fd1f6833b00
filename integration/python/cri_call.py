"""Calls gRPC methods on a unix socket with Python grpcio: a CRI client that is not ours.

Usage: cri_call.py SOCKET_PATH < calls.json > results.json
calls.json: [{"method": "/runtime.v1.RuntimeService/Version", "request": "<hex protobuf>"}]
results.json: [{"code": "OK", "response": "<hex>"} | {"code": "UNAVAILABLE", "details": "..."}]

Messages travel as bytes (no generated stubs): the Rust test encodes and decodes them, so
this stays independent of the CRI version. grpcio (C-core) sends the socket path,
percent-encoded, as the HTTP/2 :authority.
"""
import json
import sys

import grpc


def main() -> None:
    socket = sys.argv[1]
    calls = json.load(sys.stdin)
    results = []
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        for call in calls:
            method = channel.unary_unary(call["method"])
            try:
                response = method(bytes.fromhex(call["request"]), timeout=120)
                results.append({"code": "OK", "response": response.hex()})
            except grpc.RpcError as e:
                results.append({"code": e.code().name, "details": e.details() or ""})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
