#!/usr/bin/env bash
# Demo: attaches infertapd, runs the sample OpenAI-compatible streaming server
# with a few clients (the project's own and curl), then shows what the agent
# measured from the kernel: one record per stream, with its timeline.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh: loading BPF programs needs root (sudo scripts/demo.sh)" >&2
  exit 1
fi
scripts/setup.sh >/dev/null
make -j"$(nproc)" build/infertapd build/infertap build/sample-server build/sample-client >/dev/null

work=$(mktemp -d)
cleanup() { kill "${server_pid:-}" "${agent_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "== starting infertapd (traces port $port)"
build/infertapd --port "$port" --timeline --stats --ready-file "$work/ready" -o "$work/records.ndjson" \
  --socket "$work/infertap.sock" --metrics-listen 127.0.0.1:0 2>"$work/agent.log" &
agent_pid=$!
for _ in $(seq 100); do [ -e "$work/ready" ] && break; sleep 0.1; done
[ -e "$work/ready" ] || { cat "$work/agent.log"; exit 1; }

echo "== sample server: TTFT 120 ms, ITL 25 ms, one 300 ms pause after token 12"
build/sample-server --port "$port" --ttft-ms 120 --itl-ms 25 --jitter-ms 3 --pause-after 12 --pause-ms 300 \
  --tokens 24 >"$work/server.out" 2>&1 &
server_pid=$!
sleep 0.3

echo "== 3 streaming clients, then curl -N"
build/sample-client --port "$port" --concurrency 3 --tokens 24 --model demo-llama-8b >/dev/null 2>&1
curl -sN -X POST "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"demo-llama-8b","stream":true,"max_tokens":16}' >/dev/null
sleep 0.2
echo
echo "== infertap streams (the CLI asks the running daemon):"
build/infertap --socket "$work/infertap.sock" streams -n 8 || true
first=$(jq -r 'select(.role == "server") | .stream_id' "$work/records.ndjson" | head -1)
if [ -n "$first" ]; then
  echo
  echo "== infertap show $first (a server stream; the injected 300 ms pause is the stall):"
  build/infertap --socket "$work/infertap.sock" show "$first" || true
fi
kill -TERM "$agent_pid"; wait "$agent_pid" || true; agent_pid=
kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=

echo
echo "== stream records (NDJSON, first two shown without their timelines; payload text is never captured):"
jq -cn 'limit(2; inputs | del(.timeline))' "$work/records.ndjson"
echo
echo "== per stream, as measured in the kernel:"
jq -r '"\(.role)/\(.vantage) \(.comm) pid \(.pid) \(.path) model=\(.model) ttft=\(.ttft_ms)ms itl_p50=\(.itl_p50_ms)ms itl_max=\(.itl_max_ms)ms tokens=\(.tokens)(\(.token_source)) rate=\(.tokens_per_s|floor) tok/s stalls=\(.stalls|length) end=\(.end)"' "$work/records.ndjson"
echo
echo
grep "stats" "$work/agent.log" || true
