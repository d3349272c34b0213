"""tshark's packet fields as rows: the one runner the oracles share
(tshark_h2.py, tshark_ws.py). Tab-separated fields, every occurrence of a
field joined by ','; a row per packet that has them all."""
import subprocess


def field_rows(tshark, pcap, decode, fields, options=(), display_filter=None):
    cmd = [tshark, "-n", "-r", pcap, *decode, "-o", "tcp.desegment_tcp_streams:TRUE", *options,
           "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
    if display_filter:
        cmd += ["-Y", display_filter]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        cols = line.split("\t")
        if len(cols) == len(fields):
            yield dict(zip(fields, cols))


def as_ints(value):
    return [int(v, 0) for v in value.split(",") if v != ""]
