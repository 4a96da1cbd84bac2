# shellcheck shell=bash disable=SC2034 # names used by the scripts that source this file
# The local node (e2e/local): where everything lives, how each component is
# started, and the driver the shared checks (e2e/checks.sh) use on it.
# Sourced by up.sh, down.sh, leftovers.sh and checks.sh; never run.
#
# Everything the node makes is under NODE_STATE (fixed: the e2e overlay names
# its kubelet's pod-resources directory) or named gdp-e2e / genericdp-e2e:
#   network namespace gdp-e2e, veth gdp-e2e-h (host end, no address) and
#   gdp-e2e-n (in the namespace, 192.0.2.10/24), bridge gdp-e2e-br for pods,
#   cgroup /genericdp-e2e in every hierarchy, the node gdp-e2e-node.

# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
LOCAL_DIR=$E2E_ROOT/local

NODE=gdp-e2e-node
NODE_STATE=/var/lib/genericdp-e2e-node
NETNS=gdp-e2e
NETNS_PATH=/run/netns/$NETNS
VETH_HOST=gdp-e2e-h
VETH_NODE=gdp-e2e-n
# Documentation ranges (RFC 5737): never routed anywhere, never the host's.
NODE_IP=192.0.2.10
POD_SUBNET=198.51.100.0/24
SERVICE_SUBNET=203.0.113.0/24
CGROUP_ROOT=/genericdp-e2e
PKI=$NODE_STATE/pki
PIDS=$NODE_STATE/pids
KUBELET_ROOT=$NODE_STATE/kubelet
CONTAINERD_SOCK=$NODE_STATE/containerd/containerd.sock
ADMIN_KUBECONFIG=$PKI/admin.kubeconfig
# Fixed in the kubelet whatever --root-dir says.
PLUGIN_DIR=/var/lib/kubelet/device-plugins
LOG_DIR=${LOG_DIR:-$ARTIFACTS/node-logs}
KUBE_BIN_DIR=${KUBE_BIN_DIR:-}
IMAGE=${IMAGE:-localhost/genericdp:e2e}
CONSUMER_IMAGE=${CONSUMER_IMAGE:-localhost/busybox:e2e}
OVERLAY=$LOCAL_DIR/overlay
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

kube_bin() {
  [[ -n $KUBE_BIN_DIR && -x $KUBE_BIN_DIR/$1 ]] || {
    echo "error: $1 not found in KUBE_BIN_DIR='$KUBE_BIN_DIR' (e2e/local/get-kube-binaries.sh)" >&2
    exit 2
  }
  echo "$KUBE_BIN_DIR/$1"
}

# -- the driver of the shared checks -------------------------------------------------------

k() {
  nsenter --net="$NETNS_PATH" "$(kube_bin kubectl)" --kubeconfig "$ADMIN_KUBECONFIG" "$@"
}

# The node is this machine: /dev, /var/lib/genericdp-e2e and the kubelet's
# directories are the host's.
node_exec() {
  "$@"
}

# kubelet_log_since T: the kubelet's log lines after T as "UNIXTIME message".
# The kubelet logs JSON, "ts" in milliseconds ({"ts":1796115363006.975,...}).
kubelet_log_since() {
  sed -nE 's/^\{"ts":([0-9.]+),(.*)$/\1 \2/p' "$LOG_DIR/kubelet.log" |
    awk -v t="$1" '{ $1 = sprintf("%.6f", $1 / 1000) } $1 + 0 > t + 0'
}

# kill_kubelet: SIGKILL, as a crash; kubelet_start brings it back.
kill_kubelet() {
  local pid
  pid=$(component_pid kubelet) || return 0
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

restart_kubelet_hard() {
  kill_kubelet
  start_kubelet
}

node_diagnostics() {
  local c
  echo "===== local node: processes"
  for c in "${COMPONENTS[@]}"; do
    printf '%-24s %s\n' "$c" "$(component_pid "$c" || echo 'not running')"
  done
  echo "===== containerd: containers"
  ctr_k8s containers list
  ctr_k8s tasks list
  for c in "${COMPONENTS[@]}"; do
    echo "===== $c log (last 150 lines; all of it in $LOG_DIR/$c.log)"
    tail -n 150 "$LOG_DIR/$c.log"
  done
  echo "===== kubelet log (device plugins, DRA)"
  grep -iE 'device.?plugin|devicemanager|registration|genericdp|example\.com|DRA|ResourceSlice|PrepareResources' \
    "$LOG_DIR/kubelet.log" | tail -200
}

ctr_k8s() {
  ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"
}

# -- components -----------------------------------------------------------------------------

# component_pid NAME: the pid of a running component started by this node.
component_pid() {
  local pid
  pid=$(cat "$PIDS/$1.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
  # Not a recycled pid: the process still runs the component's binary.
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */"$1" ]] || return 1
  echo "$pid"
}

# start_component NAME COMMAND...: in the node's network namespace (one mount
# view for all: nsenter, never `ip netns exec`), a session of its own, output
# appended to LOG_DIR/NAME.log.
start_component() {
  local name=$1
  shift
  mkdir -p "$PIDS" "$LOG_DIR"
  nsenter --net="$NETNS_PATH" setsid "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  disown
}

# KUBELET_VERBOSITY=N: the kubelet's -v (the DRA round: 4, for its plugin
# registration and NodePrepareResources lines); its default otherwise.
start_kubelet() {
  start_component kubelet "$(kube_bin kubelet)" ${KUBELET_VERBOSITY:+"-v=$KUBELET_VERBOSITY"} \
    --config="$NODE_STATE/kubelet-config.yaml" \
    --kubeconfig="$PKI/kubelet.kubeconfig" \
    --root-dir="$KUBELET_ROOT" \
    --cert-dir="$KUBELET_ROOT/pki" \
    --node-ip="$NODE_IP" \
    --hostname-override="$NODE"
}
