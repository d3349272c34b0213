#!/usr/bin/python3
"""A gateway that buffers whole responses: the signature of a proxy that
buffers (or compresses) text/event-stream. Reads each request from its client,
forwards it to the upstream on a keep-alive connection, reads the upstream's
chunked response to its end and only then writes it to the client: one send
per chunk, back to back (a burst; small sends keep every event within what
the agent copies per syscall).

usage: buffering_gateway.py LISTEN_PORT UPSTREAM_PORT
Prints "listening <port>" once it accepts connections.
"""
import socket
import sys
import threading


def read_until(sock, buf, marker):
    while marker not in buf:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    at = buf.index(marker) + len(marker)
    return buf[:at], buf[at:]


def read_exact(sock, buf, n):
    while len(buf) < n:
        data = sock.recv(65536)
        if not data:
            return None, buf
        buf += data
    return buf[:n], buf[n:]


def content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def read_chunked(sock, buf):
    """The chunks (framing included) up to and including the last one."""
    body = []
    while True:
        size_line, buf = read_until(sock, buf, b"\r\n")
        if size_line is None:
            return None, buf
        size = int(size_line.split(b";")[0].strip(), 16)
        data, buf = read_exact(sock, buf, size + 2)
        if data is None:
            return None, buf
        body.append(size_line + data)
        if size == 0:
            return body, buf


def serve(client, upstream_port):
    upstream = socket.create_connection(("127.0.0.1", upstream_port))
    cbuf, ubuf = b"", b""
    try:
        while True:
            head, cbuf = read_until(client, cbuf, b"\r\n\r\n")
            if head is None:
                return
            body, cbuf = read_exact(client, cbuf, content_length(head))
            if body is None:
                return
            upstream.sendall(head + body)
            rhead, ubuf = read_until(upstream, ubuf, b"\r\n\r\n")
            if rhead is None:
                return
            if b"chunked" in rhead.lower():
                rbody, ubuf = read_chunked(upstream, ubuf)
            else:
                rbody, ubuf = read_exact(upstream, ubuf, content_length(rhead))
                rbody = None if rbody is None else [rbody]
            if rbody is None:
                return
            client.sendall(rhead)
            for piece in rbody:
                client.sendall(piece)
    except OSError:
        pass
    finally:
        upstream.close()
        client.close()


def main():
    listen_port, upstream_port = int(sys.argv[1]), int(sys.argv[2])
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(64)
    print("listening", listen_port, flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client, upstream_port), daemon=True).start()


if __name__ == "__main__":
    main()
