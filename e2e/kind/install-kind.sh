#!/usr/bin/env bash
# Install the pinned kind release into DIR (default: ~/.local/bin), checked
# against its published SHA-256. For CI; locally any recent kind works.
#   e2e/kind/install-kind.sh [DIR]
set -euo pipefail

KIND_VERSION=v0.33.0
dir=${1:-$HOME/.local/bin}
case $(uname -m) in
  x86_64) arch=amd64 sum=aee6151561422756b764a4ae28e7f44cda5af5a9eead3cc9985112b1de8d8e0d ;;
  aarch64 | arm64) arch=arm64 sum=20022bee6cfcd5086cb7234d218e3454e6090022f2a8f55d1fa7fcf42c3867a2 ;;
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
