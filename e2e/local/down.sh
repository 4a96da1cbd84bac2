#!/usr/bin/env bash
# Tear the local node down, whatever state a run left it in (half up, killed,
# crashed): every process in its network namespace or its cgroups, the mounts
# under its directory, its cgroups, the network namespace and veth, the
# sockets it made in /var/lib/kubelet/device-plugins, the e2e device nodes,
# and its directory. Idempotent; safe when nothing is up.
#   e2e/local/down.sh
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"
[[ $(id -u) == 0 ]] || { echo "error: the local node needs root" >&2; exit 2; }

# pids_in_netns: processes whose network namespace is the node's.
pids_in_netns() {
  [[ -e $NETNS_PATH ]] && ip netns pids "$NETNS" 2>/dev/null
  return 0
}

# pids_in_cgroups: processes in the node's cgroups (the pods' containers).
pids_in_cgroups() {
  local dir
  for dir in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" /sys/fs/cgroup/"${CGROUP_ROOT#/}"; do
    [[ -d $dir ]] && find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}

kill_all() {
  local pids
  # The kubelet first, so it restarts nothing; then everything else.
  if pid=$(component_pid kubelet); then kill -KILL "$pid" 2>/dev/null; fi
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pids=$( (pids_in_netns; pids_in_cgroups; for c in "${COMPONENTS[@]}"; do component_pid "$c"; done) | sort -u)
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $pids 2>/dev/null
    sleep 0.2
  done
  echo "warning: still running after SIGKILL: $pids" >&2
}

# unmount_under DIR: every mount below DIR (not DIR itself, which may be a
# volume the node was given), deepest first; lazily if busy.
unmount_under() {
  local dir=$1 target
  awk -v d="$dir" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r target; do
      umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null ||
        echo "warning: cannot unmount $target" >&2
    done
}

remove_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -d $h${CGROUP_ROOT#/} ]] || continue
    find "$h${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} + 2>/dev/null
    [[ -d $h${CGROUP_ROOT#/} ]] && echo "warning: cannot remove cgroup $h${CGROUP_ROOT#/}" >&2
  done
  return 0
}

kill_all
unmount_under "$NODE_STATE"
unmount_under "$PLUGIN_DIR"
remove_cgroups

if ip link show "$VETH_HOST" >/dev/null 2>&1; then
  ip link del "$VETH_HOST"
fi
if [[ -e $NETNS_PATH ]]; then
  ip netns del "$NETNS" 2>/dev/null || { umount "$NETNS_PATH" 2>/dev/null; rm -f "$NETNS_PATH"; }
fi

# What the kubelet and genericdp made in the fixed device-plugin directory.
rm -f "$PLUGIN_DIR"/kubelet.sock "$PLUGIN_DIR"/kubelet_internal_checkpoint "$PLUGIN_DIR"/genericdp-*.sock \
  "$PLUGIN_DIR"/gdp-*.sock 2>/dev/null
# CNI results cached by libcni (a fixed path in containerd 1.6): the node's
# network's, and the loopback ones of its sandboxes.
for id in $(ls "$NODE_STATE"/containerd/{root,state}/io.containerd.grpc.v1.cri/sandboxes 2>/dev/null) \
  $(find /var/lib/cni/results -name 'gdp-e2e-*' -printf '%f\n' 2>/dev/null | sed -E 's/^gdp-e2e-([0-9a-f]+)-.*/\1/'); do
  rm -f /var/lib/cni/results/*-"$id"-* 2>/dev/null
done
# Shim sockets (a fixed path in containerd 1.6 and 1.7) that nothing listens
# on any more: the node's killed shims'; another containerd's live ones stay.
listening=$(ss -xln 2>/dev/null | awk '{ print $5 }')
for sock in /run/containerd/s/*; do
  [[ -S $sock ]] || continue
  grep -qxF -- "$sock" <<<"$listening" || rm -f "$sock"
done
# CDI specs of claims genericdp's DRA backend prepared and nobody unprepared
# (the node was killed with pods running).
rm -f /var/run/cdi/gdp-claim-*.json
# The CDI specs of the e2e's resources with cdi: true (cdi.sh): genericdp
# keeps a resource's spec when it stops (docs/config.md, CDI).
rm -f /var/run/cdi/genericdp-example.com_e2e-*.json
rm -f /dev/gdp-e2e-*
rm -rf /var/lib/genericdp-e2e
if [[ -e $NODE_STATE/made-run-netns ]] && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
  umount /run/netns 2>/dev/null || true
fi
if [[ -f $NODE_STATE/created-dirs ]]; then
  # Deepest first; only when empty (something else may have put files there since).
  sort -r "$NODE_STATE/created-dirs" | while read -r d; do
    find "$d" -depth -type d -empty -delete 2>/dev/null
  done
fi
if [[ -d $NODE_STATE ]]; then
  unmount_under "$NODE_STATE"
  if mountpoint -q "$NODE_STATE"; then
    # A volume given to the node (.github/workflows/e2e.yaml): empty it.
    find "$NODE_STATE" -mindepth 1 -delete || echo "warning: cannot empty $NODE_STATE" >&2
  else
    rm -rf "$NODE_STATE" || echo "warning: cannot remove $NODE_STATE" >&2
  fi
fi
exit 0
