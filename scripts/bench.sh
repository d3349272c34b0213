#!/usr/bin/env bash
# Benchmarks, printed as numbers (see docs/benchmarks.md for results):
#  1. userspace pipeline throughput (Google Benchmark, one core, recorded-style events);
#  2. send-path overhead on traced and untraced processes, agent off vs on,
#     measured side by side: runs alternate off/on so drift hits both alike;
#  3. the sample server at a high chunk rate, agent off vs on;
#  4. in-kernel cost per call of each program (bpf_stats), TCP and unix sockets side by side;
#  5. memory under load;
#  6. TLS: a Python ssl SSE server at a high chunk rate (agent off vs on), the
#     cost per OpenSSL probe, and what an untraced libssl user pays;
#  7. Go crypto/tls: the cost per call of the Go probes (entry and RET), and
#     what an untraced Go TLS user pays (agent off vs on, --pid of another process);
#  8. HTTP/2: nginx http2 (h2c and h2 over TLS) in front of the sample server,
#     many streams multiplexed on one connection at a high chunk rate, agent off vs on.
# Needs root. REPS=3 alternations per case by default; SECTIONS="1 3" runs only those.
# BASELINE_AGENT=/path/to/another/infertapd: sections 4, 6 and 6b run each case with that
# build too, alternating with this one (an old build against a new, one run).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench.sh: needs root (loads BPF programs)" >&2; exit 1; }
# One run per host at a time with the integration tests (the same lock): both
# load the agent's programs and would see each other's traffic.
exec 9>/tmp/infertap-integration.lock
flock 9
scripts/setup.sh >/dev/null
make -j"$(nproc)" build/infertapd build/send-loop build/sample-server build/sample-client build/bench_pipeline >/dev/null

REPS=${REPS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-1}
SECTIONS=${SECTIONS:-1 2 3 4 5 6 7}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

