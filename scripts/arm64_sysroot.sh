#!/usr/bin/env bash
# Unpacks the arm64 libraries and headers that infertap's userspace links
# against into a directory (default build-arm64/sysroot), for the aarch64
# cross build (make cross-arm64). The packages are fetched with apt-get
# download through a private arm64 package index (scripts/lib/foreign_apt.sh):
# nothing is installed, the host's apt and dpkg stay as they are. The C/C++
# runtime comes from the cross compiler (g++-aarch64-linux-gnu, scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-build-arm64/sysroot}
packages=(
  libbpf1 libbpf-dev libelf1 libelf-dev zlib1g zlib1g-dev
  libsimdjson14 libsimdjson-dev libyaml-cpp0.7 libyaml-cpp-dev
  libcpp-httplib0.11 libcpp-httplib-dev                      # built with TLS and brotli: its header
  libssl3 libssl-dev libbrotli1 libbrotli-dev                # includes theirs, its library needs theirs
  libzstd1 libzstd-dev                                       # compressed bodies (with zlib and brotli)
  libcrypt1 libcrypt-dev                                     # the metrics endpoint's basic-auth hashes
  libnghttp2-14 libnghttp2-dev                               # HTTP/2 header blocks (HPACK)
  libcli11-dev nlohmann-json3-dev                            # header-only
)
# The stamp names the packages: a changed list unpacks afresh.
[ "$(cat "$dest/.complete" 2>/dev/null)" = "${packages[*]}" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. scripts/lib/foreign_apt.sh
foreign_apt_init arm64 "$work"
mkdir -p "$work/debs"
(cd "$work/debs" && apt-get "${foreign_apt[@]}" download "${packages[@]}")
rm -rf "$dest"
mkdir -p "$dest"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$dest"; done
# Absolute library links (/lib/aarch64-linux-gnu/...) would point into the
# host: make them relative to the sysroot.
find "$dest" -type l -lname '/*' | while read -r link; do
  target=$(readlink "$link")
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dest$target")" "$link"
done
echo "${packages[*]}" >"$dest/.complete"
echo "arm64 sysroot ready in $dest"
