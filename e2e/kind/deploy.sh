#!/usr/bin/env bash
# Load the image into the kind node, prepare the node for the checks (device
# nodes, the shared directory) and deploy the e2e overlay of the kustomize base.
#   e2e/kind/deploy.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require docker kind kubectl

log "loading $IMAGE into $CLUSTER"
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "preparing $NODE: /dev/gdp-e2e-dev0 (c 1:3), /var/lib/genericdp-e2e/share"
# shellcheck disable=SC2016 # $(hostname) is the node's, expanded there
node_exec sh -c '
  set -e
  rm -f /dev/gdp-e2e-*
  mknod -m 0666 /dev/gdp-e2e-dev0 c 1 3
  mkdir -p /var/lib/genericdp-e2e/share
  rm -f /var/lib/genericdp-e2e/unhealthy
  echo "hello from $(hostname)" > /var/lib/genericdp-e2e/share/hello.txt
'

log "deploying e2e/kind/overlay (the kustomize base, image $IMAGE)"
started=$(now)
k apply -k "$E2E_DIR/overlay"
k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
  fail "the genericdp DaemonSet did not become ready within 180s"
timing "kubectl apply -> DaemonSet rolled out (pod Ready)" "$(seconds_between "$started" "$(now)")"