agent_pid=
agent=build/infertapd  # the build agent_on starts
agent_on() {  # $1 = attach method, then extra infertapd flags
  rm -f "$work/ready"
  "$agent" --attach "$@" -o /dev/null --socket "" --metrics-listen "" --ready-file "$work/ready" 2>"$work/agent.log" &
  agent_pid=$!
  for _ in $(seq 200); do [ -e "$work/ready" ] && return; sleep 0.05; done
  cat "$work/agent.log" >&2; exit 1
}
agent_off() { kill -TERM "$agent_pid"; wait "$agent_pid" || true; agent_pid=; }
# A write loop targeted by the agent: runs "$@", which creates $work/run.ready
# once connected and writes once $work/run.go exists, with the agent on --pid
# of it in between; prints its writes_per_sec.
run_targeted() {
  local pid
  rm -f "$work/run.ready" "$work/run.go"
  "$@" >"$work/run.out" &
  pid=$!
  for _ in $(seq 200); do [ -e "$work/run.ready" ] && break; sleep 0.05; done
  agent_on sock --pid "$pid"
  touch "$work/run.go"; wait "$pid"; agent_off
  jq .writes_per_sec "$work/run.out"
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Column $1 of the runs "${@:2}" (space-separated numbers): median, and range.
col() { printf '%s\n' "${@:2}" | awk -v c="$1" '{print $c}' | median; }
spread() { printf '%s\n' "${@:2}" | awk -v c="$1" 'NR == 1 || $c < lo {lo = $c} NR == 1 || $c > hi {hi = $c} END {printf "%.0f-%.0f", lo, hi}'; }
bpf_run_ns() {  # total run time of the agent's programs so far
  bpftool prog show | grep -A2 -E "name itap_" | grep -oE "run_time_ns [0-9]+" | awk '{s += $2} END {print s + 0}'
}
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# programs that never ran print no run_time_ns / run_cnt at all
prog_costs() {  # "name ns/call calls" of each program of the running agent that ran
  # This agent's programs only (another agent on the host has its own): the
  # ids of the BPF programs it holds open. Programs that never ran print no
  # run_time_ns / run_cnt at all.
  local ids
  ids=$(grep -h '^prog_id:' /proc/"$agent_pid"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -un | paste -sd, -)
  bpftool -j prog show | jq -r --arg ids "$ids" '($ids | split(",") | map(tonumber)) as $mine | .[] |
    select((.name // "") | startswith("itap_")) | select(.id as $i | $mine | index($i)) | select((.run_cnt // 0) > 0) |
    "\(.name) \(.run_time_ns) \(.run_cnt)"' | awk '{printf "%s %.0f %d\n", $1, $2 / $3, $3}'
}

# One case: prints writes/s off, on (per attach method), ratio and added ns per write.
send_case() {
  local label=$1; shift
  local off=() sock=() tp=() raw=()
  for _ in $(seq "$REPS"); do
    off+=("$(build/send-loop "$@" --seconds "$SECONDS_PER_RUN" | jq .writes_per_sec)")
    agent_on sock; sock+=("$(build/send-loop "$@" --seconds "$SECONDS_PER_RUN" | jq .writes_per_sec)"); agent_off
    agent_on tracepoint; tp+=("$(build/send-loop "$@" --seconds "$SECONDS_PER_RUN" | jq .writes_per_sec)"); agent_off
    agent_on raw_tp; raw+=("$(build/send-loop "$@" --seconds "$SECONDS_PER_RUN" | jq .writes_per_sec)"); agent_off
  done
  local o k t r
  o=$(printf '%s\n' "${off[@]}" | median); k=$(printf '%s\n' "${sock[@]}" | median)
  t=$(printf '%s\n' "${tp[@]}" | median); r=$(printf '%s\n' "${raw[@]}" | median)
  awk -v l="$label" -v o="$o" -v k="$k" -v t="$t" -v r="$r" 'BEGIN {
    printf "    %-32s off %8.0f/s | sock (default) %8.0f/s ratio %.3f %+6.0f ns | tracepoint ratio %.3f %+6.0f ns | raw_tp ratio %.3f %+6.0f ns\n",
      l, o, k, k/o, 1e9/k - 1e9/o, t/o, 1e9/t - 1e9/o, r/o, 1e9/r - 1e9/o }'
}

if want 1; then
echo "== 1. userspace pipeline throughput (events/s, one core)"
build/bench_pipeline --benchmark_min_time=0.5 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>/dev/null |
  awk '/_median/ {ips = ""; for (i=1;i<=NF;i++) if ($i ~ /items_per_second/) ips = $i
                  print "   ", $1, ips, ($NF ~ /=/ ? "" : $NF)}'  # the label: a native format's name

fi
if want 2; then
echo "== 2. send path, agent off vs on (median of $REPS alternations, ${SECONDS_PER_RUN}s each)"
send_case "traced: SSE over loopback TCP"   --payload sse --size 256
send_case "untraced: binary TCP (muted)"     --payload binary --size 256
send_case "untraced: binary unix (muted)"    --mode unix --payload binary --size 256
send_case "untraced: writes to /dev/null"    --mode file --size 256

fi
if want 3; then
echo "== 3. sample server at a high chunk rate: 40 streams x 1 ms ITL (40k events/s per side), agent off vs on"
# Delivered rate (content events/s at the clients) and the server's own CPU per
# event (utime+stime from /proc): the in-kernel cost the traced server pays.
# The rate moves by +-3 % between identical runs on a shared VM, so the cases
# alternate REPS_RATE times and the medians are compared; a second pass then
# measures what the agent itself spends per token event (its process CPU, and
# the run time of its BPF programs from kernel.bpf_stats_enabled), which does
# not depend on how busy the host was.
REPS_RATE=${REPS_RATE:-7}
agent_on_pid() {  # $1 = pid: trace only that process (the others cost one check)
  rm -f "$work/ready"
  build/infertapd --pid "$1" -o /dev/null --socket "" --metrics-listen "" --ready-file "$work/ready" 2>"$work/agent.log" &
  agent_pid=$!
  for _ in $(seq 200); do [ -e "$work/ready" ] && return; sleep 0.05; done
  cat "$work/agent.log" >&2; exit 1
}
# $1 = off | sock (every process traced: server and client both timed) |
#      server-only (agent --pid server: the client is as if remote) |
#      nosig (every process traced, delivery signals off)
# prints "rate server_cpu_us_per_event agent_cpu_us_per_event bpf_us_per_event"
server_case() {
  local port log ticks a0=0 a1=0 b0=0 b1=0
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  [ "$1" = sock ] && agent_on sock
  [ "$1" = nosig ] && agent_on sock --no-delivery-signals
  build/sample-server --port "$port" --ttft-ms 0 --itl-ms 1 >"$work/server.out" 2>&1 &
  local spid=$!
  for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.05; done
  [ "$1" = server-only ] && agent_on_pid "$spid"
  if [ -n "$agent_pid" ]; then a0=$(proc_ticks "$agent_pid"); b0=$(bpf_run_ns); fi
  log=$(build/sample-client --port "$port" --concurrency 40 --tokens 3000 2>&1 >/dev/null | tail -1)
  ticks=$(proc_ticks "$spid")
  if [ -n "$agent_pid" ]; then a1=$(proc_ticks "$agent_pid"); b1=$(bpf_run_ns); fi
  kill -TERM "$spid"; wait "$spid" 2>/dev/null || true
  [ "$1" = off ] || agent_off
  echo "$log" | sed -n 's/.*content_events=\([0-9]*\).*elapsed_s=\([0-9.]*\).*/\1 \2/p' |
    awk -v t="$ticks" -v a=$((a1 - a0)) -v b=$((b1 - b0)) -v hz="$(getconf CLK_TCK)" \
      '{printf "%.0f %.2f %.2f %.2f\n", $1/$2, t/hz*1e6/$1, a/hz*1e6/$1, b/1e3/$1}'
}
off=(); sock=(); srv=(); nosig=()
for _ in $(seq "$REPS_RATE"); do
  off+=("$(server_case off)"); sock+=("$(server_case sock)"); srv+=("$(server_case server-only)")
  nosig+=("$(server_case nosig)")
done
o=$(col 1 "${off[@]}"); oc=$(col 2 "${off[@]}")
echo "    agent off: delivered $o/s (runs $(spread 1 "${off[@]}")), server CPU/event $oc us; median of $REPS_RATE alternations"
# The cost pass: the agent's own CPU and its programs' run time per token event.
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
cost_sock=$(server_case sock); cost_srv=$(server_case server-only); cost_nosig=$(server_case nosig)
sysctl -qw kernel.bpf_stats_enabled="$stats_before"
for variant in "sock:every process traced (server and client)" "srv:server traced, client as if remote" \
               "nosig:every process traced, delivery signals off"; do
  name=${variant%%:*}; label=${variant#*:}
  case "$name" in
    sock) runs=("${sock[@]}"); cost=$cost_sock ;;
    srv) runs=("${srv[@]}"); cost=$cost_srv ;;
    *) runs=("${nosig[@]}"); cost=$cost_nosig ;;
  esac
  k=$(col 1 "${runs[@]}"); kc=$(col 2 "${runs[@]}")
  awk -v l="$label" -v o="$o" -v k="$k" -v oc="$oc" -v kc="$kc" -v sp="$(spread 1 "${runs[@]}")" -v cost="$cost" 'BEGIN {
    split(cost, c, " ")
    printf "    %-44s on %.0f/s (runs %s) ratio %.3f | server CPU/event %.2f us (%+.2f us) | agent %.2f us + BPF %.2f us per token event\n",
      l, k, sp, k/o, kc, kc-oc, c[3], c[4] }'
