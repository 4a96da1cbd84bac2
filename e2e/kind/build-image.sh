#!/usr/bin/env bash
# Build the image from the Containerfile with buildx into the local docker
# image store (for `kind load`). IMAGE names it (default genericdp:e2e).
#   e2e/kind/build-image.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
require docker

revision=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
log "building $IMAGE from $REPO_ROOT/Containerfile ($revision)"
started=$(now)
docker buildx build --load -f "$REPO_ROOT/Containerfile" -t "$IMAGE" \
  --build-arg REVISION="$revision" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "$REPO_ROOT"
timing "image built" "$(seconds_between "$started" "$(now)")"
# The image must run the CLI before it is worth loading anywhere.
docker run --rm "$IMAGE" --version
docker image inspect "$IMAGE" --format '{{ json .Config.Labels }}'
