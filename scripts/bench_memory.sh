#!/usr/bin/env bash
# Bounded memory of infertapd under connection churn and many concurrent
# streams (results: docs/benchmarks.md, "Memory under load"):
#   phase 1: SHORT_CONNS short connections (one streamed request each, BATCH at a time);
#   phase 2: STREAMS concurrent streams (each ~STREAM_TOKENS tokens at ITL_MS);
# prints infertapd's RSS before / after each phase / peak (VmHWM), the most
# connections and live streams it tracked during phase 2, and its eviction
# and drop counters.
#
#   SHORT_CONNS=10000 BATCH=100 STREAMS=1000 STREAM_TOKENS=60 ITL_MS=50
#   MAX_CONNECTIONS=65536   limits.max_connections (lower it to see eviction at work)
#   MAX_STREAMS=2000        limits.max_streams_in_memory (records kept for the API)
#   ROUNDS=2                phase 2 repeated: RSS must level off, not grow per round
# Needs root (loads BPF programs). Also run by scripts/bench.sh (section 5).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench_memory.sh: needs root (loads BPF programs)" >&2; exit 1; }

SHORT_CONNS=${SHORT_CONNS:-10000}
BATCH=${BATCH:-100}
STREAMS=${STREAMS:-1000}
STREAM_TOKENS=${STREAM_TOKENS:-60}
ITL_MS=${ITL_MS:-50}
MAX_CONNECTIONS=${MAX_CONNECTIONS:-65536}
MAX_STREAMS=${MAX_STREAMS:-2000}
ROUNDS=${ROUNDS:-2}

# Every stream is a socket on the server and one on the client, plus the
# daemon's own: make sure the file descriptor limit is not what fails.
need_fds=$((2 * STREAMS + 256))
if [ "$(ulimit -n)" -lt "$need_fds" ]; then
  ulimit -n "$need_fds" || { echo "bench_memory.sh: ulimit -n $need_fds failed (open files limit too low)" >&2; exit 1; }
fi
for b in infertapd infertap sample-server sample-client; do
  [ -x "build/$b" ] || { echo "bench_memory.sh: build/$b missing: run make first" >&2; exit 1; }
done

work=$(mktemp -d)
daemon_pid= server_pid= sampler_pid=
cleanup() {
  for p in $sampler_pid $server_pid $daemon_pid; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/config.yaml" <<EOF
limits:
  max_connections: $MAX_CONNECTIONS
  max_streams_in_memory: $MAX_STREAMS
EOF
build/infertapd -c "$work/config.yaml" --port "$port" -o /dev/null --socket "$work/api.sock" --metrics-listen "" \
  --ready-file "$work/ready" 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 400); do [ -e "$work/ready" ] && break; sleep 0.05; done
[ -e "$work/ready" ] || { cat "$work/daemon.log" >&2; exit 1; }

build/sample-server --port "$port" --ttft-ms 5 --itl-ms "$ITL_MS" --max-conns $((STREAMS + 100)) >"$work/server.out" 2>&1 &
server_pid=$!
for _ in $(seq 200); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.05; done

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$daemon_pid/status"; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$daemon_pid/status"; }
# Retried: under a burst of new connections the API can miss a connect.
status() {
  for _ in 1 2 3 4 5; do build/infertap --socket "$work/api.sock" status -o json 2>/dev/null && return; sleep 0.5; done
  build/infertap --socket "$work/api.sock" status -o json
}
mib() { awk -v k="$1" 'BEGIN {printf "%.1f MiB", k / 1024}'; }

sleep 1
rss0=$(rss_kib)
echo "== infertapd pid $daemon_pid, limits.max_connections=$MAX_CONNECTIONS, max_streams_in_memory=$MAX_STREAMS"
echo "   RSS at start:                 $(mib "$rss0")"

echo "== phase 1: $SHORT_CONNS short connections ($BATCH at a time, one streamed request of 4 tokens each)"
t0=$(date +%s.%N)
for _ in $(seq $((SHORT_CONNS / BATCH))); do
  build/sample-client --port "$port" --concurrency "$BATCH" --tokens 4 >/dev/null 2>>"$work/client.err" ||
    { tail -5 "$work/client.err" >&2; exit 1; }
done
t1=$(date +%s.%N)
sleep 2  # one housekeeping tick: counters refreshed
s1=$(status)
rss1=$(rss_kib)
echo "   $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f s", b - a}'), records $(jq .counters.pipeline.records <<<"$s1"), connections opened $(jq .counters.pipeline.connections_opened <<<"$s1"), still tracked $(jq .tracked_connections <<<"$s1")"
echo "   RSS after phase 1:            $(mib "$rss1")"

for round in $(seq "$ROUNDS"); do
echo "== phase 2, round $round/$ROUNDS: $STREAMS concurrent streams ($STREAM_TOKENS tokens, ${ITL_MS} ms ITL)"
# Sample what the daemon tracks while the streams run.
(
  while :; do
    status | jq -c '{c: .tracked_connections, l: .store.live}' 2>/dev/null || true
    sleep 0.5
  done
) >"$work/samples" &
sampler_pid=$!
build/sample-client --port "$port" --concurrency "$STREAMS" --tokens "$STREAM_TOKENS" --timeout-ms 120000 \
  >/dev/null 2>"$work/client2.err" || { tail -5 "$work/client2.err" >&2; exit 1; }
kill -TERM "$sampler_pid"; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=
rss2=$(rss_kib)
n_samples=$(wc -l <"$work/samples")
max_conns=$(jq -s 'map(.c) | max' "$work/samples")
max_live=$(jq -s 'map(.l) | max' "$work/samples")
sleep 2
s2=$(status)
echo "   most tracked during the run:  $max_conns connections, $max_live live streams ($n_samples samples, 2/s)"
echo "   RSS right after the round:    $(mib "$rss2")"

done

# Idle: connections close, records age out of nothing (the store is a ring).
sleep 3
rss3=$(rss_kib)
s3=$(status)
echo "== after the load"
echo "   RSS idle:                     $(mib "$rss3")   peak (VmHWM): $(mib "$(hwm_kib)")"
echo "   tracked connections now:      $(jq .tracked_connections <<<"$s3")"
echo "   records: $(jq .counters.pipeline.records <<<"$s3")  kept for the API: $(jq .store.records <<<"$s3") (evicted from the store: $(jq .store.evicted <<<"$s3"))"
echo "   connections evicted (table full): $(jq .counters.pipeline.connections_evicted <<<"$s3")  streams partial: $(jq .counters.pipeline.streams_partial <<<"$s3")"
echo "   kernel drops: $(jq -c .counters.kernel.drops <<<"$s3")  sink dropped lines: $(jq .counters.sink.dropped_lines <<<"$s3")"