done

fi
if want 4; then
echo "== 4. in-kernel cost per call (kernel.bpf_stats_enabled: program run time / run count), default set"
prog_cost_of() {  # $1 = label, $2 = extra infertapd flags ("" for none); rest = send-loop args
  local label=$1 flags=$2; shift 2
  # shellcheck disable=SC2086  # the flags are words
  agent_on sock $flags
  build/send-loop "$@" --seconds "$SECONDS_PER_RUN" >/dev/null
  prog_costs | awk -v l="$label" '{ printf "    %-52s %-20s %8d calls  %6.0f ns/call\n", l, $1, $3, $2 }'
  agent_off
}
prog_cost() {  # the case with this build, then with BASELINE_AGENT's when given
  prog_cost_of "$@"
  [ -n "${BASELINE_AGENT:-}" ] || return 0
  local label=$1; shift
  agent=$BASELINE_AGENT; prog_cost_of "$label (baseline)" "$@"; agent=build/infertapd
}
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
# TCP and unix alternate, REPS times: the two are compared within one run.
# "not targeted": the agent traces port 1 only, so every call on these
# sockets is turned away by the socket filter instead of a muted verdict.
for _ in $(seq "$REPS"); do
  prog_cost "traced: SSE over loopback TCP" "" --payload sse --size 256
  prog_cost "traced: SSE over a unix socket" "" --mode unix --payload sse --size 256
  prog_cost "untraced: binary TCP (muted)" "" --payload binary --size 256
  prog_cost "untraced: binary unix (muted)" "" --mode unix --payload binary --size 256
  prog_cost "untraced: TCP, not targeted (--port 1)" "--port 1" --payload binary --size 256
  prog_cost "untraced: unix, not targeted (--port 1)" "--port 1" --mode unix --payload binary --size 256
  # Scatter/gather: grpcio's first send is one sendmsg of 31 iovecs.
  prog_cost "traced: SSE over TCP, sendmsg of 1 iovec" "" --payload sse --size 512 --sender sendmsg
  prog_cost "traced: SSE over TCP, sendmsg of 31 iovecs" "" --payload sse --size 512 --sender sendmsg --iovecs 31
