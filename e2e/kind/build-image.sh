#!/usr/bin/env bash
# Build the image from the Containerfile with buildx into an OCI archive that
# `kind load image-archive` imports (e2e/kind/deploy.sh): no docker image
# store in between, so it works whether Docker keeps images itself or in
# containerd's store. IMAGE names it (default genericdp:e2e), IMAGE_ARCHIVE is
# the file (default $ARTIFACTS/genericdp-image.tar). The OCI exporter needs a
# builder that has it: the docker-container driver
# (`docker buildx create --use`; CI: docker/setup-buildx-action) or Docker
# with the containerd image store.
#   e2e/kind/build-image.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker

revision=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
log "building $IMAGE from $REPO_ROOT/Containerfile ($revision) into $IMAGE_ARCHIVE"
mkdir -p "$(dirname "$IMAGE_ARCHIVE")"
started=$(now)
# The full reference: containerd names the imported image from the archive's
# io.containerd.image.name, and the kubelet asks for docker.io/library/NAME
# when a pod says NAME.
docker buildx build -f "$REPO_ROOT/Containerfile" \
  --output "type=oci,dest=$IMAGE_ARCHIVE.partial,name=$(full_reference "$IMAGE")" \
  --build-arg REVISION="$revision" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$REPO_ROOT"
mv -f "$IMAGE_ARCHIVE.partial" "$IMAGE_ARCHIVE"
timing "image built (OCI archive)" "$(seconds_between "$started" "$(now)")"
ls -l "$IMAGE_ARCHIVE"
