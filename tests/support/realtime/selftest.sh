#!/usr/bin/env bash
# Proves the realtime (WebSocket) peers work, without the agent: server.mjs
# with the official-SDK client.mjs plain, TLS, deflate on/off, beta names,
# audio, noise, a stall and a reader that stops reading; a dumpcap capture
# dissected by tshark_ws.py and compared with the server's ground-truth log;
# then nginx and HAProxy in between, through the C++ helpers of
# tests/support/websocket_peers.h (selftest_gateways.cpp, built here).
#
#   tests/support/realtime/selftest.sh [--keep]
#
# Needs what scripts/setup.sh installs (node, npm ci here, tshark, nginx,
# haproxy, g++) and root (dumpcap on lo). Loopback only. Prints one line per
# check ("ok  - ..." / "FAIL - ..."); exit status 1 when any check failed.
# The scratch directory (logs, captures) is removed unless --keep or a failure.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$repo" || exit 1
rt=tests/support/realtime
keep=0
[ "${1:-}" = "--keep" ] && keep=1
scratch=$(mktemp -d /tmp/infertap-rt-selftest-XXXXXX)
failures=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ "$failures" -eq 0 ] && [ "$keep" -eq 0 ]; then rm -rf "$scratch"; else echo "scratch: $scratch"; fi
}
trap cleanup EXIT

say() { printf '%s - %s\n' "$1" "$2"; }
ok() { say "ok  " "$1"; }
fail() { say "FAIL" "$1"; failures=$((failures + 1)); [ -n "${2:-}" ] && sed 's/^/    /' <<<"$2" | head -20; }

for tool in node python3 dumpcap tshark openssl g++; do
  command -v "$tool" >/dev/null || { fail "$tool missing: run scripts/setup.sh"; exit 1; }
done
[ -f $rt/node_modules/openai/package.json ] && [ -f $rt/node_modules/ws/package.json ] ||
  { fail "$rt/node_modules missing: run scripts/setup.sh (npm ci there)"; exit 1; }
echo "# node $(node --version); $(node -p "'openai@' + require('./$rt/node_modules/openai/package.json').version + ', ws@' + require('./$rt/node_modules/ws/package.json').version") (GA client); beta: openai@$(node -p "require('${INFERTAP_NODE_MODULES:-/opt/infertap-test/node_modules}/openai/package.json').version" 2>/dev/null || echo missing)"

# start_server NAME ARGS...: server.mjs on an ephemeral port; sets PORT, SPID.
start_server() {
  local name=$1; shift
  node $rt/server.mjs --port 0 --log "$scratch/$name.server.ndjson" "$@" >"$scratch/$name.server.out" 2>&1 &
  SPID=$!
  pids+=("$SPID")
  PORT=""
  for _ in $(seq 200); do
    PORT=$(awk '/^PORT /{print $2; exit}' "$scratch/$name.server.out")
    [ -n "$PORT" ] && return 0
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  fail "$name: server.mjs did not start" "$(cat "$scratch/$name.server.out")"
  return 1
}
# stop_server: SIGTERM (the log is complete once it exited).
stop_server() { kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; }

# client NAME ARGS...: client.mjs, log NAME.client.ndjson, summary line NAME.client.out, exit status NAME.client.rc.
client() {
  local name=$1; shift
  node $rt/client.mjs --log "$scratch/$name.client.ndjson" "$@" >"$scratch/$name.client.out" 2>&1
  echo $? >"$scratch/$name.client.rc"
}

# check NAME SERVER_LOG_NAME [check_run.py options]: the logs of one client run
# against the server's log; prints its verdict.
check() {
  local name=$1 server=$2; shift 2
  local out
  if out=$(python3 "$scratch/check_run.py" "$scratch" "$name" "$server" "$(cat "$scratch/$name.client.rc")" "$@" 2>&1); then
    ok "$out"
  else
    fail "$out"
  fi
}

