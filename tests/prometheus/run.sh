#!/usr/bin/env bash
# The fleet's Prometheus rules, checked with the real promtool (Debian package
# `prometheus`; INFERTAP_PROMTOOL overrides the path):
#   1. both rule files and the promtool tests are what their generators write
#      (scripts/gen_rules.py, tests/prometheus/scenarios.py): no drift;
#   2. `promtool check rules` on the plain file and on the PrometheusRule's
#      spec, which must be the plain file's groups;
#   3. every recorded name is documented in docs/fleet.md, every alert in
#      docs/prometheus.md;
#   4. `promtool test rules` on every scenario (in parallel, one per core).
# Exits non-zero naming what failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

promtool=${INFERTAP_PROMTOOL:-/usr/bin/promtool}
if [ ! -x "$promtool" ]; then
  echo "tests/prometheus/run.sh: promtool not found at $promtool (Debian package prometheus; scripts/setup.sh installs it)" >&2
  exit 1
fi
python3 -c 'import yaml' 2>/dev/null || { echo "tests/prometheus/run.sh: python3-yaml is missing" >&2; exit 1; }

failed=()
step() {  # step NAME COMMAND...: runs it, remembers a failure
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; failed+=("$name"); fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "rule files are generated (scripts/gen_rules.py --check)" scripts/gen_rules.py --check
step "scenario tests are generated (tests/prometheus/scenarios.py --check)" tests/prometheus/scenarios.py --check
step "promtool check rules: infertap-rules.yaml" "$promtool" check rules deploy/prometheus/infertap-rules.yaml

# The PrometheusRule: its spec is a rules file of its own; it must check, and
# say exactly what the plain file says.
spec_matches() {
  python3 - "$tmp/spec.yaml" <<'EOF'
import sys, yaml
crd = yaml.safe_load(open("deploy/prometheus/infertap-prometheusrule.yaml"))
plain = yaml.safe_load(open("deploy/prometheus/infertap-rules.yaml"))
assert crd["apiVersion"] == "monitoring.coreos.com/v1" and crd["kind"] == "PrometheusRule", "not a PrometheusRule"
yaml.safe_dump(crd["spec"], open(sys.argv[1], "w"), sort_keys=False)
if crd["spec"] != plain:
    sys.exit("the PrometheusRule's spec differs from infertap-rules.yaml")
EOF
}
step "PrometheusRule spec equals the plain rules" spec_matches
step "promtool check rules: the PrometheusRule's spec" "$promtool" check rules "$tmp/spec.yaml"

documented() {
  python3 - <<'EOF'
import sys, yaml
rules = [r for g in yaml.safe_load(open("deploy/prometheus/infertap-rules.yaml"))["groups"] for r in g["rules"]]
fleet, prom = open("docs/fleet.md").read(), open("docs/prometheus.md").read()
missing = sorted({f"`{r['record']}` (docs/fleet.md)" for r in rules if "record" in r and f"`{r['record']}`" not in fleet} |
                 {f"`{r['alert']}` (docs/prometheus.md)" for r in rules if "alert" in r and f"`{r['alert']}`" not in prom})
for m in missing:
    print("not documented:", m, file=sys.stderr)
sys.exit(1 if missing else 0)
EOF
}
step "every recorded name and alert is documented" documented

# promtool test rules, one process per scenario file, as many at once as cores.
start=$(date +%s)
ls tests/prometheus/*.test.yaml | xargs -P "$(nproc)" -I{} sh -c \
  'out=$(cd tests/prometheus && "$0" test rules "$(basename "{}")" 2>&1); rc=$?; echo "$out" >"$1/$(basename "{}").log"; exit $rc' \
  "$promtool" "$tmp"
for log in "$tmp"/*.test.yaml.log; do
  name=$(basename "$log" .log)
  if grep -q "SUCCESS" "$log" && ! grep -q "FAILED" "$log"; then
    echo "ok   promtool test rules: $name"
  else
    echo "FAIL promtool test rules: $name"; sed 's/^/     /' "$log" | head -60
    failed+=("promtool test rules: $name")
  fi
done
echo "promtool tests: $(ls "$tmp"/*.test.yaml.log | wc -l) scenario files in $(( $(date +%s) - start )) s"

if [ ${#failed[@]} -gt 0 ]; then
  echo "tests/prometheus/run.sh: ${#failed[@]} failed: ${failed[*]}" >&2
  exit 1
fi
