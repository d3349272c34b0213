#!/usr/bin/python3
"""An SSE server reached by HTTP/1.1 `Upgrade: h2c` (RFC 7540 3.2), with the
Debian python3-h2 library: what nginx and nghttpd do not offer without TLS.
A request that asks for the upgrade gets `101 Switching Protocols`; its
response is then HTTP/2 stream 1: `text/event-stream`, N chat-completion chunks
--itl-ms apart and `data: [DONE]`, each event in one DATA frame. A request
without the upgrade gets the same events over HTTP/1.1 (close-delimited).

  h2c_upgrade_server.py --port P [--events N] [--itl-ms MS]   # prints "listening P"
"""
import argparse
import select
import socket
import sys
import threading
import time

from h2.config import H2Configuration
from h2.connection import H2Connection


def read_request_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, rest


def events(n):
    for i in range(n):
        yield (b'data: {"id":"chatcmpl-upgrade","object":"chat.completion.chunk","model":"h2c-upgrade","choices":'
               b'[{"index":0,"delta":{"content":"tok%d"},"finish_reason":null}]}\n\n' % i)
    yield b"data: [DONE]\n\n"


def pump(sock, conn):
    """Feeds what the client sent (its preface, SETTINGS, WINDOW_UPDATE) to h2, sends h2's replies."""
    while select.select([sock], [], [], 0)[0]:
        data = sock.recv(65536)
        if not data:
            return False
        conn.receive_data(data)
    out = conn.data_to_send()
    if out:
        sock.sendall(out)
    return True


def serve_upgraded(sock, settings, args):
    sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
    conn = H2Connection(H2Configuration(client_side=False))
    conn.initiate_upgrade_connection(settings.encode())  # the HTTP2-Settings value, base64 as sent
    conn.send_headers(1, [(":status", "200"), ("content-type", "text/event-stream"), ("cache-control", "no-cache")])
    pump(sock, conn)
    for i, ev in enumerate(events(args.events)):
        time.sleep(args.itl_ms / 1e3 if i else 0.02)
        if not pump(sock, conn):
            return
        conn.send_data(1, ev)
        sock.sendall(conn.data_to_send())
    conn.end_stream(1)
    sock.sendall(conn.data_to_send())
    sock.settimeout(5)
    while sock.recv(65536):  # until the client closes (curl sends GOAWAY, then closes)
        pass


def handle(sock, args):
    with sock:
        try:
            headers, _ = read_request_head(sock)
            if headers is None:
                return
            if "h2c" in headers.get("upgrade", "") and "http2-settings" in headers:
                serve_upgraded(sock, headers["http2-settings"], args)
                return
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            for i, ev in enumerate(events(args.events)):
                time.sleep(args.itl_ms / 1e3 if i else 0.02)
                sock.sendall(ev)
        except (OSError, ValueError) as e:
            print(f"connection error: {e}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--itl-ms", type=float, default=10)
    a = ap.parse_args()
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", a.port))
    lsock.listen(16)
    print(f"listening {lsock.getsockname()[1]}", flush=True)
    while True:
        s, _ = lsock.accept()
        threading.Thread(target=handle, args=(s, a), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
