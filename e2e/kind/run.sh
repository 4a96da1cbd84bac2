#!/usr/bin/env bash
# The whole e2e for one Kubernetes version: build the image, create the kind
# cluster, load and deploy, run the checks, print the timings, clean up.
#   e2e/kind/run.sh [MINOR | NODE_IMAGE]        default 1.36 (e2e/kind/node-images.txt)
# Environment:
#   CLUSTER=genericdp-e2e   IMAGE=genericdp:e2e   ARTIFACTS=/tmp/genericdp-e2e-artifacts
#   IMAGE_ARCHIVE=$ARTIFACTS/genericdp-image.tar   the image as an OCI archive
#   SKIP_BUILD=1    use the existing $IMAGE_ARCHIVE (CI: built once for every version)
#   KEEP_CLUSTER=1  leave the cluster running afterwards (e.g. to rerun checks.sh)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker kind kubectl

version=${1:-1.36}
export CLUSTER NODE NAMESPACE IMAGE IMAGE_ARCHIVE ARTIFACTS TIMINGS
mkdir -p "$ARTIFACTS"
rm -f "$TIMINGS"

finish() {
  local status=$?
  if ((status != 0)) && kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "exporting the cluster's logs to $ARTIFACTS/kind-logs"
    kind export logs "$ARTIFACTS/kind-logs" --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  if [[ ${KEEP_CLUSTER:-} == 1 ]]; then
    log "keeping cluster $CLUSTER (kind delete cluster --name $CLUSTER)"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  if [[ -s $TIMINGS ]]; then
    summary "$version" "$status"
  fi
  exit "$status"
}
trap finish EXIT

summary() {
  local result=passed
  (($2 == 0)) || result=FAILED
  echo
  echo "e2e $result on Kubernetes $1; timings:"
  sed 's/^TIMING  /  /' "$TIMINGS"
  if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
    {
      echo "### genericdp e2e on Kubernetes $1: $result"
      echo
      echo "| measurement | seconds |"
      echo "| --- | ---: |"
      sed -E 's/^TIMING +(.*[^ ]) +([0-9.]+) s$/| \1 | \2 |/' "$TIMINGS"
    } >>"$GITHUB_STEP_SUMMARY"
  fi
}

if [[ ${SKIP_BUILD:-} != 1 ]]; then
  "$E2E_DIR/build-image.sh"
fi
"$E2E_DIR/create-cluster.sh" "$version"
"$E2E_DIR/deploy.sh"
"$E2E_ROOT/checks.sh" kind
