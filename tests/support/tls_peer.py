#!/usr/bin/python3
"""Python `ssl` (the system libssl) as a TLS streaming server or client, with
ground-truth logs: CLOCK_MONOTONIC read right after each write / read returns,
kept in memory and written at exit (SIGTERM or the end of the run).

  tls_peer.py server --port N --cert F --key F [--itl-ms MS] [--ttft-ms MS]
                     [--pause-after N --pause-ms MS] [--log FILE]
      OpenAI-style chat completion streams over HTTP/1.1 + TLS, chunked, one
      SSL write per event; "max_tokens" in the request body sets the count;
      --pause-after N holds content event N (0-based) back --pause-ms longer.
      Prints "listening <port>".
  tls_peer.py client --port N [--tokens N] [--requests R] [--interval-ms MS]
                     [--import-after-ms MS] [--ready-file F] [--log FILE]
                     [--rcvbuf B] [--recv-pause-ms MS] [--recv-bytes N] [--poll]
      R requests over new TLS connections; with --import-after-ms the ssl
      module (and so libssl) is loaded only that long after start, and
      --ready-file is written once it is. --rcvbuf, --recv-pause-ms and
      --recv-bytes make a slow reader (small window, a pause before each read
      of at most N bytes). --poll waits in poll and then reads without
      blocking, as event-loop clients do, so that the read's off_cpu_ns is
      not its wait for data (without it, off_cpu_ns is -1: not known).

  tls_peer.py loop --cert F --key F [--seconds S] [--size N] [--ready-file F --go-file F]
      A TLS connection over loopback TCP inside one process, non-HTTP bytes
      written (N per SSL write) and drained as fast as they go for S seconds;
      prints {"writes_per_sec": ...} (the benchmark's libssl user). With
      --ready-file it is written once connected, and the writes start when
      the --go-file exists (an agent started meanwhile targets the process).

Log lines (NDJSON): {"type":"request"|"send"|"write"|"event"|"import", ...}
with "mono_ns", "req" (request number, a connection each) and per event
"event_index", "kind" (role|content|finish|done) and "off_cpu_ns": how long
the thread was off its CPU during the clocked SSL call, by which the clock
may be late. Only timings and sizes are logged, never payload text.
"""
import argparse
import json
import os
import select
import signal
import socket
import sys
import threading
import time

LOG = []
LOG_LOCK = threading.Lock()


def log(**fields):
    with LOG_LOCK:
        LOG.append(fields)


def write_log(path):
    if not path:
        return
    with LOG_LOCK, open(path, "w") as f:
        for line in LOG:
            f.write(json.dumps(line) + "\n")


def off_cpu_ns(wall0, wall1, cpu0):
    """How long this thread was not running in [wall0, wall1]: the wall time
    less its own CPU time (which, with steal-time accounting, leaves out what
    the host took from this VM's CPU; and any preemption). A clock read after
    such a gap may be late by it."""
    return max(0, (wall1 - wall0) - (time.thread_time_ns() - cpu0))


def sleep_until(t_ns):
    while True:
        left = t_ns - time.monotonic_ns()
        if left <= 0:
            return
        time.sleep(left / 1e9)


# ---- server -----------------------------------------------------------------

def chunk(text):
    data = text.encode()
    return b"%x\r\n" % len(data) + data + b"\r\n"


def event(prefix, inner, finish):
    return 'data: %s[{"index":0,%s,"logprobs":null,"finish_reason":%s}]}\n\n' % (prefix, inner, finish)


def read_request(conn, buf):
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None, None, buf
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None, None, rest
        rest += data
    return head, rest[:length], rest[length:]


