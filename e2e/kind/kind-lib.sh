# shellcheck shell=bash disable=SC2034 # names used by the scripts that source this file
# The kind way to get a node (e2e/kind): names, and the driver the shared
# checks (e2e/checks.sh) use on a kind node. Sourced, never run.

# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
E2E_DIR=$E2E_ROOT/kind
CLUSTER=${CLUSTER:-genericdp-e2e}
# The node the shared checks (e2e/checks.sh) drive: a worker.
NODE=${NODE:-$CLUSTER-worker}
OVERLAY=$E2E_DIR/overlay

# Where the images come from (run.sh): `local` builds the node image from
# Debian packages and ../shared/k8s and runs its own Docker engine in a
# network namespace (engine.sh); `release` takes the kind release and the
# official kindest/node images with the machine's Docker (GitHub Actions).
if [[ -z ${KIND_SOURCE:-} ]]; then
  if [[ -n ${GITHUB_ACTIONS:-} ]]; then KIND_SOURCE=release; else KIND_SOURCE=local; fi
fi
# The run's addresses, all in 198.18.0.0/15: the Docker network `kind`, the
# pods and the Services. The registry is localhost:5001 where docker and
# helm run, the kind network's gateway for the nodes (containerd hosts.toml).
KIND_SUBNET=198.18.1.0/24
KIND_GATEWAY=198.18.1.1
POD_SUBNET=198.19.0.0/16
SERVICE_SUBNET=198.18.240.0/20
REGISTRY_PORT=5001
REGISTRY=localhost:$REGISTRY_PORT
# The project image as the run pushes it (overlay/kustomization.yaml names
# it too), tagged with the chart's appVersion. It has a shell and coreutils:
# it is the consumer too.
IMAGE=${IMAGE:-$REGISTRY/genericdp:$(awk -F'"' '/^appVersion:/ { print $2 }' "$REPO_ROOT/deploy/helm/genericdp/Chart.yaml")}
CONSUMER_IMAGE=${CONSUMER_IMAGE:-$IMAGE}
# The local engine's network namespace, state and sockets (engine.sh).
NETNS=${NETNS:-gdp-kind}
ENGINE_STATE=${ENGINE_STATE:-/var/lib/genericdp-kind}
ENGINE_RUN=${ENGINE_RUN:-/run/genericdp-kind}
KIND_CACHE=${KIND_CACHE:-/var/cache/genericdp-e2e/kind}
# The binaries of ../shared/k8s (local), and the node image built from them.
KUBE_XZ_DIR=${KUBE_XZ_DIR:-$REPO_ROOT/../shared/k8s}
NODE_IMAGE_LOCAL=genericdp-kind/node:v1.36.2
if [[ $KIND_SOURCE == local ]]; then
  export DOCKER_HOST=unix://$ENGINE_RUN/docker.sock
  export KUBECONFIG=${KUBECONFIG_KIND:-$ENGINE_RUN/kubeconfig}
fi

# inns COMMAND...: run COMMAND where the cluster's addresses are: inside the
# engine's network namespace (local, once engine.sh made it), or here.
inns() {
  if [[ $KIND_SOURCE == local && -e /run/netns/$NETNS ]]; then
    nsenter --net="/run/netns/$NETNS" "$@"
  else
    "$@"
  fi
}

k() {
  inns kubectl --context "kind-$CLUSTER" "$@"
}

# full_reference NAME[:TAG]: NAME as containerd and the kubelet spell it
# (genericdp:e2e -> docker.io/library/genericdp:e2e).
full_reference() {
  local ref=$1 first=${1%%/*}
  if [[ $ref != */* ]]; then
    ref=docker.io/library/$ref
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
    ref=docker.io/$ref
  fi
  printf '%s\n' "$ref"
}

node_exec() {
  docker exec "$NODE" "$@"
}

kubelet_log_since() {
  node_exec journalctl -u kubelet --no-pager -o short-unix --since "@${1%.*}" |
    awk -v t="$1" '$1 + 0 > t + 0'
}

kubelet_pid() {
  node_exec systemctl show -p MainPID --value kubelet
}

# SIGKILL, as a crash; kind's kubelet unit restarts it (Restart=always, 1 s).
kill_kubelet() {
  node_exec systemctl kill -s KILL kubelet
}

restart_kubelet_hard() {
  local before
  before=$(kubelet_pid)
  kill_kubelet
  wait_for 30 "systemd to start the kubelet again" kubelet_restarted "$before"
}

kubelet_restarted() {
  local pid
  pid=$(kubelet_pid) || return 1
  [[ $pid != 0 && $pid != "$1" ]]
}

node_diagnostics() {
  echo "===== kubelet log (device plugins)"
  node_exec journalctl -u kubelet --no-pager -o short-precise |
    grep -iE 'device.?plugin|devicemanager|registration|genericdp|example\.com' | tail -200
}