done
sysctl -qw kernel.bpf_stats_enabled="$stats_before"

fi
if want 5; then
echo "== 5. memory under load: 10 000 short connections, then 1 000 concurrent streams (scripts/bench_memory.sh)"
scripts/bench_memory.sh | sed 's/^/    /'
fi

if want 6; then
echo "== 6. TLS (OpenSSL uprobes): Python ssl SSE server, 20 streams x 1 ms ITL (20k events/s), agent off vs on"
# tls_peer.py serves and reads over the system libssl; the rate is what the
# clients' own logs say was delivered (content events / the span from the
# first request to the last event), the CPU per event is the server's own.
REPS_TLS=${REPS_TLS:-5}
tls_peer=tests/support/tls_peer.py
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null
tls_rate() {  # client logs -> content events/s delivered
  python3 -c '
import json, sys
events, start, end = 0, None, None
for path in sys.argv[1:]:
    for line in open(path):
        l = json.loads(line)
        if l["type"] == "write": start = l["mono_ns"] if start is None else min(start, l["mono_ns"])
        if l["type"] == "event" and l["kind"] == "content":
            events += 1; end = l["mono_ns"] if end is None else max(end, l["mono_ns"])
print("%.0f %d" % (events / ((end - start) / 1e9), events))' "$@"
}
# $1 = off | on | cost (on, and each program's run time per call saved to
# $work/tls_progs.txt before the agent stops); prints "rate server_cpu_us_per_event agent_cpu_us_per_event bpf_us_per_event"
tls_case() {
  local port spid ticks a0=0 a1=0 b0=0 b1=0 clients=() rate
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  [ "$1" = base ] && agent=$BASELINE_AGENT  # a subshell: it does not leak
  [ "$1" = off ] || agent_on sock
  python3 "$tls_peer" server --port "$port" --cert "$work/tls.crt" --key "$work/tls.key" --ttft-ms 0 --itl-ms 1 \
    >"$work/tls_server.out" 2>&1 &
  spid=$!
  for _ in $(seq 100); do grep -q listening "$work/tls_server.out" 2>/dev/null && break; sleep 0.05; done
  if [ -n "$agent_pid" ]; then a0=$(proc_ticks "$agent_pid"); b0=$(bpf_run_ns); fi
  rm -f "$work"/tls_client_*.ndjson
  for i in $(seq 20); do
    python3 "$tls_peer" client --port "$port" --tokens 2000 --log "$work/tls_client_$i.ndjson" >/dev/null 2>&1 &
    clients+=($!)
  done
  wait "${clients[@]}"
  ticks=$(proc_ticks "$spid")
  if [ -n "$agent_pid" ]; then a1=$(proc_ticks "$agent_pid"); b1=$(bpf_run_ns); fi
  [ "$1" = cost ] && prog_costs >"$work/tls_progs.txt"
  kill -TERM "$spid"; wait "$spid" 2>/dev/null || true
  [ "$1" = off ] || agent_off
  rate=$(tls_rate "$work"/tls_client_*.ndjson)
  echo "$rate" | awk -v t="$ticks" -v a=$((a1 - a0)) -v b=$((b1 - b0)) -v hz="$(getconf CLK_TCK)" \
    '{printf "%.0f %.2f %.2f %.2f\n", $1, t/hz*1e6/$2, a/hz*1e6/$2, b/1e3/$2}'
}
toff=(); ton=(); tbase=()
for _ in $(seq "$REPS_TLS"); do
  toff+=("$(tls_case off)"); ton+=("$(tls_case on)")
  [ -z "${BASELINE_AGENT:-}" ] || tbase+=("$(tls_case base)")