def stream(conn, req, body, args, peer_port):
    try:
        tokens = int(json.loads(body or b"{}").get("max_tokens", args.tokens))
    except ValueError:
        tokens = args.tokens
    prefix = '{"id":"chatcmpl-%d-%d","object":"chat.completion.chunk","created":%d,"model":"tls-peer","choices":' % (
        os.getpid(), req, int(time.time()))
    events = [("role", event(prefix, '"delta":{"role":"assistant","content":""}', "null"))]
    for i in range(tokens):
        events.append(("content", event(prefix, '"delta":{"content":" tok%d"}' % i, "null")))
    events.append(("finish", event(prefix, '"delta":{}', '"stop"')))
    events.append(("done", "data: [DONE]\n\n"))
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
    conn.sendall(head)
    last = time.monotonic_ns()
    for index, (kind, text) in enumerate(events):
        if kind == "content":
            last += int((args.ttft_ms if index == 1 else args.itl_ms) * 1e6)
            if args.pause_ms and index - 1 == args.pause_after:
                last += int(args.pause_ms * 1e6)
            sleep_until(last)
        data = chunk(text)
        cpu0, wall0 = time.thread_time_ns(), time.monotonic_ns()
        n = conn.send(data)  # one SSL write per event; the log's time is its return
        t = time.monotonic_ns()
        log(type="send", req=req, event_index=index, kind=kind, mono_ns=t, bytes=n, peer_port=peer_port,
            call_ns=t - wall0, off_cpu_ns=off_cpu_ns(wall0, t, cpu0))
        if n != len(data):
            conn.sendall(data[n:])
    conn.sendall(b"0\r\n\r\n")


def serve(conn, args, counter):
    peer_port = conn.getpeername()[1]
    buf = b""
    try:
        conn.do_handshake()
        while True:
            head, body, buf = read_request(conn, buf)
            if head is None:
                return
            with counter["lock"]:
                req = counter["n"]
                counter["n"] += 1
            log(type="request", req=req, mono_ns=time.monotonic_ns(), peer_port=peer_port)
            stream(conn, req, body, args, peer_port)
    except (OSError, ValueError):
        pass
    finally:
        conn.close()


def run_server(args):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    print("listening", listener.getsockname()[1], flush=True)
    counter = {"n": 0, "lock": threading.Lock()}
    while True:
        raw, _ = listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = ctx.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=serve, args=(conn, args, counter), daemon=True).start()


# ---- client -----------------------------------------------------------------

class Events:
    """Splits an SSE body (chunked framing removed) into events, by kind."""

    def __init__(self):
        self.buf = b""
        self.index = 0

    def feed(self, data):
        self.buf += data
        kinds = []
        while b"\n\n" in self.buf:
            ev, _, self.buf = self.buf.partition(b"\n\n")
            if b"[DONE]" in ev:
                kinds.append("done")
            elif b'"role"' in ev:
                kinds.append("role")
            elif b'"finish_reason":"stop"' in ev:
                kinds.append("finish")
            elif ev.startswith(b"data:"):
                kinds.append("content")
        return kinds


def dechunk(state, data):
    """Body bytes of chunked framing; state keeps partial lines between reads."""
    state["raw"] += data
    out = b""
    while True:
        if state["left"] == 0:
            if b"\r\n" not in state["raw"]:
                return out, False
            line, _, state["raw"] = state["raw"].partition(b"\r\n")
            if not line:
                continue  # the CRLF after a chunk
            state["left"] = int(line.split(b";")[0], 16)
            if state["left"] == 0:
                return out, True
        take = state["raw"][:state["left"]]
        state["raw"] = state["raw"][len(take):]
        state["left"] -= len(take)
        out += take
        if not state["raw"]:
            return out, False


