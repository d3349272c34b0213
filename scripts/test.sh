#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, then runs unit tests,
# each libFuzzer harness briefly (ASan/UBSan), the aarch64 cross build, the BPF
# integration tests (root: real programs, real servers and clients), the layer
# order of the includes, the fleet's Prometheus rules (promtool), the deploy
# manifests (and their schemas, offline) and a short benchmark smoke run.
# Prints "N passed, N failed" last; exits non-zero on any failure.
#
#   FUZZ_SECONDS=12   seconds per fuzzer
#   SKIP_BENCH=1      leave out the benchmark smoke run
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: the suite loads BPF programs and installs packages: run it as root (sudo scripts/test.sh)" >&2
  exit 1
fi

# Each section's header says when it began (seconds since the suite started):
# the suite's time budget is read off one CI log.
section() { echo "== $*  [+${SECONDS}s]"; }

scripts/setup.sh || { echo "test.sh: dependency installation failed" >&2; exit 1; }

jobs=$(nproc)
mkdir -p build
section "build"
if ! make -j"$jobs" all fuzz >build/build.log 2>&1; then
  tail -50 build/build.log
  echo "test.sh: build failed (full log in build/build.log)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

passed=0
failed=0
failures=()
failed_tests=$(mktemp)
trap 'rm -f "$failed_tests"' EXIT

# gtest binaries: count their own test results.
run_gtest() {
  local name=$1; shift
  section "$name"
  local log
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  p=${p:-0}; f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed before reporting
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" -eq 0 ] || failures+=("$name")
  failed_tests_summary "$log" >>"$failed_tests"
  rm -f "$log"
}

# Each failed test's name and its first failed assertion, a few lines each:
# printed again at the very end, where a cut log still shows them.
failed_tests_summary() {
  awk '
    /^\[ RUN      \] / { shown = 0; keep = 0; next }
    /^\[  FAILED  \] [A-Za-z_].* \([0-9]+ ms\)$/ { name = $4; sub(/,$/, "", name); print "  " name; for (i = 0; i < n; i++) print "      " lines[i]; n = 0; next }
    /^\[       OK \] / { n = 0; next }
    /: Failure$/ && !shown { shown = 1; keep = 4 }
    keep > 0 { lines[n++] = substr($0, 1, 200); keep-- }
  ' "$1"
}

# One pass/fail per fuzzer run; the fuzzers (single-threaded) run one per
# core at a time, each writing its verdict to a file read once all are done.
run_fuzzer() {
  local bin=$1 verdicts=$2 name corpus
  name=$(basename "$bin")
  corpus=$(mktemp -d)
  [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$corpus/"
  if "$bin" -max_total_time="${FUZZ_SECONDS:-12}" -print_final_stats=1 -artifact_prefix="build/fuzz/$name-" \
       "$corpus" >"build/fuzz/$name.log" 2>&1; then
    echo "== fuzz $name (${FUZZ_SECONDS:-12}s): $(grep -E "stat::number_of_executed_units" "build/fuzz/$name.log")"
    echo "ok $name" >>"$verdicts"
  else
    echo "== fuzz $name (${FUZZ_SECONDS:-12}s) FAILED"; tail -40 "build/fuzz/$name.log"
    echo "failed $name" >>"$verdicts"
  fi
  rm -rf "$corpus"
}

run_gtest "unit tests" build/unit_tests
fuzz_verdicts=$(mktemp)
for f in build/fuzz/fuzz_*; do
  case "$f" in *.log|*-crash-*|*-leak-*|*-timeout-*) continue ;; esac
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_fuzzer "$f" "$fuzz_verdicts" &
done
wait
while read -r verdict name; do
  if [ "$verdict" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("fuzz $name"); fi
done <"$fuzz_verdicts"
rm -f "$fuzz_verdicts"
section "aarch64 build (BPF objects and product binaries, cross-compiled; tests run on this host)"
if make -j"$jobs" cross-arm64 CROSS_CXXFLAGS=-O0 >build/cross-arm64.log 2>&1; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); failures+=("aarch64 build"); tail -30 build/cross-arm64.log
fi

# Integration tests and the benchmark load BPF programs and bind fixed ports:
# one run per host at a time (the integration binary takes the same lock).
exec 9>/tmp/infertap-integration.lock
flock 9
export INFERTAP_HOST_LOCK_HELD=1
run_gtest "integration tests (BPF, root)" build/integration_tests

section "layers (includes point down: scripts/check_layers.py)"
if scripts/check_layers.py; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); failures+=("layers")
fi

section "Prometheus rules (promtool check and test rules: tests/prometheus/run.sh)"
if tests/prometheus/run.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); failures+=("prometheus rules")
fi

section "deploy manifests (offline validation)"
if python3 tests/deploy/validate_manifests.py; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); failures+=("deploy manifests")
fi

# Debian's python3 and python3-jsonschema, kubectl, and the npm validators setup.sh installed.
section "deploy manifests against the Kubernetes v1.36 and prometheus-operator schemas (kubectl kustomize)"
if /usr/bin/python3 tests/deploy/validate_schemas.py; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); failures+=("deploy schemas")
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  section "benchmark smoke (pipeline throughput)"
  if build/bench_pipeline --benchmark_min_time=0.2 >build/bench_smoke.log 2>&1; then
    passed=$((passed + 1)); grep -E "^BM_" build/bench_smoke.log || true
  else
    failed=$((failed + 1)); failures+=("benchmark smoke"); tail -20 build/bench_smoke.log
  fi
fi

if [ ${#failures[@]} -gt 0 ]; then
  echo "failed: ${failures[*]}"
  if [ -s "$failed_tests" ]; then
    echo "failed tests:"
    head -120 "$failed_tests"
  fi
fi
echo "suite time: ${SECONDS}s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