done
o=$(col 1 "${toff[@]}"); k=$(col 1 "${ton[@]}"); oc=$(col 2 "${toff[@]}"); kc=$(col 2 "${ton[@]}")
echo "    agent off: delivered $o/s (runs $(spread 1 "${toff[@]}")), server CPU/event $oc us"
echo "    agent on:  delivered $k/s (runs $(spread 1 "${ton[@]}")), server CPU/event $kc us; ratio $(awk -v o="$o" -v k="$k" 'BEGIN {printf "%.3f", k/o}'); median of $REPS_TLS alternations"
if [ -n "${BASELINE_AGENT:-}" ]; then
  b=$(col 1 "${tbase[@]}"); bc=$(col 2 "${tbase[@]}")
  echo "    baseline agent on ($BASELINE_AGENT): delivered $b/s (runs $(spread 1 "${tbase[@]}")), server CPU/event $bc us; ratio $(awk -v o="$o" -v k="$b" 'BEGIN {printf "%.3f", k/o}')"
fi
# The cost pass: agent CPU and BPF run time per token event, and each
# program's run time per call (kernel.bpf_stats_enabled).
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
cost=$(tls_case cost)
sysctl -qw kernel.bpf_stats_enabled="$stats_before"
echo "$cost" | awk '{printf "    agent %.2f us + BPF %.2f us per token event (CPU time, both ends traced)\n", $3, $4}'
echo "    per call (run time / run count; the uprobe trap itself is not in it):"
awk '{printf "      %-28s %6d ns/call  %8d calls\n", $1, $2, $3}' "$work/tls_progs.txt"