def one_request(ssl, ctx, args, req):
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if args.rcvbuf:  # before connecting: the window it offers
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
    raw.connect(("127.0.0.1", args.port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = ctx.wrap_socket(raw, server_hostname="localhost")
    body = json.dumps({"model": "m", "stream": True, "max_tokens": args.tokens,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
               b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    conn.sendall(request)
    log(type="write", req=req, mono_ns=time.monotonic_ns(), local_port=conn.getsockname()[1])
    poller = None
    if args.poll:  # wait in poll, so that the timed SSL_read does not block
        conn.setblocking(False)
        poller = select.poll()
        poller.register(conn, select.POLLIN)
    buf, state, events, done = b"", {"raw": b"", "left": 0}, Events(), False
    while b"\r\n\r\n" not in buf:
        data, t, off_cpu = timed_recv(ssl, conn, poller, 16384)
        if not data:
            raise ConnectionError("closed before the response head")
        buf += data
    _, _, rest = buf.partition(b"\r\n\r\n")
    pending = rest
    while not done:
        body_bytes, done = dechunk(state, pending)
        for kind in events.feed(body_bytes):
            log(type="event", req=req, event_index=events.index, kind=kind, mono_ns=t, off_cpu_ns=off_cpu)
            events.index += 1
        if done:
            break
        if args.recv_pause_ms:  # a slow reader: the server's socket buffer fills
            time.sleep(args.recv_pause_ms / 1e3)
        pending, t, off_cpu = timed_recv(ssl, conn, poller, args.recv_bytes)
        if not pending:
            break
    conn.close()
    return events.index


def timed_recv(ssl, conn, poller, size):
    """One SSL_read that returned bytes (or the end), its return's clock, and
    how long this thread was off its CPU during that read (-1: not known, the
    read blocked waiting for data)."""
    if poller is None:
        data = conn.recv(size)
        return data, time.monotonic_ns(), -1
    while True:
        if not conn.pending():
            poller.poll()
        cpu0, wall0 = time.thread_time_ns(), time.monotonic_ns()
        try:
            data = conn.recv(size)
        except (ssl.SSLWantReadError, BlockingIOError):
            continue
        t = time.monotonic_ns()  # the read's return: before any parsing, which would add its time
        return data, t, off_cpu_ns(wall0, t, cpu0)


def run_client(args):
    start = time.monotonic_ns()
    if args.import_after_ms:
        sleep_until(start + int(args.import_after_ms * 1e6))
    import ssl  # loads _ssl, and with it libssl
    log(type="import", mono_ns=time.monotonic_ns())
    if args.ready_file:
        open(args.ready_file, "w").close()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    failures = 0
    for req in range(args.requests):
        if req and args.interval_ms:
            time.sleep(args.interval_ms / 1e3)
        try:
            one_request(ssl, ctx, args, req)
        except OSError as e:
            failures += 1
            print("request %d failed: %s" % (req, e.__class__.__name__), file=sys.stderr)
    return 1 if failures else 0


# ---- loop -------------------------------------------------------------------

def run_loop(args):
    import ssl
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(args.cert, args.key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    accepted = {}

    def drain():
        raw, _ = listener.accept()
        conn = server_ctx.wrap_socket(raw, server_side=True)
        accepted["conn"] = conn
        while conn.recv(65536):
            pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    conn = client_ctx.wrap_socket(socket.create_connection(listener.getsockname()))
    payload = bytes([0x17, 0x03]) + bytes(range(256)) * (args.size // 256 + 1)
    payload = payload[:args.size]
    if args.ready_file:  # connected; the timed writes wait for --go-file
        open(args.ready_file, "w").close()
    while args.go_file and not os.path.exists(args.go_file):
        time.sleep(0.01)
    writes, end = 0, time.monotonic() + args.seconds
    while time.monotonic() < end:
        for _ in range(100):
            conn.sendall(payload)
        writes += 100
    elapsed = args.seconds + (time.monotonic() - end)
    conn.close()
    reader.join(2)
    print(json.dumps({"writes_per_sec": round(writes / elapsed)}))
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client", "loop"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--ttft-ms", type=float, default=20)
    p.add_argument("--itl-ms", type=float, default=10)
    p.add_argument("--pause-after", type=int, default=-1)
    p.add_argument("--pause-ms", type=float, default=0)
    p.add_argument("--requests", type=int, default=1)
    p.add_argument("--interval-ms", type=float, default=0)
    p.add_argument("--import-after-ms", type=float, default=0)
    p.add_argument("--ready-file")
    p.add_argument("--go-file")
    p.add_argument("--rcvbuf", type=int, default=0)
    p.add_argument("--recv-pause-ms", type=float, default=0)
    p.add_argument("--recv-bytes", type=int, default=16384)
    p.add_argument("--poll", action="store_true")
    p.add_argument("--log")
    p.add_argument("--seconds", type=float, default=1)
    p.add_argument("--size", type=int, default=256)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (write_log(args.log), os._exit(0)))
    if args.mode == "server":
        run_server(args)
        return 0
    if args.mode == "loop":
        return run_loop(args)
    rc = run_client(args)
    write_log(args.log)
    return rc


if __name__ == "__main__":
    sys.exit(main())
