#!/usr/bin/env bash
# Regenerates vmlinux/<arch>/vmlinux.h. The result is committed: builds use it
# and never need the build host's BTF.
#
#   scripts/gen_vmlinux.sh          the running kernel's arch, from its BTF
#                                   (/sys/kernel/btf/vmlinux, or BTF=<file>)
#   scripts/gen_vmlinux.sh arm64    another arch (x86 or arm64): from the BTF
#                                   inside the distribution's kernel image for it
#
# For another arch the image package (KERNEL_FLAVOUR, default the cloud
# flavour: the same core types as the generic kernel, a third of its download)
# is fetched with apt-get download through a private package index of that
# arch (scripts/lib/foreign_apt.sh: the host's apt and dpkg stay as they are).
# The kernel keeps its BTF as a raw blob in the image; it is found by its
# header and dumped with bpftool.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')
arch=${1:-$host}
case "$arch" in
  x86) debarch=amd64 ;;
  arm64) debarch=arm64 ;;
  *) echo "gen_vmlinux: arch must be x86 or arm64 (got '$arch')" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The BTF blob of a kernel image: the largest run that starts with a valid BTF
# header (magic 0xeB9F, version 1, 24-byte header, strings right after types).
extract_btf() {  # $1 = kernel image (raw or gzip), $2 = output
  python3 - "$1" "$2" <<'PY'
import gzip, struct, sys
data = open(sys.argv[1], 'rb').read()
if data[:2] == b'\x1f\x8b':
    data = gzip.decompress(data)
best, at = None, data.find(b'\x9f\xeb\x01\x00')
while at >= 0:
    hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from('<5I', data, at + 4)
    if hdr_len == 24 and type_off == 0 and str_off == type_len and str_len and at + 24 + str_off + str_len <= len(data):
        size = 24 + str_off + str_len
        if best is None or size > best[1]:
            best = (at, size)
    at = data.find(b'\x9f\xeb\x01\x00', at + 1)
if best is None:
    sys.exit('gen_vmlinux: no BTF in %s (kernel built without CONFIG_DEBUG_INFO_BTF?)' % sys.argv[1])
open(sys.argv[2], 'wb').write(data[best[0]:best[0] + best[1]])
PY
}

if [ "$arch" = "$host" ] || [ -n "${BTF:-}" ]; then
  btf=${BTF:-/sys/kernel/btf/vmlinux}
  [ -r "$btf" ] || { echo "gen_vmlinux: $btf not readable: the kernel needs CONFIG_DEBUG_INFO_BTF" >&2; exit 1; }
  source=$btf
else
  flavour=${KERNEL_FLAVOUR:-cloud-$debarch}
  . scripts/lib/foreign_apt.sh
  foreign_apt_init "$debarch" "$work"
  image=$(apt-cache "${foreign_apt[@]}" depends "linux-image-$flavour" |
          sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -1)
  [ -n "$image" ] || { echo "gen_vmlinux: no kernel image package for linux-image-$flavour ($debarch)" >&2; exit 1; }
  (cd "$work" && apt-get "${foreign_apt[@]}" download "$image")
  dpkg-deb --fsys-tarfile "$work/${image}"_*.deb | tar -x -C "$work" --wildcards './boot/vmlinuz-*'
  btf=$work/btf
  extract_btf "$work"/boot/vmlinuz-* "$btf"
  source="$image $(dpkg-deb -f "$work/${image}"_*.deb Version) ($debarch)"
fi
mkdir -p "vmlinux/$arch"
bpftool btf dump file "$btf" format c > "vmlinux/$arch/vmlinux.h.tmp"
mv "vmlinux/$arch/vmlinux.h.tmp" "vmlinux/$arch/vmlinux.h"
echo "wrote vmlinux/$arch/vmlinux.h from $source"
