#!/usr/bin/env bash
# Install the pinned kind release into DIR (default: ~/.local/bin), checked
# against its published SHA-256. For CI; locally any recent kind works.
#   e2e/kind/install-kind.sh [DIR]
set -euo pipefail

KIND_VERSION=v0.29.0
dir=${1:-$HOME/.local/bin}
case $(uname -m) in
  x86_64) arch=amd64 sum=c72eda46430f065fb45c5f70e7c957cc9209402ef309294821978677c8fb3284 ;;
  aarch64 | arm64) arch=arm64 sum=03d45095dbd9cc1689f179a3e5e5da24b77c2d1b257d7645abf1b4174bebcf2a ;;
  *)
    echo "error: no kind $KIND_VERSION checksum for $(uname -m)" >&2
    exit 2
    ;;
esac
mkdir -p "$dir"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
curl -fsSL --retry 5 --retry-all-errors -o "$tmp" \
  "https://github.com/kubernetes-sigs/kind/releases/download/$KIND_VERSION/kind-linux-$arch"
echo "$sum  $tmp" | sha256sum --check --quiet
install -m 0755 "$tmp" "$dir/kind"
"$dir/kind" version