echo "== 6b. a libssl user: TLS writes of 256 non-HTTP bytes in one process (tls_peer.py loop), agent off vs on"
# "muted": every process traced (per-file probes), the connection muted after
# its first bytes; "untraced": agent --pid of another process (per-process
# probes: this one has no breakpoint at all); "targeted": agent --pid of this
# process (its own probes; its connection muted as not HTTP).
loop() { python3 "$tls_peer" loop --cert "$work/tls.crt" --key "$work/tls.key" --seconds "$SECONDS_PER_RUN" | jq .writes_per_sec; }
loop_targeted() {  # the loop connects, the agent starts with its pid, then it writes; $1 = agent binary
  local agent=${1:-build/infertapd}
  run_targeted python3 "$tls_peer" loop --cert "$work/tls.crt" --key "$work/tls.key" --seconds "$SECONDS_PER_RUN" \
    --ready-file "$work/run.ready" --go-file "$work/run.go"
}
loff=(); lmuted=(); luntraced=(); ltargeted=(); lbase=()
for _ in $(seq "$REPS"); do
  loff+=("$(loop)")
  agent_on sock; lmuted+=("$(loop)"); agent_off
  agent_on sock --pid 1; luntraced+=("$(loop)"); agent_off
  ltargeted+=("$(loop_targeted)")
  [ -z "${BASELINE_AGENT:-}" ] || lbase+=("$(loop_targeted "$BASELINE_AGENT")")
done
lo=$(printf '%s\n' "${loff[@]}" | median); lm=$(printf '%s\n' "${lmuted[@]}" | median)
lu=$(printf '%s\n' "${luntraced[@]}" | median); lt=$(printf '%s\n' "${ltargeted[@]}" | median)
awk -v o="$lo" -v m="$lm" -v u="$lu" -v t="$lt" 'BEGIN {
  printf "    off %.0f writes/s\n", o
  printf "    untraced (--pid other) %.0f/s ratio %.3f %+.2f us/write\n", u, u/o, 1e6/u - 1e6/o
  printf "    targeted (--pid this, muted: not HTTP) %.0f/s ratio %.3f %+.2f us/write\n", t, t/o, 1e6/t - 1e6/o
  printf "    every process (no --pid, muted: not HTTP) %.0f/s ratio %.3f %+.2f us/write\n", m, m/o, 1e6/m - 1e6/o }'
if [ -n "${BASELINE_AGENT:-}" ]; then
  printf '%s\n' "${lbase[@]}" | median | awk -v o="$lo" '{
    printf "    targeted, baseline agent %.0f/s ratio %.3f %+.2f us/write\n", $1, $1/o, 1e6/$1 - 1e6/o }'
fi
fi
if want 7; then
echo "== 7. Go crypto/tls: Go clients -> Caddy (Go TLS) -> sample server, 4 streams x 2000 events x 1 ms ITL; per-call cost"
# Every Go probe runs: the clients' (*Conn).Read for each event, Caddy's
# (*Conn).Write for each event and Read for each request, and their RETs.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/go.key" -out "$work/go.crt" 2>/dev/null
mkdir -p "$work/go-src" && cp tests/support/go_sse_client.go "$work/go-src/main.go"
(cd "$work/go-src" && HOME="$work" GOCACHE=/tmp/infertap-go-cache GO111MODULE=off GOFLAGS= \
  go build -o "$work/go-sse-client" main.go)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up=$(free_port); gw=$(free_port)
build/sample-server --host 127.0.0.1 --port "$up" --ttft-ms 0 --itl-ms 1 --log /dev/null >"$work/go_upstream.out" 2>&1 &
upid=$!
printf '{\n admin off\n auto_https off\n storage file_system %s\n servers {\n  protocols h1\n }\n}\nhttps://localhost:%s {\n tls %s %s\n reverse_proxy 127.0.0.1:%s {\n  flush_interval -1\n }\n}\n' \
  "$work/caddy-data" "$gw" "$work/go.crt" "$work/go.key" "$up" >"$work/Caddyfile"
HOME="$work" XDG_DATA_HOME="$work/caddy-data" XDG_CONFIG_HOME="$work/caddy-config" \
  caddy run --config "$work/Caddyfile" --adapter caddyfile >"$work/caddy.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$gw") 2>/dev/null && break; sleep 0.05; done
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
agent_on sock
gclients=()
for i in $(seq 4); do
  "$work/go-sse-client" "https://localhost:$gw/v1/chat/completions" "$work/go.crt" 2000 1 300 >"$work/go_client_$i.ndjson" &
  gclients+=($!)
