#!/usr/bin/python3
"""A gRPC server-streaming service and its client, with grpcio (Debian
python3-grpcio) and no generated code: the method /infertap.test.Tokens/Stream
takes and returns raw bytes. Plaintext HTTP/2 (h2c, prior knowledge), as
grpcio speaks it without credentials.

The request is a small JSON object (bytes on the wire, no schema):
  {"messages": N, "itl_ms": MS, "pause_after": K, "pause_ms": MS, "fail": false}
The server answers N messages of ~120 bytes, MS apart, one pause of pause_ms
after message K (1-based; 0: none), then ends with status OK, or, with "fail",
with RESOURCE_EXHAUSTED (8) after the N messages.

  grpc_peer.py server --port P [--log FILE]   # prints "listening P"
  grpc_peer.py client --port P --messages N [--itl-ms MS] [--pause-after K --pause-ms MS] [--fail]

The client prints one JSON line: {"messages": n, "status": code, "details": "..."}.
The server's --log gets one JSON line per message sent: {"index": i, "mono_ns": t}
(CLOCK_MONOTONIC after the message was handed to grpcio, an upper bound on
its send), written at exit (SIGTERM).
"""
import argparse
import json
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

METHOD = "/infertap.test.Tokens/Stream"
SERVICE, NAME = "infertap.test.Tokens", "Stream"


def identity(b):
    return b


class TokenService:
    def __init__(self):
        self.sent = []
        self.lock = threading.Lock()

    def stream(self, request, context):
        req = json.loads(request.decode() or "{}")
        n, itl = int(req.get("messages", 8)), float(req.get("itl_ms", 10)) / 1e3
        pause_after, pause = int(req.get("pause_after", 0)), float(req.get("pause_ms", 0)) / 1e3
        for i in range(n):
            if i > 0:
                time.sleep(itl + (pause if i == pause_after else 0))
            body = json.dumps({"index": i, "token": f"tok{i:05d}", "text": "x" * 80}).encode()
            yield body
            with self.lock:
                self.sent.append({"index": i, "mono_ns": time.monotonic_ns()})
        if req.get("fail"):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota exhausted (test)")


def serve(args):
    svc = TokenService()
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        NAME: grpc.unary_stream_rpc_method_handler(svc.stream, request_deserializer=identity,
                                                   response_serializer=identity)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    print(f"listening {port}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop(1).wait()
    if args.log:
        with open(args.log, "w") as f:
            for line in svc.sent:
                f.write(json.dumps(line) + "\n")
    return 0


def call(args):
    req = {"messages": args.messages, "itl_ms": args.itl_ms, "pause_after": args.pause_after,
           "pause_ms": args.pause_ms, "fail": args.fail}
    with grpc.insecure_channel(f"127.0.0.1:{args.port}") as channel:
        stream = channel.unary_stream(METHOD, request_serializer=identity, response_deserializer=identity)
        got, code, details = 0, grpc.StatusCode.OK, ""
        try:
            for _ in stream(json.dumps(req).encode(), timeout=60):
                got += 1
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
    print(json.dumps({"messages": got, "status": code.value[0], "details": details}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["server", "client"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log")
    ap.add_argument("--messages", type=int, default=8)
    ap.add_argument("--itl-ms", type=float, default=10)
    ap.add_argument("--pause-after", type=int, default=0)
    ap.add_argument("--pause-ms", type=float, default=0)
    ap.add_argument("--fail", action="store_true")
    a = ap.parse_args()
    return serve(a) if a.mode == "server" else call(a)


if __name__ == "__main__":
    sys.exit(main())
