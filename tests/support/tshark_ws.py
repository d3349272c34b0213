#!/usr/bin/env python3
"""The realtime (WebSocket) tests' oracle: tshark (Wireshark's dissector, not
ours) reads a capture of one WebSocket connection to PORT and this script
lists, per direction, the frames tshark dissected after the HTTP/1.1 Upgrade:

  {"port": 43833, "tcp_stream": 0, "client_port": 46518, "streams_on_port": [0],
   "status": 101, "extensions": "permessage-deflate",
   "server": {"upgrade_bytes": 175, "frames": 14, "payload_bytes": 5012,
              "opcodes": {"text": 13, "close": 1}, "fin": 14, "rsv1": 12, "masked": 0,
              "bytes": 4580,
              "frame_list": [{"opcode": 1, "fin": true, "rsv1": true, "masked": false,
                              "payload_len": 215, "header_len": 4, "last_byte_seq": 395,
                              "end_seq_raw": 1986505646, "packet": 15}, ...]},
   "client": {... the same for the client's (masked) frames ...},
   "errors": []}

upgrade_bytes: the HTTP request (client) or response (server) before the
first frame. Each frame's offset follows from the lengths, since after the
HTTP head a direction's bytes are nothing but frames: header 2 bytes, + 2 or 8
of extended length (payload_len >= 126 / >= 65536), + 4 of masking key
(client frames); then the payload (on the wire: compressed when rsv1).
last_byte_seq: the relative TCP sequence number (tcp.seq, 1 = the direction's
first byte) of the frame's last byte, which is also the count of the
direction's bytes up to and including it; end_seq_raw: the raw 32-bit sequence
number just past the frame, as on the wire. packet: the capture frame in which
tshark dissected it (where its last byte arrived). bytes: the direction's
payload bytes in the capture (the frames must cover them exactly).

Checks, each failing one listed in "errors" (the numbers are then not to be
trusted): every frame's last byte lies inside the packet tshark put it in;
the frames cover the direction's bytes exactly; the capture has the SYN and
the upgrade. Retransmitted segments carry no new frames and are skipped.

With --keylog (TLS session keys, e.g. node --tls-keylog=FILE) the connection
is WebSocket over TLS: tshark decrypts it and the frames are counted the same
way, but TCP offsets are those of the TLS records around them, so
upgrade_bytes, bytes, last_byte_seq and end_seq_raw are left out and only the
lists are checked (a direction with no frame decrypted is an error).

  tshark_ws.py --pcap FILE --port SERVER_PORT [--client-port N | --stream N]
               [--keylog FILE] [--no-frame-list] [--tshark /usr/bin/tshark]

Without --client-port/--stream the first TCP stream to PORT in the capture is
taken (streams_on_port lists them all).
"""
import argparse
import json
import subprocess
import sys

from tshark_fields import as_ints, field_rows

FIELDS = ["frame.number", "tcp.stream", "tcp.srcport", "tcp.dstport", "tcp.flags.syn", "tcp.flags.ack", "tcp.seq",
          "tcp.seq_raw", "tcp.len", "tcp.analysis.retransmission", "websocket.fin", "websocket.rsv",
          "websocket.opcode", "websocket.mask", "websocket.payload_length", "websocket.payload_length_ext_16",
          "websocket.payload_length_ext_64"]
HTTP_FIELDS = ["frame.number", "tcp.stream", "tcp.srcport", "tcp.seq", "tcp.len", "tcp.payload",
               "http.response.code", "http.sec_websocket_extensions"]
OPCODES = {0: "continuation", 1: "text", 2: "binary", 8: "close", 9: "ping", 10: "pong"}
RSV1 = 0x4  # tshark's websocket.rsv: the three RSV bits, RSV1 the highest


def run_tshark(tshark, pcap, port, keylog, fields, display_filter=None):
    if keylog:
        decode = ["-d", f"tcp.port=={port},tls", "-d", f"tls.port=={port},http", "-o", f"tls.keylog_file:{keylog}"]
    else:
        decode = ["-d", f"tcp.port=={port},http"]
    yield from field_rows(tshark, pcap, decode, fields, ("-o", "tcp.relative_sequence_numbers:TRUE"), display_filter)


