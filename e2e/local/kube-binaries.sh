#!/usr/bin/env bash
# Put the Kubernetes binaries of the local node (kubelet, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl) into DIR, each checked
# against a pinned SHA-256 before it is used:
#   e2e/local/kube-binaries.sh unpack DIR [XZ_DIR]
#       from XZ_DIR/<name>.xz (default: ../shared/k8s next to the checkout, as
#       .ci/run has it; 1.36.2 built from source, see its README)
#   e2e/local/kube-binaries.sh download DIR
#       the official release binaries of KUBE_RELEASE from dl.k8s.io (GitHub
#       Actions, .github/workflows/e2e.yaml)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NAMES=(kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl)

# The unpacked binaries of ../shared/k8s (its README lists the same sums).
declare -A SHARED_SHA256=(
  [kubelet]=c3951b5a5e4b57a309d64ff8e56c88e2e53e2b865a28c217e24057dadc670d19
  [kube-apiserver]=522aa6be70cf5c4feb6b05363a78807aa7923cf48e33264ead307035dce866ed
  [kube-controller-manager]=008378fbf8c35a42e34c1f9df6933b5b5acff941c51132ec42c748720d8139aa
  [kube-scheduler]=e48002b9710c5c218d7c82a47c3d5fd4f8cc5e3d67f0d3a277d442b58dfee2c8
  [kubectl]=820610db73bf84f525881ef7adb045668f8ac7ad5972b735318431d1092c97c4
)

# The official release (linux/amd64): version and sums in kube-release.sha256.
KUBE_RELEASE=$(awk '$1 == "version" { print $2 }' "$here/kube-release.sha256")

verify() {
  local file=$1 want=$2 got
  got=$(sha256sum "$file" | awk '{ print $1 }')
  if [[ $got != "$want" ]]; then
    echo "error: $file: sha256 $got, expected $want" >&2
    rm -f "$file"
    exit 1
  fi
}

mode=${1:-}
dir=${2:-}
[[ -n $dir ]] || {
  echo "usage: e2e/local/kube-binaries.sh unpack DIR [XZ_DIR] | download DIR" >&2
  exit 2
}
mkdir -p "$dir"
case $mode in
  unpack)
    xz_dir=${3:-$here/../../../shared/k8s}
    for name in "${NAMES[@]}"; do
      [[ -f $xz_dir/$name.xz ]] || {
        echo "error: $xz_dir/$name.xz not found (the local e2e expects ../shared/k8s next to the checkout)" >&2
        exit 2
      }
      if [[ -x $dir/$name ]] && sha256sum "$dir/$name" | grep -q "^${SHARED_SHA256[$name]} "; then
        continue
      fi
      xz -dc "$xz_dir/$name.xz" >"$dir/$name.tmp"
      verify "$dir/$name.tmp" "${SHARED_SHA256[$name]}"
      chmod +x "$dir/$name.tmp"
      mv "$dir/$name.tmp" "$dir/$name"
    done
    ;;
  download)
    for name in "${NAMES[@]}"; do
      url=https://dl.k8s.io/release/$KUBE_RELEASE/bin/linux/amd64/$name
      want=$(awk -v n="$name" '$1 == n { print $2 }' "$here/kube-release.sha256")
      if ! [[ $want =~ ^[0-9a-f]{64}$ ]]; then
        # Not pinned yet (the sums could not be fetched where this was
        # written): the published sum, and a warning saying what to pin.
        want=$(curl -fsSL --retry 5 --retry-all-errors "$url.sha256")
        msg="$name $KUBE_RELEASE is checked against the published $url.sha256 only; pin it: $name $want"
        echo "warning: $msg" >&2
        [[ -z ${GITHUB_ACTIONS:-} ]] || echo "::warning title=unpinned Kubernetes binary::$msg"
      fi
      curl -fsSL --retry 5 --retry-all-errors -o "$dir/$name.tmp" "$url"
      verify "$dir/$name.tmp" "$want"
      chmod +x "$dir/$name.tmp"
      mv "$dir/$name.tmp" "$dir/$name"
    done
    ;;
  *)
    echo "usage: e2e/local/kube-binaries.sh unpack DIR [XZ_DIR] | download DIR" >&2
    exit 2
    ;;
esac
"$dir/kubectl" version --client | sed -n 1p