done
wait "${gclients[@]}"
prog_costs >"$work/go_progs.txt"
agent_off
sysctl -qw kernel.bpf_stats_enabled="$stats_before"
kill -TERM "$cpid" "$upid"; wait "$cpid" "$upid" 2>/dev/null || true
echo "    events read by the Go clients: $(cat "$work"/go_client_*.ndjson | wc -l)"
echo "    per call (run time / run count; the uprobe trap itself is not in it):"
grep -E '^itap_(go_tls|sock)' "$work/go_progs.txt" | awk '{printf "      %-28s %6d ns/call  %8d calls\n", $1, $2, $3}'

echo "== 7b. a Go TLS user: (*Conn).Write of 256 non-HTTP bytes in one process (go-tls-loop), agent off vs on"
# "untraced": agent --pid of another process (per-process probes: this one has
# no breakpoint at all); "targeted": agent --pid of this process (its own
# probes, its connection muted as not HTTP); "every process": no --pid (the
# executable's probes for all processes, as before per-process Go probes);
# "untraced, --no-tls": the same agent with no uprobe anywhere, to tell what
# the probes cost an untraced process from what the agent being on costs it.
mkdir -p "$work/go-loop-src" && cp tests/support/go_tls_loop.go "$work/go-loop-src/main.go"
(cd "$work/go-loop-src" && HOME="$work" GOCACHE=/tmp/infertap-go-cache GO111MODULE=off GOFLAGS= \
  go build -o "$work/go-tls-loop" main.go)
go_loop() { "$work/go-tls-loop" "$SECONDS_PER_RUN" | jq .writes_per_sec; }
go_loop_targeted() { run_targeted "$work/go-tls-loop" "$SECONDS_PER_RUN" "$work/run.ready" "$work/run.go"; }
goff=(); guntraced=(); gnotls=(); gtargeted=(); gevery=()
for _ in $(seq "$REPS"); do
  goff+=("$(go_loop)")
  agent_on sock --pid 1; guntraced+=("$(go_loop)"); agent_off
  agent_on sock --pid 1 --no-tls; gnotls+=("$(go_loop)"); agent_off
  gtargeted+=("$(go_loop_targeted)")
  agent_on sock; gevery+=("$(go_loop)"); agent_off
done
go_o=$(printf '%s\n' "${goff[@]}" | median); go_u=$(printf '%s\n' "${guntraced[@]}" | median)
go_t=$(printf '%s\n' "${gtargeted[@]}" | median); go_e=$(printf '%s\n' "${gevery[@]}" | median)
go_n=$(printf '%s\n' "${gnotls[@]}" | median)
awk -v o="$go_o" -v u="$go_u" -v n="$go_n" -v t="$go_t" -v e="$go_e" -v ro="$(spread 1 "${goff[@]}")" \
  -v ru="$(spread 1 "${guntraced[@]}")" -v rn="$(spread 1 "${gnotls[@]}")" 'BEGIN {
  printf "    off %.0f writes/s (runs %s)\n", o, ro
  printf "    untraced (--pid other) %.0f/s (runs %s) ratio %.3f %+.2f us/write\n", u, ru, u/o, 1e6/u - 1e6/o
  printf "    untraced, agent --no-tls (no uprobe anywhere) %.0f/s (runs %s) ratio %.3f; untraced/--no-tls %.3f\n", n, rn, n/o, u/n
  printf "    targeted (--pid this, muted: not HTTP) %.0f/s ratio %.3f %+.2f us/write\n", t, t/o, 1e6/t - 1e6/o
  printf "    every process (no --pid, muted: not HTTP) %.0f/s ratio %.3f %+.2f us/write\n", e, e/o, 1e6/e - 1e6/o }'
fi

