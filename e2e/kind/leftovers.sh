#!/usr/bin/env bash
# What the kind run may leave on the host, as a difference between before and
# after: network namespaces, links, routes, host iptables rules, mounts,
# cgroups, the engine's processes, /lib/modules and the engine's state.
# A /run/netns bind mount found there before is in both and never counts.
#   e2e/kind/leftovers.sh snapshot > before.txt
#   e2e/kind/leftovers.sh check before.txt
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

snapshot() {
  ip netns list 2>/dev/null | awk '{ print "netns " $1 }'
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print "link " $2 }'
  ip route show | sed 's/^/route /'
  iptables-save 2>/dev/null | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//; s/^/iptables /' || true
  awk '{ print "mount " $5 }' /proc/self/mountinfo
  find /sys/fs/cgroup -maxdepth 3 -type d \( -name 'docker*' -o -name '*kubepods*' -o -name 'kubelet*' -o -path '*/system.slice/*' \) 2>/dev/null |
    sed 's/^/cgroup /'
  find /proc -mindepth 2 -maxdepth 2 -name exe -printf '%l\n' 2>/dev/null |
    grep -E '/(dockerd|containerd|containerd-shim[^/]*|docker-proxy|docker-registry|runc|kind|kubelet)$' |
    sort | uniq -c | sed 's/^ */process /' || true
  for path in /lib/modules "$ENGINE_STATE" "$ENGINE_RUN"; do
    [[ -e $path ]] && echo "path $path"
  done
  return 0
}

case ${1:-} in
  snapshot) snapshot | sort -u ;;
  check)
    before=${2:?usage: leftovers.sh check BEFORE}
    left=$(comm -13 <(sort -u "$before") <(snapshot | sort -u))
    if [[ -n $left ]]; then
      printf 'left behind by the kind run:\n%s\n' "$left" >&2
      exit 1
    fi
    log "nothing left behind (netns, links, routes, iptables, mounts, cgroups, processes, /lib/modules)"
    ;;
  *)
    echo "usage: e2e/kind/leftovers.sh snapshot | check BEFORE" >&2
    exit 2
    ;;
esac
