#!/usr/bin/env bash
# Installs every Debian package infertap needs to build, test and run its demo.
# Idempotent: only missing packages are installed; apt lists are refreshed once.
set -euo pipefail

packages=(
  make g++ clang llvm libclang-rt-14-dev   # userspace, BPF objects, libFuzzer + sanitizers
  bpftool libbpf-dev libelf-dev zlib1g-dev pkg-config
  libcli11-dev nlohmann-json3-dev libsimdjson-dev libcpp-httplib-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  curl jq iproute2 python3 python3-yaml procps util-linux
  prometheus                               # the Prometheus integration test scrapes the agent
  python3-jsonschema                       # NDJSON records checked against docs/schema.json
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The agent mounts tracefs itself when it is missing; tests expect it too.
if [ ! -d /sys/kernel/tracing/events ]; then
  mount -t tracefs nodev /sys/kernel/tracing
fi
echo "setup.sh: dependencies present"
