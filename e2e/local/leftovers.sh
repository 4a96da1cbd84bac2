#!/usr/bin/env bash
# What the local node may leave behind: its processes, mounts, network
# namespaces, links, cgroups and files. `snapshot` prints the current state;
# `check BEFORE` fails, listing them, when anything is there now that was not
# in the snapshot BEFORE (taken before up.sh). run.sh checks after down.sh.
#   e2e/local/leftovers.sh snapshot > before.txt
#   e2e/local/leftovers.sh check before.txt
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"

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
    if [[ -d $target ]]; then echo "cgroup $target"; fi
  done
  awk '{ print $5 }' /proc/self/mountinfo | while read -r target; do
    for w in "${WATCHED[@]}"; do
      if [[ $target == "$w" || $target == "$w"/* ]]; then
        echo "mount $target"
      fi
    done
  done
  for w in "${WATCHED[@]}"; do
    if [[ -e $w ]]; then find "$w" -maxdepth 4 2>/dev/null | sed 's/^/path /'; fi
  done
  find /dev -maxdepth 1 -name 'gdp-e2e-*' 2>/dev/null | sed 's/^/path /'
  # One pass over /proc (a fork per process would take seconds on 2 cores).
  # A node binary counts when it runs outside the host's network namespace
  # (everything up.sh starts runs in the node's, pods in their own) or names
  # the node's state: the unit suite's kube-apiservers and etcds, on the
  # host's loopback with temporary directories, are other runs' and not ours.
  {
    find /proc -mindepth 2 -maxdepth 3 \( -name exe -o -path '*/ns/net' \) \
      -printf '%h %f %l\n' 2>/dev/null |
      awk -v re="$BINARIES" -v host="$(readlink /proc/self/ns/net)" '
        $2 == "exe" { exe[$1] = $3 }
        $2 == "net" { sub("/ns$", "", $1); net[$1] = $3 }
        END { for (p in exe) if (exe[p] ~ re && net[p] != host) print p }' || true
    grep -lsF "$NODE_STATE" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|/cmdline$||' || true
    grep -ls "$CGROUP_ROOT/" /proc/[0-9]*/cgroup 2>/dev/null | sed 's|/cgroup$||' || true
  } | sort -u | while read -r pid; do
    exe=$(readlink "$pid/exe" 2>/dev/null) || continue
    echo "process $exe $(tr '\0' ' ' <"$pid/cmdline" 2>/dev/null | cut -c1-200)"
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
