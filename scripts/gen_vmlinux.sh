#!/usr/bin/env bash
# Regenerates vmlinux/<arch>/vmlinux.h from the running kernel's BTF. The result
# is committed: builds use it and never need the build host's BTF.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=$(uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')
btf=${BTF:-/sys/kernel/btf/vmlinux}
[ -r "$btf" ] || { echo "gen_vmlinux: $btf not readable: the kernel needs CONFIG_DEBUG_INFO_BTF" >&2; exit 1; }
mkdir -p "vmlinux/$arch"
bpftool btf dump file "$btf" format c > "vmlinux/$arch/vmlinux.h.tmp"
mv "vmlinux/$arch/vmlinux.h.tmp" "vmlinux/$arch/vmlinux.h"
echo "wrote vmlinux/$arch/vmlinux.h"