def as_bools(value):
    return [v in ("1", "True", "true") for v in value.split(",") if v != ""]


def truthy(value):
    return value in ("1", "True", "true")


class Direction:
    def __init__(self, name, tls, frame_list):
        self.name = name
        self.tls = tls
        self.keep_list = frame_list
        self.isn = None           # raw sequence of the SYN / SYN-ACK
        self.upgrade_end = None   # offset just past the HTTP head (relative: 0 = first byte)
        self.offset = None        # end of the frames so far
        self.next_seq = 0         # highest offset seen just past payload
        self.frames = []
        self.error = None

    def fail(self, msg):
        self.error = self.error or f"{self.name}: {msg}"

    def add_packet(self, number, rel_seq, length, frames):
        rel_start = rel_seq - 1   # tcp.seq is 1 for the first payload byte
        if length > 0:            # (a FIN takes a sequence number, not a byte)
            self.next_seq = max(self.next_seq, rel_start + length)
        for fin, rsv, opcode, masked, plen in frames:
            header = 2 + (2 if 126 <= plen < 65536 else 8 if plen >= 65536 else 0) + (4 if masked else 0)
            frame = {"opcode": opcode, "fin": fin, "rsv1": bool(rsv & RSV1), "masked": masked, "payload_len": plen,
                     "header_len": header, "packet": number}
            if not self.tls:
                if self.offset is None:
                    if self.upgrade_end is None:
                        self.fail(f"frame in packet {number} before the HTTP upgrade was seen")
                        self.offset = 0
                    else:
                        self.offset = self.upgrade_end
                self.offset += header + plen
                if not rel_start < self.offset <= rel_start + length:
                    self.fail(f"frame end {self.offset} outside its packet {number} [{rel_start},{rel_start + length}]")
                frame["last_byte_seq"] = self.offset
                frame["end_seq_raw"] = ((self.isn or 0) + 1 + self.offset) & 0xFFFFFFFF
            self.frames.append(frame)

    def summary(self):
        opcodes = {}
        for f in self.frames:
            name = OPCODES.get(f["opcode"], str(f["opcode"]))
            opcodes[name] = opcodes.get(name, 0) + 1
        out = {"frames": len(self.frames), "payload_bytes": sum(f["payload_len"] for f in self.frames),
               "opcodes": opcodes, "fin": sum(f["fin"] for f in self.frames),
               "rsv1": sum(f["rsv1"] for f in self.frames), "masked": sum(f["masked"] for f in self.frames)}
        if not self.tls:
            out = {"upgrade_bytes": self.upgrade_end, **out, "bytes": self.next_seq}
        if self.keep_list:
            out["frame_list"] = self.frames
        return out

    def finish(self):
        if self.tls:
            if not self.frames:
                self.fail("no WebSocket frame decrypted (keys missing from the key log?)")
            return
        if self.isn is None:
            self.fail("no SYN in the capture: start the capture before the connection")
        if self.upgrade_end is None:
            self.fail("no HTTP upgrade head found")
        end = self.offset if self.offset is not None else self.upgrade_end
        if end is not None and end != self.next_seq:
            self.fail(f"frames cover {end} of the {self.next_seq} bytes sent")


