#!/usr/bin/env python3
"""The HTTP/2 tests' oracle: tshark (Wireshark's dissector, not ours) reads a
capture of h2c traffic and this script sums, per TCP connection and HTTP/2
stream of the server's direction, what tshark dissected:

  {"connections": [{"client_port": 41234, "streams": {"1": {
      "data_frames": 18, "data_bytes": 4321, "data_end_seqs": [...], "end_stream": true}}}],
   "errors": []}

data_end_seqs: for each DATA frame, the TCP sequence number (32-bit, as on the
wire) just past its last byte. tshark names each frame's header fields in the
packet where the frame completes, not its offset; the offset follows from the
frames' lengths, since the server's bytes are nothing but frames (9-byte header +
length) from its first byte (SYN-ACK sequence + 1). Each frame end computed that
way must fall inside the packet tshark put it in, and the frames must cover
every byte sent: when they do not (tshark lost a frame, a segment is missing)
the connection is listed in "errors" and no numbers are given for it.

With --keylog (TLS session keys a client wrote, curl's SSLKEYLOGFILE) the
capture is h2 over TLS: tshark decrypts it and the frames are counted the same
way, but their TCP sequences are those of the TLS records around them, so no
data_end_seqs are given; a connection tshark could not decrypt (no frame at all)
is an error.

  tshark_h2.py --pcap FILE --port SERVER_PORT [--keylog FILE] [--tshark /usr/bin/tshark]
"""
import argparse
import json
import subprocess
import sys

from tshark_fields import as_ints, field_rows

FIELDS = ["tcp.stream", "tcp.srcport", "tcp.flags.syn", "tcp.flags.ack", "tcp.seq_raw", "tcp.len",
          "http2.streamid", "http2.type", "http2.length", "http2.flags"]
DATA, HEADER_LEN, END_STREAM, PADDED = 0, 9, 0x1, 0x8


def tshark_rows(tshark, pcap, port, keylog):
    decode = ["-d", f"tcp.port=={port},tls", "-o", f"tls.keylog_file:{keylog}"] if keylog else \
        ["-d", f"tcp.port=={port},http2"]
    yield from field_rows(tshark, pcap, decode, FIELDS)


class Direction:
    """The server's side of one connection: its frames in tshark's order."""

    def __init__(self, tls):
        self.tls = tls         # frames inside TLS records: counted, not placed
        self.frames = 0
        self.isn = None        # SYN-ACK sequence
        self.next_seq = 0      # highest sequence seen just past payload (relative)
        self.offset = 0        # end of the frames so far (relative to the first byte)
        self.streams = {}
        self.error = None

    def add_packet(self, seq_raw, length, frames):
        rel_start = (seq_raw - self.isn - 1) & 0xFFFFFFFF
        self.next_seq = max(self.next_seq, rel_start + length)
        for stream_id, ftype, flen, flags in frames:
            self.frames += 1
            self.offset += HEADER_LEN + flen
            if not self.tls and not rel_start < self.offset <= rel_start + length:
                self.error = self.error or f"frame end {self.offset} outside its packet [{rel_start},{rel_start + length}]"
            if ftype != DATA:
                continue
            if flags & PADDED:
                self.error = self.error or "padded DATA frames: payload length not summed"
            s = self.streams.setdefault(str(stream_id), {"data_frames": 0, "data_bytes": 0, "data_end_seqs": [],
                                                          "end_stream": False})
            s["data_frames"] += 1
            s["data_bytes"] += flen
            if not self.tls:
                s["data_end_seqs"].append((self.isn + 1 + self.offset) & 0xFFFFFFFF)
            s["end_stream"] = s["end_stream"] or bool(flags & END_STREAM)


def dissect(tshark, pcap, port, keylog=None):
    conns, client_ports = {}, {}
    for row in tshark_rows(tshark, pcap, port, keylog):
        if row["tcp.srcport"] != str(port):
            if row["tcp.flags.syn"] in ("1", "True") and row["tcp.flags.ack"] in ("0", "False"):
                client_ports[row["tcp.stream"]] = int(row["tcp.srcport"])
            continue
        d = conns.setdefault(row["tcp.stream"], Direction(tls=bool(keylog)))
        seq = int(row["tcp.seq_raw"])
        if row["tcp.flags.syn"] in ("1", "True"):
            d.isn = seq
            continue
        if d.isn is None:
            d.error = d.error or "no SYN-ACK in the capture: start the capture before the connection"
            continue
        types, ids, lens, flags = (as_ints(row[f]) for f in ("http2.type", "http2.streamid", "http2.length",
                                                             "http2.flags"))
        if not (len(types) == len(ids) == len(lens) == len(flags)):
            d.error = d.error or "frame fields of unequal counts in one packet"
            continue
        d.add_packet(seq, int(row["tcp.len"] or 0), list(zip(ids, types, lens, flags)))
    result = {"connections": [], "errors": []}
    for key, d in conns.items():
        if d.error is None and d.tls and d.frames == 0:
            d.error = "no HTTP/2 frame decrypted (keys missing from the key log?)"
        if d.error is None and not d.tls and d.offset != d.next_seq:
            d.error = f"frames cover {d.offset} of the {d.next_seq} bytes sent"
        port_of = client_ports.get(key, 0)
        if d.error:
            result["errors"].append({"client_port": port_of, "error": d.error})
        else:
            result["connections"].append({"client_port": port_of, "streams": d.streams})
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pcap", required=True)
    ap.add_argument("--port", type=int, required=True, help="the h2c server's port")
    ap.add_argument("--keylog", help="TLS key log (SSLKEYLOGFILE): the capture is h2 over TLS")
    ap.add_argument("--tshark", default="/usr/bin/tshark")
    a = ap.parse_args()
    try:
        json.dump(dissect(a.tshark, a.pcap, a.port, a.keylog), sys.stdout)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"tshark_h2.py: {e}", file=sys.stderr)
        return 1
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
