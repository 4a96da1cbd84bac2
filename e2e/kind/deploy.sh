#!/usr/bin/env bash
# Load the image into the kind node, then prepare the node and deploy the e2e
# overlay (e2e/deploy.sh, shared with the local node).
#   e2e/kind/deploy.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker kind kubectl

log "loading $IMAGE into $CLUSTER"
kind load docker-image "$IMAGE" --name "$CLUSTER"
"$E2E_ROOT/deploy.sh" kind
