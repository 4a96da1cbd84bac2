#!/usr/bin/env bash
# Prepare the node for the checks (device nodes, the shared directory) and
# deploy the e2e overlay as a user would (`kubectl apply -k`); the DaemonSet
# controller makes the pod, the scheduler places it. The image is already on
# the node (local/up.sh imports it).
#   e2e/deploy.sh kind|local
set -euo pipefail
way=${1:?usage: e2e/deploy.sh kind|local}
case $way in
  kind)
    # shellcheck source-path=SCRIPTDIR source=kind/kind-lib.sh
    source "$(dirname "${BASH_SOURCE[0]}")/kind/kind-lib.sh"
    ;;
  local)
    # shellcheck source-path=SCRIPTDIR source=local/node-lib.sh
    source "$(dirname "${BASH_SOURCE[0]}")/local/node-lib.sh"
    ;;
  *) echo "usage: e2e/deploy.sh kind|local" >&2; exit 2 ;;
esac

log "preparing $NODE: /dev/gdp-e2e-dev0 (c 10:229), /dev/gdp-e2e-dev1 (c 10:237), /dev/gdp-e2e-ctl (c 10:238), /dev/gdp-e2e-shared (c 1:5), /var/lib/genericdp-e2e/share"
# Two units of example.com/e2e-dev with numbers that no container gets by
# default (fuse's and loop-control's), so the device cgroup check means
# something: a pod may open its unit and not the other. The control node
# (vhost-net's number) comes with every unit (allocate.devices).
# shellcheck disable=SC2016 # $1 is the node name, expanded there
node_exec sh -c '
  set -e
  rm -f /dev/gdp-e2e-*
  mknod -m 0600 /dev/gdp-e2e-dev0 c 10 229
  mknod -m 0600 /dev/gdp-e2e-dev1 c 10 237
  mknod -m 0600 /dev/gdp-e2e-ctl c 10 238
  mknod -m 0666 /dev/gdp-e2e-shared c 1 5
  mkdir -p /var/lib/genericdp-e2e/share
  rm -f /var/lib/genericdp-e2e/unhealthy
  echo "hello from $1" > /var/lib/genericdp-e2e/share/hello.txt
' sh "$NODE"

log "deploying $OVERLAY (the kustomize base, image $IMAGE)"
started=$(now)
k apply -k "$OVERLAY"
k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
  fail "the genericdp DaemonSet did not become ready within 180s"
timing "kubectl apply -> DaemonSet rolled out (pod Ready)" "$(seconds_between "$started" "$(now)")"
