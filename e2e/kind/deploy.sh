#!/usr/bin/env bash
# Load the image's OCI archive into the kind node (`kind load image-archive`:
# `kind load docker-image` may fail where Docker keeps images in containerd's
# store), then prepare the node and deploy the e2e
# overlay (e2e/deploy.sh, shared with the local node).
#   e2e/kind/deploy.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker kind kubectl

[[ -s $IMAGE_ARCHIVE ]] ||
  fail "no image archive $IMAGE_ARCHIVE (e2e/kind/build-image.sh writes it)"
log "loading $IMAGE_ARCHIVE ($IMAGE) into $CLUSTER"
kind load image-archive "$IMAGE_ARCHIVE" --name "$CLUSTER"
"$E2E_ROOT/deploy.sh" kind
