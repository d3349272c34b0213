#!/usr/bin/env python3
"""An h2c client (prior knowledge, raw socket, no HTTP/2 library) that stops
granting flow-control window to one of its streams: the HTTP/2 tests' "peer
that never reads". It announces a small SETTINGS_INITIAL_WINDOW_SIZE and opens
two chat-completion streams on one connection:

  stream 1 (held):   no WINDOW_UPDATE for the stream; its window reaches 0 and
                     the server may not send on it.
  stream 3 (normal): every DATA frame is granted back at once (stream and
                     connection), so it runs to its end unaffected.

The connection window is always granted back, so only stream 1's own window
holds it. Once stream 3 ended, stream 1 stays held --hold-ms more, then gets
back what it used (its window is the initial one again) and is read to its end
like stream 3: the server drains what it held in window-sized frames, not in
one large write. One JSON line at the end:
  {"local_port": 41234, "streams": {"1": {"events": 30, "bytes": 7000, "ended": true}, "3": {...}},
   "held_from_ns": t0, "released_ns": t1}
(CLOCK_MONOTONIC). Exit status 0 when both streams ended, 1 otherwise.

  h2_stuck_reader.py --port P [--tokens N] [--window BYTES] [--hold-ms MS]
"""
import argparse
import json
import socket
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
HELD, NORMAL = 1, 3


def frame(ftype, flags, stream_id, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags, stream_id) + payload


def hpack_literal(name, value):
    """Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    def string(s):
        b = s.encode()
        assert len(b) < 127, "short strings only"
        return bytes([len(b)]) + b
    return b"\x00" + string(name) + string(value)


def request(stream_id, port, body):
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"),
              (":authority", f"127.0.0.1:{port}"), ("content-type", "application/json"),
              ("content-length", str(len(body)))]
    block = b"".join(hpack_literal(n, v) for n, v in fields)
    return frame(HEADERS, END_HEADERS, stream_id, block) + frame(DATA, END_STREAM, stream_id, body)


def window_update(stream_id, n):
    return frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">I", n))


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def next_frame(self):
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    ftype, flags, sid = struct.unpack(">BBI", self.buf[3:9])
                    payload, self.buf = self.buf[9:9 + length], self.buf[9 + length:]
                    return ftype, flags, sid & 0x7FFFFFFF, payload
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk


def run(args):
    sock = socket.create_connection(("127.0.0.1", args.port), timeout=30)
    body = json.dumps({"model": "h2-stuck", "stream": True, "max_tokens": args.tokens,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, args.window)  # no push; small stream window
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings) + request(HELD, args.port, body) +
                 request(NORMAL, args.port, body))
    streams = {sid: {"events": 0, "bytes": 0, "ended": False, "text": ""} for sid in (HELD, NORMAL)}
    out = {"local_port": sock.getsockname()[1], "held_from_ns": time.monotonic_ns(), "released_ns": 0}
    reader, release_at = Reader(sock), None
    while not all(s["ended"] for s in streams.values()):
        if release_at is not None and out["released_ns"] == 0 and time.monotonic() >= release_at:
            sock.sendall(window_update(HELD, max(1, streams[HELD]["bytes"])))
            out["released_ns"] = time.monotonic_ns()
        sock.settimeout(0.05 if release_at is not None and out["released_ns"] == 0 else 30)
        try:
            ftype, flags, sid, payload = reader.next_frame()
        except socket.timeout:
            continue
        if ftype == SETTINGS and not flags & ACK:
            sock.sendall(frame(SETTINGS, ACK, 0))
        elif ftype == PING and not flags & ACK:
            sock.sendall(frame(PING, ACK, 0, payload))
        elif ftype in (GOAWAY, RST_STREAM):
            raise ConnectionError(f"server sent frame type {ftype} on stream {sid}")
        elif ftype == DATA and sid in streams:
            on_data(sock, streams[sid], sid, payload, held=(sid == HELD and out["released_ns"] == 0))
            if flags & END_STREAM:
                streams[sid]["ended"] = True
                if sid == NORMAL:
                    release_at = time.monotonic() + args.hold_ms / 1e3
        elif ftype == HEADERS and flags & END_STREAM and sid in streams:
            streams[sid]["ended"] = True
    sock.close()
    for s in streams.values():
        del s["text"]
    out["streams"] = {str(k): v for k, v in streams.items()}
    return out


def on_data(sock, s, sid, payload, held):
    s["bytes"] += len(payload)
    s["text"] += payload.decode(errors="replace")
    while "\n\n" in s["text"]:
        event, s["text"] = s["text"].split("\n\n", 1)
        if event.startswith("data:"):
            s["events"] += 1
    if payload:
        grants = window_update(0, len(payload))  # the connection window always comes back
        if not held:
            grants += window_update(sid, len(payload))
        sock.sendall(grants)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=30)
    ap.add_argument("--window", type=int, default=1024, help="SETTINGS_INITIAL_WINDOW_SIZE")
    ap.add_argument("--hold-ms", type=float, default=1500)
    a = ap.parse_args()
    try:
        out = run(a)
    except (OSError, ConnectionError) as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    print(json.dumps(out), flush=True)
    return 0 if all(s["ended"] for s in out["streams"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