if want 8; then
echo "== 8. HTTP/2: nginx http2 -> sample server (HTTP/1.1), 2 Node http2 clients x 20 streams x ${H2_TOKENS:-3000} events on one connection each, 1 ms ITL, agent off vs on"
# Delivered rate: content events the clients counted / the wall time of the
# run. nginx (one worker) turns each upstream chunk into one DATA frame; the
# agent traces all three processes (sample server, nginx both legs, node).
REPS_H2=${REPS_H2:-5}
h2dir="$work/h2"; mkdir -p "$h2dir/tmp"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
  -keyout "$h2dir/key.pem" -out "$h2dir/cert.pem" 2>/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
h2_up=$(free_port); h2_plain=$(free_port); h2_tls=$(free_port)
build/sample-server --port "$h2_up" --ttft-ms 0 --itl-ms 1 >"$h2dir/server.out" 2>&1 &
h2_server=$!
cat >"$h2dir/nginx.conf" <<NGINX
user root;
worker_processes 1;
error_log $h2dir/error.log warn;
pid $h2dir/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $h2dir/tmp/body;
  proxy_temp_path $h2dir/tmp/proxy;
  upstream backend { server 127.0.0.1:$h2_up; keepalive 64; }
  server {
    listen 127.0.0.1:$h2_plain http2;
    listen 127.0.0.1:$h2_tls ssl http2;
    ssl_certificate $h2dir/cert.pem;
    ssl_certificate_key $h2dir/key.pem;
    location / { proxy_pass http://backend; proxy_buffering off; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX
nginx -p "$h2dir" -e "$h2dir/error.log" -c "$h2dir/nginx.conf" -g "daemon off; master_process on;" >"$h2dir/nginx.out" 2>&1 &
h2_nginx=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$h2_plain") 2>/dev/null && break; sleep 0.05; done
# $1 = off | on, $2 = URL; prints content events/s delivered: the clients'
# content events / the span from the first request to the last stream's end
# (their own CLOCK_MONOTONIC stamps, Node's start-up left out).
h2_case() {
  local pids=() worker n0 n1
  [ "$1" = on ] && agent_on sock
  worker=$(pgrep -P "$h2_nginx" | head -1); n0=$(proc_ticks "$worker")
  for i in 1 2; do
    node tests/support/h2_streams.mjs "$2" 20 "${H2_TOKENS:-3000}" --ca "$h2dir/cert.pem" >"$h2dir/client_$i.out" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  n1=$(proc_ticks "$worker")
  [ "$1" = on ] && agent_off
  # "rate nginx_cpu_us_per_event": the gateway is the process that pays most probes (both legs)
  cat "$h2dir"/client_*.out | jq -rs --argjson t $((n1 - n0)) --argjson hz "$(getconf CLK_TCK)" \
    '(map(.content_events) | add) as $e | "\($e / (((map(.end_ns) | max) - (map(.start_ns) | min)) / 1e9) | floor) \($t / $hz * 1e6 / $e * 100 | floor / 100)"'
}
for variant in "h2c:http://127.0.0.1:$h2_plain" "h2 (TLS):https://localhost:$h2_tls"; do
  label=${variant%%:*}; url=${variant#*:}
  hoff=(); hon=()
  for _ in $(seq "$REPS_H2"); do hoff+=("$(h2_case off "$url")"); hon+=("$(h2_case on "$url")"); done
  o=$(col 1 "${hoff[@]}"); k=$(col 1 "${hon[@]}"); oc=$(col 2 "${hoff[@]}"); kc=$(col 2 "${hon[@]}")
  awk -v l="$label" -v o="$o" -v k="$k" -v so="$(spread 1 "${hoff[@]}")" -v sk="$(spread 1 "${hon[@]}")" -v n="$REPS_H2" \
    -v oc="$oc" -v kc="$kc" 'BEGIN {
    printf "    %-9s off %.0f events/s (runs %s), nginx CPU/event %.2f us | on %.0f events/s (runs %s), nginx %.2f us | ratio %.3f; median of %d alternations\n",
      l, o, so, oc, k, sk, kc, k/o, n }'
done
kill -TERM "$h2_nginx" "$h2_server"; wait "$h2_nginx" "$h2_server" 2>/dev/null || true
fi
