#!/usr/bin/env bash
# A containerd with CDI for the local node: Debian 12's (1.6) ignores CDI,
# Debian 13's (1.7) supports it (enable_cdi). Takes containerd and
# containerd-shim-runc-v2 from a Debian 13 (trixie) package set made with
# mmdebstrap (no registry), into DIR, and checks they run here (Go binaries
# linked only against libc; trixie's runc needs a newer glibc, so Debian 12's
# runc stays). Cached in CDI_CACHE between runs.
#   e2e/local/containerd-cdi.sh DIR
# Environment: DEBIAN_MIRROR=http://deb.debian.org/debian
#              CDI_CACHE=/var/cache/genericdp-e2e/trixie-containerd
set -euo pipefail
dir=${1:?usage: e2e/local/containerd-cdi.sh DIR}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${CDI_CACHE:-/var/cache/genericdp-e2e/trixie-containerd}
mkdir -p "$dir" "$cache"
if ! [[ -x $cache/containerd && -x $cache/containerd-shim-runc-v2 ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mmdebstrap --quiet --variant=essential --include=containerd trixie "$work/root.tar" "$mirror"
  tar -xf "$work/root.tar" -C "$work" ./usr/bin/containerd ./usr/bin/containerd-shim-runc-v2
  install -m 0755 "$work/usr/bin/containerd" "$work/usr/bin/containerd-shim-runc-v2" "$cache/"
fi
install -m 0755 "$cache/containerd" "$cache/containerd-shim-runc-v2" "$dir/"
"$dir/containerd" --version
"$dir/containerd-shim-runc-v2" -v >/dev/null