def dissect(tshark, pcap, port, client_port=None, stream=None, keylog=None, frame_list=True):
    rows = list(run_tshark(tshark, pcap, port, keylog, FIELDS))
    streams = []
    for r in rows:
        if port in (int(r["tcp.srcport"] or 0), int(r["tcp.dstport"] or 0)) and int(r["tcp.stream"]) not in streams:
            if client_port is not None and client_port not in (int(r["tcp.srcport"]), int(r["tcp.dstport"])):
                continue
            streams.append(int(r["tcp.stream"]))
    result = {"port": port, "tcp_stream": None, "client_port": None, "streams_on_port": sorted(streams),
              "status": None, "extensions": None, "server": None, "client": None, "errors": []}
    if stream is None:
        if not streams:
            result["errors"].append(f"no TCP stream to port {port} in the capture")
            return result
        stream = streams[0]
    result["tcp_stream"] = stream
    server = Direction("server", bool(keylog), frame_list)
    client = Direction("client", bool(keylog), frame_list)

    # The HTTP heads: where each direction's frames start.
    for r in run_tshark(tshark, pcap, port, keylog, HTTP_FIELDS, f"tcp.stream=={stream} && http"):
        d = server if int(r["tcp.srcport"]) == port else client
        if d is server:
            if r["http.response.code"]:
                result["status"] = int(r["http.response.code"].split(",")[0])
            if r["http.sec_websocket_extensions"]:
                result["extensions"] = r["http.sec_websocket_extensions"]
        if keylog or d.upgrade_end is not None:
            continue
        payload = bytes.fromhex(r["tcp.payload"].replace(":", ""))
        at = payload.find(b"\r\n\r\n")
        if at < 0:
            d.fail(f"the HTTP head does not end in packet {r['frame.number']}")
            continue
        d.upgrade_end = int(r["tcp.seq"]) - 1 + at + 4

    for r in rows:
        if int(r["tcp.stream"]) != stream:
            continue
        from_server = int(r["tcp.srcport"]) == port
        d = server if from_server else client
        if not from_server and result["client_port"] is None:
            result["client_port"] = int(r["tcp.srcport"])
        if truthy(r["tcp.flags.syn"]):
            d.isn = int(r["tcp.seq_raw"])
            continue
        if r["tcp.analysis.retransmission"] and int(r["tcp.seq"] or 0) - 1 + int(r["tcp.len"] or 0) <= d.next_seq:
            continue  # a segment sent again, no new byte: its frames were counted the first time
        fins, rsvs, ops, masks, lens = (as_bools(r["websocket.fin"]), as_ints(r["websocket.rsv"]),
                                        as_ints(r["websocket.opcode"]), as_bools(r["websocket.mask"]),
                                        as_ints(r["websocket.payload_length"]))
        if not (len(fins) == len(rsvs) == len(ops) == len(masks) == len(lens)):
            d.fail(f"frame fields of unequal counts in packet {r['frame.number']}")
            continue
        # Extended lengths are listed only for the frames that have them, in order.
        ext16, ext64 = iter(as_ints(r["websocket.payload_length_ext_16"])), \
            iter(as_ints(r["websocket.payload_length_ext_64"]))
        frames = []
        try:
            for fin, rsv, op, masked, plen in zip(fins, rsvs, ops, masks, lens):
                if plen == 126:
                    plen = next(ext16)
                elif plen == 127:
                    plen = next(ext64)
                frames.append((fin, rsv, op, masked, plen))
        except StopIteration:
            d.fail(f"extended lengths missing in packet {r['frame.number']}")
            continue
        d.add_packet(int(r["frame.number"]), int(r["tcp.seq"] or 0), int(r["tcp.len"] or 0), frames)

    for d in (server, client):
        d.finish()
        if d.error:
            result["errors"].append(d.error)
    result["server"], result["client"] = server.summary(), client.summary()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pcap", required=True)
    ap.add_argument("--port", type=int, required=True, help="the WebSocket server's (or gateway's) port")
    sel = ap.add_mutually_exclusive_group()
    sel.add_argument("--client-port", type=int, help="the connection from this client port")
    sel.add_argument("--stream", type=int, help="tshark's tcp.stream index")
    ap.add_argument("--keylog", help="TLS key log: the capture is WebSocket over TLS")
    ap.add_argument("--no-frame-list", action="store_true", help="counts only, no per-frame list")
    ap.add_argument("--tshark", default="/usr/bin/tshark")
    a = ap.parse_args()
    try:
        json.dump(dissect(a.tshark, a.pcap, a.port, a.client_port, a.stream, a.keylog, not a.no_frame_list),
                  sys.stdout)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"tshark_ws.py: {e}", file=sys.stderr)
        return 1
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
