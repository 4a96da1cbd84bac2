#!/usr/bin/env bash
# Every Helm variant accepted by a real API server: `helm template` of the
# chart with its defaults and with each switch, piped to `kubectl apply
# --dry-run=server` against the kind cluster the e2e left up (KEEP_CLUSTER=1).
# The kustomize variants are checked by e2e/checks.sh (server_dry_run) on
# both ways; tests/test_chart_apiserver.py checks the Helm ones in ./dev test.
#   e2e/kind/helm-dry-run.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require helm kubectl

CHART=$REPO_ROOT/deploy/helm/genericdp
# Not the kustomize deployment's names: a dry-run create of new objects, not
# an update of the running DaemonSet (whose selector differs, and is immutable).
RELEASE=helm-dry-run
# name -> helm template arguments. The PodMonitor/ServiceMonitor switches
# need the Prometheus Operator's CRDs, which kind does not have.
declare -A VARIANTS=(
  [defaults]=""
  [privileged]="--set securityContext.privileged=true"
  [kubelet-root-dir]="--set kubeletRootDir=/var/lib/k0s/kubelet"
  [networkpolicy]="--set networkPolicy.enabled=true"
  [digest]="--set image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000"
  [image-with-tools]="--set image.repository=registry.example.com/genericdp-tools --set image.tag=e2e"
)
for name in defaults privileged kubelet-root-dir networkpolicy digest image-with-tools; do
  read -ra args <<<"${VARIANTS[$name]}"
  manifest=$ARTIFACTS/helm-$name.yaml
  mkdir -p "$ARTIFACTS"
  helm template "$RELEASE" "$CHART" --namespace "$NAMESPACE" "${args[@]}" >"$manifest" ||
    fail "helm template of the $name variant failed"
  k -n "$NAMESPACE" apply --dry-run=server -f "$manifest" >/dev/null ||
    fail "the API server refused the Helm $name variant ($manifest)"
  log "ok: the API server accepts the Helm $name variant"
done
