#!/usr/bin/env bash
# Create the e2e kind cluster (cluster.yaml: a control plane, two workers),
# replacing a cluster of the same name; point every node's containerd at the
# run's registry (REGISTRY, kind's local-registry pattern) and, for the
# locally built node image, give the nodes their pod network (cni.sh).
#   e2e/kind/create-cluster.sh 1.36           KIND_SOURCE=release: e2e/kind/node-images.txt
#   e2e/kind/create-cluster.sh IMAGE          any node image
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker kind kubectl

want=${1:-1.36}
config=$E2E_DIR/cluster.yaml
if [[ $want == */* || $want == *:* ]]; then
  image=$want
elif [[ $KIND_SOURCE == local ]]; then
  image=$NODE_IMAGE_LOCAL
else
  image=$(awk -v v="$want" '$1 == v { print $2 }' "$E2E_DIR/node-images.txt")
  if [[ -z $image ]]; then
    echo "error: no node image for Kubernetes $want in e2e/kind/node-images.txt; known:" >&2
    awk '!/^#/ && NF { print "  " $1 }' "$E2E_DIR/node-images.txt" >&2
    exit 2
  fi
fi
wait_args=(--wait 180s)
if [[ $KIND_SOURCE == local ]]; then
  config=$ARTIFACTS/cluster.yaml
  sed 's/^  ipFamily: ipv4$/  ipFamily: ipv4\n  disableDefaultCNI: true/' "$E2E_DIR/cluster.yaml" >"$config"
  # Nodes are Ready once cni.sh has run.
  wait_args=()
fi
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "deleting the previous cluster $CLUSTER"
  kind delete cluster --name "$CLUSTER"
fi
log "creating cluster $CLUSTER with $image"
started=$(now)
inns kind create cluster --name "$CLUSTER" --image "$image" --config "$config" "${wait_args[@]}"
for node in $(kind get nodes --name "$CLUSTER"); do
  # kind's documented local registry: hosts.toml per node, here the kind
  # network's gateway, where the registry listens.
  docker exec -i "$node" sh -c "mkdir -p /etc/containerd/certs.d/$REGISTRY && cat >/etc/containerd/certs.d/$REGISTRY/hosts.toml" <<TOML
[host."http://$KIND_GATEWAY:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
TOML
done
if [[ $KIND_SOURCE == local ]]; then
  "$E2E_DIR/cni.sh"
fi
wait_for 180 "every node Ready" k wait --for=condition=Ready nodes --all --timeout=5s
k -n kube-system rollout status deployment/coredns --timeout=180s
timing "kind cluster created, 3 nodes Ready (Kubernetes $want)" "$(seconds_between "$started" "$(now)")"
k get nodes -o wide
