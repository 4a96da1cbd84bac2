#!/usr/bin/env bash
# What the local node may leave behind: its processes, mounts, network
# namespaces, links, cgroups and files. `snapshot` prints the current state;
# `check BEFORE` fails, listing them, when anything is there now that was not
# in the snapshot BEFORE (taken before up.sh). run.sh checks after down.sh.
#   e2e/local/leftovers.sh snapshot > before.txt
#   e2e/local/leftovers.sh check before.txt
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node.sh
source "$(dirname "${BASH_SOURCE[0]}")/node.sh"

# Paths the node (its kubelet, containerd, CNI, the DaemonSet's hostPath
# volumes, the checks) writes outside NODE_STATE.
WATCHED=(
  "$NODE_STATE" /var/lib/kubelet /run/containerd /var/lib/cni /var/run/cdi /run/netns
  /var/lib/genericdp-e2e
)
BINARIES='/(containerd|containerd-shim-runc-v2|runc|etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|pause)$'

snapshot() {
  local pid exe target
  ip netns list 2>/dev/null | awk '{ print "netns " $1 }'
  ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
    grep -E '^gdp-e2e|^veth' | sed 's/^/link /' || true
  for target in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/"${CGROUP_ROOT#/}"; do
    [[ -d $target ]] && echo "cgroup $target"
  done
  awk '{ print $5 }' /proc/self/mountinfo | while read -r target; do
    for w in "${WATCHED[@]}"; do
      if [[ $target == "$w" || $target == "$w"/* ]]; then
        echo "mount $target"
      fi
    done
  done
  for w in "${WATCHED[@]}"; do
    [[ -e $w ]] && find "$w" -maxdepth 4 2>/dev/null | sed 's/^/path /'
  done
  find /dev -maxdepth 1 -name 'gdp-e2e-*' 2>/dev/null | sed 's/^/path /'
  for pid in /proc/[0-9]*; do
    exe=$(readlink "$pid/exe" 2>/dev/null) || continue
    if [[ $exe =~ $BINARIES ]] || grep -qs "$CGROUP_ROOT" "$pid/cgroup"; then
      echo "process $exe $(tr '\0' ' ' <"$pid/cmdline" 2>/dev/null | cut -c1-200)"
    fi
  done
}

case ${1:-} in
  snapshot) snapshot | sort -u ;;
  check)
    before=${2:?usage: leftovers.sh check BEFORE}
    left=$(comm -13 <(sort -u "$before") <(snapshot | sort -u))
    if [[ -n $left ]]; then
      printf 'left behind by the local node:\n%s\n' "$left" >&2
      exit 1
    fi
    log "nothing left behind (processes, mounts, netns, links, cgroups, files)"
    ;;
  *)
    echo "usage: e2e/local/leftovers.sh snapshot | check BEFORE" >&2
    exit 2
    ;;
esac
