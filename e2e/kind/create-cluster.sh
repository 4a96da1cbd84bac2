#!/usr/bin/env bash
# Create the e2e kind cluster for one Kubernetes minor (or an explicit node
# image), replacing a cluster of the same name.
#   e2e/kind/create-cluster.sh 1.36
#   e2e/kind/create-cluster.sh kindest/node:v1.36.1@sha256:...
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker kind kubectl

want=${1:-1.36}
if [[ $want == */* || $want == *:* ]]; then
  image=$want
else
  image=$(awk -v v="$want" '$1 == v { print $2 }' "$E2E_DIR/node-images.txt")
  if [[ -z $image ]]; then
    echo "error: no node image for Kubernetes $want in e2e/kind/node-images.txt; known:" >&2
    awk '!/^#/ && NF { print "  " $1 }' "$E2E_DIR/node-images.txt" >&2
    exit 2
  fi
fi
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "deleting the previous cluster $CLUSTER"
  kind delete cluster --name "$CLUSTER"
fi
log "creating cluster $CLUSTER with $image"
started=$(now)
kind create cluster --name "$CLUSTER" --image "$image" \
  --config "$E2E_DIR/cluster.yaml" --wait 180s
timing "kind cluster created (Kubernetes $want)" "$(seconds_between "$started" "$(now)")"
k version
