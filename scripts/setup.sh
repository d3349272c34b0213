#!/usr/bin/env bash
# Installs every Debian package infertap needs to build, test and run its demo.
# Idempotent: only missing packages are installed; apt lists are refreshed once.
set -euo pipefail

packages=(
  make g++ clang llvm libclang-rt-14-dev   # userspace, BPF objects, libFuzzer + sanitizers
  bpftool libbpf-dev libelf-dev zlib1g-dev pkg-config
  libbrotli-dev libzstd-dev                # compressed response bodies (gzip: zlib1g-dev)
  libnghttp2-dev                           # HTTP/2 header blocks (HPACK inflater; the tests' deflater)
  libcli11-dev nlohmann-json3-dev libsimdjson-dev libcpp-httplib-dev libyaml-cpp-dev
  libssl-dev                               # the metrics endpoint's TLS (OpenSSL); bcrypt comes with libc (libcrypt)
  libcapstone-dev                          # x86-64 instruction decoder: the RET instructions of Go's crypto/tls
  libgtest-dev libgmock-dev libbenchmark-dev
  libexpat1-dev libxml2-utils              # the stream picture's tests: expat parses the SVG (unit), xmllint (integration)
  curl jq iproute2 python3 python3-yaml procps util-linux
  gnutls-bin                               # a TLS library infertap does not probe (gnutls-cli/gnutls-serv: muted after its handshake)
  stress-ng                                # a bounded CPU hog in the sample server's cgroup (load PSI test)
  prometheus                               # the Prometheus integration test scrapes the agent; promtool checks
                                           # and unit-tests the fleet rules (tests/prometheus/run.sh)
  nginx haproxy                            # real gateways for the issue-3 path tests (started by the tests)
  python3-jsonschema                       # NDJSON records checked against docs/schema.json
  nodejs                                   # the official npm clients of the integration tests (below)
  golang-go caddy                          # Go crypto/tls tests: programs built in the test, Caddy as a Go TLS gateway
  tshark                                   # the HTTP/2 tests' oracle: it dissects captures of the same traffic
  python3-grpcio                           # a real gRPC server-streaming service and client (HTTP/2 tests)
  nghttp2-server                           # nghttpd: another HTTP/2 implementation's h2c server
  python3-h2                               # the tests' h2c server reached by HTTP/1.1 Upgrade (tests/support)
  g++-aarch64-linux-gnu                    # make cross-arm64 (its arm64 libraries: scripts/arm64_sysroot.sh)
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: installing packages needs root (run with sudo)" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# kubectl builds deploy/ (`kubectl kustomize`, tests/deploy/validate_schemas.py):
# Debian's kubernetes-client, unless a kubectl is there already (another
# package's, e.g. the Google Cloud CLI's, which owns /usr/bin/kubectl).
command -v kubectl >/dev/null 2>&1 ||
  dpkg-query -W -f='${Status}' kubernetes-client 2>/dev/null | grep -q "install ok installed" || missing+=(kubernetes-client)

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # wireshark-common asks whether non-root users may capture: no (the tests capture as root).
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  # Packaged daemons (nginx, haproxy, prometheus) must not start on install:
  # the tests run their own instances on free ports. policy-rc.d exit 101 =
  # "action forbidden" for invoke-rc.d; restore any policy that was there.
  policy=/usr/sbin/policy-rc.d
  saved=""
  if [ -e "$policy" ]; then saved=$(mktemp); cp -p "$policy" "$saved"; fi
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || rc=$?
  if [ -n "$saved" ]; then mv -f "$saved" "$policy"; else rm -f "$policy"; fi
  [ "$rc" -eq 0 ] || { echo "setup.sh: apt-get failed ($rc)" >&2; exit "$rc"; }
fi

# The official npm clients the integration tests drive (tests/support/*.mjs),
# pinned, in /opt/infertap-test/node_modules: the tests' NODE_PATH
# (INFERTAP_NODE_MODULES overrides it). npm comes with nodejs where Node.js
# is NodeSource's; Debian's own nodejs needs the npm package.
node_prefix=/opt/infertap-test
node_packages=(ollama@0.6.4 openai@4.104.0)  # openai: Node's own, statically linked OpenSSL (TLS tests)
# The deploy manifests' validators compiled from the Kubernetes v1.36 OpenAPI
# and the prometheus-operator CRDs (tests/deploy/validate_openapi.mjs).
node_packages+=(kubernetes-models@5.1.0 @kubernetes-models/prometheus-operator@6.0.0)
if ! command -v npm >/dev/null 2>&1; then
  echo "setup.sh: installing npm"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null ||
    { echo "setup.sh: apt-get install npm failed" >&2; exit 1; }
fi
for spec in "${node_packages[@]}"; do
  name=${spec%@*} version=${spec##*@}
  have=$(node -p "require('$node_prefix/node_modules/$name/package.json').version" 2>/dev/null || true)
  if [ "$have" != "$version" ]; then
    echo "setup.sh: npm install $spec into $node_prefix"
    mkdir -p "$node_prefix"
    npm install --prefix "$node_prefix" --no-audit --no-fund "$spec" >/dev/null ||
      { echo "setup.sh: npm install $spec failed" >&2; exit 1; }
  fi
done

# The OTLP test receiver's decoder (tests/support/otlp/receiver.cjs): the
# protobufjs code generated from the official opentelemetry-proto definitions,
# as @opentelemetry/otlp-transformer ships it, pinned by the package-lock.json
# beside it and installed there (npm ci).
otlp_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/support/otlp"
otlp_want=$(node -p "require('$otlp_dir/package.json').dependencies['@opentelemetry/otlp-transformer']")
otlp_have=$(node -p "require('$otlp_dir/node_modules/@opentelemetry/otlp-transformer/package.json').version" 2>/dev/null || true)
if [ "$otlp_have" != "$otlp_want" ]; then
  echo "setup.sh: npm ci in $otlp_dir (@opentelemetry/otlp-transformer@$otlp_want)"
  npm ci --prefix "$otlp_dir" --no-audit --no-fund >/dev/null ||
    { echo "setup.sh: npm ci in $otlp_dir failed" >&2; exit 1; }
fi

# The realtime (WebSocket) peers (tests/support/realtime: server.mjs on ws,
# client.mjs on the official openai SDK's OpenAIRealtimeWS), pinned by the
# package-lock.json beside them and installed there (npm ci).
rt_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/support/realtime"
rt_want=$(node -p "const d = require('$rt_dir/package.json').dependencies; 'openai@' + d.openai + ' ws@' + d.ws")
rt_have=$(node -p "'openai@' + require('$rt_dir/node_modules/openai/package.json').version + ' ws@' + require('$rt_dir/node_modules/ws/package.json').version" 2>/dev/null || true)
if [ "$rt_have" != "$rt_want" ]; then
  echo "setup.sh: npm ci in $rt_dir ($rt_want)"
  npm ci --prefix "$rt_dir" --no-audit --no-fund >/dev/null ||
    { echo "setup.sh: npm ci in $rt_dir failed" >&2; exit 1; }
fi

# A system nginx/haproxy bound to :80 would only get in the way: stop and
# disable the packaged services (no-ops where they never ran).
for svc in nginx haproxy; do
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
  else
    if [ -x "/etc/init.d/$svc" ]; then "/etc/init.d/$svc" stop >/dev/null 2>&1 || true; fi
    command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$svc" disable >/dev/null 2>&1 || true
  fi
done

# The agent mounts tracefs itself when it is missing; tests expect it too.
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing
fi
echo "setup.sh: dependencies present"
