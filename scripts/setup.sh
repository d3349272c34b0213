#!/usr/bin/env bash
# Installs every Debian package infertap needs to build, test and run its demo.
# Idempotent: only missing packages are installed; apt lists are refreshed once.
set -euo pipefail

packages=(
  make g++ clang llvm libclang-rt-14-dev   # userspace, BPF objects, libFuzzer + sanitizers
  bpftool libbpf-dev libelf-dev zlib1g-dev pkg-config
  libbrotli-dev libzstd-dev                # compressed response bodies (gzip: zlib1g-dev)
  libcli11-dev nlohmann-json3-dev libsimdjson-dev libcpp-httplib-dev libyaml-cpp-dev
  libssl-dev                               # the metrics endpoint's TLS (OpenSSL); bcrypt comes with libc (libcrypt)
  libgtest-dev libgmock-dev libbenchmark-dev
  curl jq iproute2 python3 python3-yaml procps util-linux
  prometheus                               # the Prometheus integration test scrapes the agent
  nginx haproxy                            # real gateways for the issue-3 path tests (started by the tests)
  python3-jsonschema                       # NDJSON records checked against docs/schema.json
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

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
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

# Node.js and the official `openai` npm client for the TLS tests (Node's own,
# statically linked OpenSSL). Debian's nodejs + npm only when no node is
# installed (a NodeSource nodejs carries npm itself and conflicts with it);
# the package goes into a fixed directory the tests use as NODE_PATH.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup.sh: installing nodejs npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
npm_dir=/var/cache/infertap/npm
if [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
  echo "setup.sh: installing the openai npm package into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --silent openai@4 >/dev/null
fi

# The agent mounts tracefs itself when it is missing; tests expect it too.
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing
fi
echo "setup.sh: dependencies present"