# The checkers (python, written into the scratch directory).
# check_run.py SCRATCH CLIENT SERVER RC [options]: one client run's log and summary against the server's log.
cat >"$scratch/check_run.py" <<'PY'
import argparse, json, sys
sys.excepthook = lambda t, e, tb: print(e if t is AssertionError else f"{t.__name__}: {e}")  # the verdict, no traceback
scratch, name, server, crc = sys.argv[1:5]
ap = argparse.ArgumentParser()
ap.add_argument("--tokens", type=int, required=True)
ap.add_argument("--responses", type=int, default=1)
ap.add_argument("--conn", type=int, default=0)          # the client's connection index at the server
ap.add_argument("--ext", default="")                    # substrings the negotiated extensions must hold ("none": empty)
ap.add_argument("--names", default="ga")
ap.add_argument("--audio", action="store_true")
ap.add_argument("--noise", action="store_true")
ap.add_argument("--stall", nargs=3, type=int)          # RESPONSE TOKEN MS
ap.add_argument("--backpressure", nargs=2, type=int)   # MIN_DELAY_MS MIN_BUFFERED_BYTES
ap.add_argument("--expect-fail", default="")           # the client must fail with this in its output
a = ap.parse_args(sys.argv[5:])

def lines(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []

out = open(f"{scratch}/{name}.client.out").read()
if a.expect_fail:
    assert crc != "0" and a.expect_fail in out, f"{name}: expected a failure with {a.expect_fail!r}: rc {crc}: {out}"
    print(f"{name}: client refused as expected (rc {crc}: {a.expect_fail})")
    sys.exit(0)
summary = json.loads([l for l in out.splitlines() if l.startswith('{"ok"')][-1])
assert crc == "0" and summary["ok"], f"{name}: client rc {crc}: {out}"
s = [m for m in lines(f"{scratch}/{server}.server.ndjson") if m["conn"] == a.conn]
c = lines(f"{scratch}/{name}.client.ndjson")
recv = [m for m in c if "type" in m]
ga = a.names == "ga"
text_t = "response.output_text.delta" if ga else "response.text.delta"
audio_t = "response.output_audio.delta" if ga else "response.audio.delta"
tr_t = "response.output_audio_transcript.delta" if ga else "response.audio_transcript.delta"
delta_t = audio_t if a.audio else text_t
ids = [m["response_id"] for m in s if m["type"] == "response.created"]
assert len(ids) == a.responses, f"{name}: server responses {ids}"
notes = []
for r, rid in enumerate(ids):
    sd = [m for m in s if m["response_id"] == rid and m["type"] == delta_t]
    assert [m["token"] for m in sd] == list(range(a.tokens)), f"{name}: server {rid}: tokens {[m['token'] for m in sd]}"
    cd = [m for m in recv if m["response_id"] == rid and m["type"] == delta_t]
    assert len(cd) == a.tokens, f"{name}: client {rid}: {len(cd)} {delta_t}, want {a.tokens}"
    if a.audio:
        for side, msgs in (("server", s), ("client", recv)):
            n = sum(m["response_id"] == rid and m["type"] == tr_t for m in msgs)
            assert n == a.tokens, f"{name}: {side} {rid}: {n} {tr_t}"
    done = [m for m in recv if m["response_id"] == rid and m["type"] == "response.done"]
    assert len(done) == 1, f"{name}: client {rid}: {len(done)} response.done"
    u = done[0].get("usage", {})
    assert u.get("output_tokens") == a.tokens and u.get("total_tokens") == u.get("input_tokens", 0) + a.tokens, \
        f"{name}: usage {u}"
    if a.stall and r == a.stall[0]:
        k, ms = a.stall[1], a.stall[2]
        st = [m["t_ns"] for m in sd]
        ct = [m["t_ns"] for m in cd]
        sgap, cgap = (st[k] - st[k - 1]) / 1e6, (ct[k] - ct[k - 1]) / 1e6
        other = max((st[i] - st[i - 1]) / 1e6 for i in range(1, len(st)) if i != k)
        assert sgap >= ms and cgap >= ms - 20 and other < 100, \
            f"{name}: stall: server gap {sgap:.1f} ms, client {cgap:.1f} ms, other server gaps <= {other:.1f} ms"
        notes.append(f"stall before token {k} of {rid}: server gap {sgap:.1f} ms, client gap {cgap:.1f} ms, "
                     f"other gaps <= {other:.1f} ms")
other_types = {m["type"] for m in recv if m["type"] != delta_t}
if ga:
    assert not any(t.startswith("response.text.") or t.startswith("response.audio.") for t in other_types), other_types
else:
    assert not any(".output_" in t for t in other_types), other_types
if a.noise:
    n = sum(m["type"] == "rate_limits.updated" for m in recv)
    assert n >= 2 * a.responses, f"{name}: {n} rate_limits.updated"
    notes.append(f"{n} rate_limits.updated + {sum(m['type'] == 'session.updated' for m in recv) - 1} "
                 "session.updated between the deltas")
ext = summary["extensions"]
for want in filter(None, a.ext.split(",")):
    if want == "none":
        assert ext == "", f"{name}: extensions {ext!r}, want none"
    else:
        assert want in ext, f"{name}: extensions {ext!r} lack {want}"
if a.backpressure:
    min_ms, min_buf = a.backpressure
    delay = max((m["written_ns"] - m["t_ns"]) / 1e6 for m in s if m["written_ns"] is not None)
    buf = max(m["buffered"] for m in s)
    pause = [m["t_ns"] for m in c if m.get("marker") == "pause"]
    resume = [m["t_ns"] for m in c if m.get("marker") == "resume"]
    assert pause and resume, f"{name}: no pause/resume in the client log"
    late = [m for m in recv if m["type"] == delta_t and pause[0] + 100e6 < m["t_ns"] < resume[0]]
    assert delay >= min_ms and buf >= min_buf and not late, \
        f"{name}: backpressure: max write delay {delay:.0f} ms, max buffered {buf} B, {len(late)} deltas read while paused"
    before = sum(m["type"] == delta_t and m["t_ns"] <= pause[0] for m in recv)
    notes.append(f"paused after {before} deltas for {(resume[0] - pause[0]) / 1e6:.0f} ms: server sends waited up to "
                 f"{delay:.0f} ms in Node (bufferedAmount up to {buf / 1e6:.1f} MB), none read while paused")
what = f"{a.responses} x {a.tokens} {delta_t.split('.', 1)[1]}" + (f" (+{tr_t.split('.', 1)[1]})" if a.audio else "")
print(f"{name}: {summary['sdk']} {summary['mode']}: {what} on both sides, usage ok, "
      f"extensions {ext or 'none'!r}" + "".join("; " + n for n in notes))
PY
# check_capture.py SCRATCH SERVER CLIENT CONN [--keylog FILE]: tshark_ws.py's JSON against the logs.
cat >"$scratch/check_capture.py" <<'PY'
import json, sys
sys.excepthook = lambda t, e, tb: print(e if t is AssertionError else f"{t.__name__}: {e}")
scratch, server, cl, conn = sys.argv[1:5]
tls = "--keylog" in sys.argv[5:]
t = json.load(open(f"{scratch}/{cl}.tshark_ws.json"))
s = [m for m in (json.loads(l) for l in open(f"{scratch}/{server}.server.ndjson")) if m["conn"] == int(conn)]
c = [json.loads(l) for l in open(f"{scratch}/{cl}.client.ndjson")]
sent = [m for m in c if "sent" in m]
assert t["errors"] == [] and t["status"] == 101, f"{cl}: tshark_ws.py: {t['errors']} status {t['status']}"
sv, cv = t["server"], t["client"]
frames = [f for f in sv["frame_list"] if f["opcode"] == 1]
assert len(frames) == len(s), f"{cl}: {len(frames)} text frames, server log {len(s)} messages"
assert sv["opcodes"].get("close") == 1 and cv["opcodes"].get("close") == 1, f"{cl}: close frames {sv['opcodes']} {cv['opcodes']}"
assert cv["opcodes"].get("text") == len(sent) and cv["masked"] == cv["frames"] and sv["masked"] == 0, \
    f"{cl}: client frames {cv}"
compressed = sv["rsv1"]
detail = f"{len(frames)} server text frames = {len(s)} messages in server.mjs's log"
if compressed:
    assert compressed == len(frames), f"{cl}: {compressed} of {len(frames)} frames compressed"
    wire = sum(f["payload_len"] for f in frames)
    detail += f", all RSV1 (deflate: {wire} B on the wire for {sum(m['bytes'] for m in s)} B of JSON)"
else:
    mism = [(i, f["payload_len"], m["bytes"]) for i, (f, m) in enumerate(zip(frames, s)) if f["payload_len"] != m["bytes"]]
    assert not mism, f"{cl}: payload lengths differ from the logged message sizes: {mism[:5]}"
    detail += ", each payload length = the logged message size"
if not tls:
    ends = [f["last_byte_seq"] for f in sv["frame_list"]]
    assert all(b > a for a, b in zip(ends, ends[1:])) and ends[-1] == sv["bytes"], f"{cl}: frame ends {ends[-3:]} / {sv['bytes']}"
    big = sum(f["header_len"] == 4 for f in frames) + sum(f["header_len"] == 10 for f in frames)
    detail += (f"; frame ends increasing up to the {sv['bytes']} bytes sent (after the {sv['upgrade_bytes']} B "
               f"of the 101 response; {big} frames with extended lengths)")
else:
    detail += " (TLS, decrypted with the key log)"
print(f"{cl}: {detail}; client {cv['frames']} masked frames = {len(sent)} sent + close")
PY

cert="$scratch/cert.pem" key="$scratch/key.pem"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$key" -out "$cert" >"$scratch/openssl.log" 2>&1 ||
  { fail "openssl req" "$(cat "$scratch/openssl.log")"; exit 1; }

echo "# plain, deflate"
start_server plain --tokens 30 --interval-ms 5 && {
  client plain --url "http://127.0.0.1:$PORT/v1" --responses 2 --deflate off
  stop_server; check plain plain --tokens 30 --responses 2 --ext none
}
start_server deflate --tokens 30 --interval-ms 5 --deflate on && {
  client deflate-on --url "http://127.0.0.1:$PORT/v1"
  client deflate-client-off --url "http://127.0.0.1:$PORT/v1" --deflate off
  stop_server
  check deflate-on deflate --tokens 30 --conn 0 --ext permessage-deflate
  check deflate-client-off deflate --tokens 30 --conn 1 --ext none
}
start_server deflate-nct --tokens 30 --interval-ms 5 --deflate on --no-context-takeover && {
  client deflate-nct --url "ws://127.0.0.1:$PORT/v1"
  stop_server
  check deflate-nct deflate-nct --tokens 30 --ext permessage-deflate,server_no_context_takeover,client_no_context_takeover
}

echo "# TLS"
start_server tls --tokens 30 --interval-ms 5 --deflate on --tls-cert "$cert" --tls-key "$key" && {
  NODE_EXTRA_CA_CERTS="$cert" client tls-extra-ca --url "https://127.0.0.1:$PORT/v1" --responses 2
  client tls-ca-option --url "https://127.0.0.1:$PORT/v1" --ca "$cert" --deflate off
  client tls-untrusted --url "https://127.0.0.1:$PORT/v1" --timeout-ms 5000
  stop_server
  check tls-extra-ca tls --tokens 30 --responses 2 --conn 0 --ext permessage-deflate
  check tls-ca-option tls --tokens 30 --conn 1 --ext none
  check tls-untrusted tls --tokens 30 --expect-fail "self-signed certificate"
}

echo "# beta names (openai 4.104.0 openai/beta/realtime/ws), audio, noise, stall"
start_server beta --names beta --audio --tokens 20 --interval-ms 10 && {
  client beta --url "http://127.0.0.1:$PORT/v1" --beta --responses 2 --append 3
  stop_server; check beta beta --names beta --audio --tokens 20 --responses 2
}
start_server beta-text --names beta --tokens 20 --interval-ms 10 --deflate on && {
  client beta-text --url "http://127.0.0.1:$PORT/v1" --beta
  stop_server; check beta-text beta-text --names beta --tokens 20 --ext permessage-deflate
}
start_server audio --audio --tokens 20 --interval-ms 10 --noise && {
  client audio --url "http://127.0.0.1:$PORT/v1"
  stop_server; check audio audio --audio --noise --tokens 20
}
start_server stall --tokens 30 --interval-ms 10 --stall-ms 250 --stall-at 12 --stall-response 1 && {
  client stall --url "http://127.0.0.1:$PORT/v1" --responses 2
  stop_server; check stall stall --tokens 30 --responses 2 --stall 1 12 250
}

echo "# a client that stops reading (TCP backpressure)"
start_server slow --audio --audio-bytes 480000 --tokens 30 --interval-ms 5 && {
  client slow --url "http://127.0.0.1:$PORT/v1" --stop-reading-after 3 --pause-ms 1500 --deflate off
  stop_server; check slow slow --audio --tokens 30 --backpressure 1000 1000000
}

echo "# capture (dumpcap on lo) and tshark_ws.py"
# start_capture PORT NAME: dumpcap on lo into NAME.pcapng; stop_capture.
start_capture() {
  dumpcap -n -i lo -B 64 -f "tcp port $1" -w "$scratch/$2.pcapng" >"$scratch/$2.dumpcap.log" 2>&1 &
  CPID=$!
  pids+=("$CPID")
  for _ in $(seq 200); do grep -q "^File: " "$scratch/$2.dumpcap.log" && break; sleep 0.05; done
  sleep 0.3
}
stop_capture() { sleep 0.3; kill -INT "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null; }
# compare_capture PCAP_NAME SERVER_LOG CLIENT PORT CONN [--keylog FILE]: tshark_ws.py
# on the client's connection in the capture, against the server's and client's logs.
compare_capture() {
  local name=$1 server=$2 cl=$3 port=$4 conn=$5; shift 5
  local cport
  cport=$(python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith('{\"ok\"')][-1]['local_port'])" "$scratch/$cl.client.out")
  python3 tests/support/tshark_ws.py --pcap "$scratch/$name.pcapng" --port "$port" --client-port "$cport" "$@" \
    >"$scratch/$cl.tshark_ws.json" 2>"$scratch/$cl.tshark_ws.err" ||
    { fail "$cl: tshark_ws.py failed" "$(cat "$scratch/$cl.tshark_ws.err")"; return; }
  local out
  if out=$(python3 "$scratch/check_capture.py" "$scratch" "$server" "$cl" "$conn" "$@" 2>&1); then
    ok "$out"
  else
    fail "$out"
  fi
}

start_server cap --audio --tokens 20 --interval-ms 5 --noise --deflate on && {
  start_capture "$PORT" cap
  client cap-deflate-off --url "http://127.0.0.1:$PORT/v1" --deflate off --append 2
  client cap-deflate-on --url "http://127.0.0.1:$PORT/v1" --responses 2
  stop_capture; capport=$PORT; stop_server
  check cap-deflate-off cap --audio --noise --tokens 20 --conn 0 --ext none
  check cap-deflate-on cap --audio --noise --tokens 20 --responses 2 --conn 1 --ext permessage-deflate
  compare_capture cap cap cap-deflate-off "$capport" 0
  compare_capture cap cap cap-deflate-on "$capport" 1
}
start_server cap-tls --tokens 20 --interval-ms 5 --tls-cert "$cert" --tls-key "$key" && {
  start_capture "$PORT" cap-tls
  NODE_OPTIONS="--tls-keylog=$scratch/keys.log" NODE_EXTRA_CA_CERTS="$cert" client cap-tls \
    --url "https://127.0.0.1:$PORT/v1" --deflate off
  stop_capture; capport=$PORT; stop_server
  check cap-tls cap-tls --tokens 20 --ext none
  compare_capture cap-tls cap-tls cap-tls "$capport" 0 --keylog "$scratch/keys.log"
}

echo "# gateways (tests/support/websocket_peers.h: WebsocketNginx, WebsocketHAProxy)"
if g++ -std=c++20 -O1 -Wall -Wextra -Wno-missing-field-initializers -Itests $rt/selftest_gateways.cpp \
     -o "$scratch/selftest_gateways" >"$scratch/g++.log" 2>&1; then
  mkdir -p "$scratch/gateways"
  "$scratch/selftest_gateways" "$scratch/gateways" | tee "$scratch/gateways.out" | grep -v "^ok   - .*: \(server.mjs\|nginx\|haproxy\) started$"
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    n=$(grep -c '^FAIL' "$scratch/gateways.out")
    failures=$((failures + (n > 0 ? n : 1)))
  fi
else
  fail "g++ selftest_gateways.cpp" "$(cat "$scratch/g++.log")"
fi

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
