#!/usr/bin/env bash
# Smoke-test the archives e2e/local/images.sh wrote, as they are: each is
# loaded into a private podman store and run.
#   e2e/local/smoke-image.sh OUTDIR
# - every archive names exactly its image (io.containerd.image.name);
# - pause: one layer, `-v`, and a SIGTERM stops it at once with status 0;
# - busybox: one layer, and the applets the e2e checks use are on PATH;
# - genericdp: `--version`; `validate` of every file in configs/examples/;
#   then, as the DaemonSet runs it (read-only root, every capability dropped,
#   no privilege escalation, no network): `simulate --once` of the demo, and
#   `serve` until its device-plugin sockets appear in a bind-mounted plugin
#   directory, then SIGTERM, a clean shutdown and status 0;
#   no pip configuration, index or CA bundle of the build machine left in it.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=images-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/images-lib.sh"

(($# == 1)) || die "usage: $0 OUTDIR"
require_root_and podman python3 flock findmnt
OUTDIR=$(cd "$1" && pwd)
EXAMPLES=$REPO_ROOT/configs/examples
DEADLINE=${SMOKE_DEADLINE:-60} # seconds for anything to happen

lock_images
store_up smoke
trap store_down EXIT

check() {
  log "ok: $*"
}

# run ARGS...: podman run --rm, as the DaemonSet runs the container.
confined() {
  podman run --rm --read-only --read-only-tmpfs=false --tmpfs /tmp:size=64m \
    --cap-drop=ALL --security-opt no-new-privileges --network none "$@"
}

# wait_until WHAT COMMAND...: poll COMMAND (every 0.1 s) until it succeeds or
# $DEADLINE seconds pass.
wait_until() {
  local what=$1 started
  shift
  started=$(now)
  until "$@" >/dev/null 2>&1; do
    if awk -v s="$(seconds_since "$started")" -v d="$DEADLINE" 'BEGIN { exit !(s > d) }'; then
      die "timed out after ${DEADLINE}s waiting for: $what"
    fi
    sleep 0.1
  done
}

exited() {
  [[ $(podman inspect --format '{{.State.Status}}' "$1") == exited ]]
}

started=$(now)
for archive in "${!ARCHIVES[@]}"; do
  image=${ARCHIVES[$archive]}
  [[ -s $OUTDIR/$archive ]] || die "$OUTDIR/$archive: missing"
  names=$(python3 "$IMAGES_DIR/imagetool.py" names "$OUTDIR/$archive")
  [[ $names == "$image" ]] || die "$OUTDIR/$archive names '${names//$'\n'/ }', not $image"
  podman load --quiet --input "$OUTDIR/$archive" >/dev/null
  podman image exists "$image" || die "$OUTDIR/$archive did not load as $image"
done
check "each archive names its image: ${ARCHIVES[*]}"

layers() {
  podman image inspect --format '{{len .RootFS.Layers}}' "$1"
}

# -- pause ---------------------------------------------------------------------------------
(($(layers "$PAUSE_IMAGE") == 1)) || die "$PAUSE_IMAGE has $(layers "$PAUSE_IMAGE") layers"
podman run --rm "$PAUSE_IMAGE" -v | grep -q '^pause ' || die "$PAUSE_IMAGE -v"
podman run --detach --name smoke-pause "$PAUSE_IMAGE" >/dev/null
wait_until "pause running" test "$(podman inspect --format '{{.State.Status}}' smoke-pause)" = running
# A stop timeout far above the deadline: only the SIGTERM handler can make it.
stop_started=$(now)
podman stop --time 600 smoke-pause >/dev/null &
wait_until "pause exits on SIGTERM" exited smoke-pause
wait
status=$(podman inspect --format '{{.State.ExitCode}}' smoke-pause)
((status == 0)) || die "$PAUSE_IMAGE exited $status on SIGTERM"
check "$PAUSE_IMAGE: one layer, exits 0 on SIGTERM in $(seconds_since "$stop_started") s"
podman rm smoke-pause >/dev/null

# -- busybox -------------------------------------------------------------------------------
(($(layers "$BUSYBOX_IMAGE") == 1)) || die "$BUSYBOX_IMAGE has $(layers "$BUSYBOX_IMAGE") layers"
# `which` finds files on PATH only (not shell builtins): each applet is a link.
podman run --rm "$BUSYBOX_IMAGE" which sleep ls stat cat sh env dd head grep >/dev/null ||
  die "$BUSYBOX_IMAGE lacks an applet the e2e uses"
out=$(podman run --rm "$BUSYBOX_IMAGE" sh -c \
  'head -c 4096 /dev/zero | dd of=/dev/null bs=1024 2>&1; stat -c %t,%T /dev/null; env | grep -c ^PATH=; ls / >/dev/null; cat /etc/passwd >/dev/null; sleep 0')
[[ $out == *"4+0 records out"*"1,3"*1 ]] || die "$BUSYBOX_IMAGE applets misbehave: $out"
check "$BUSYBOX_IMAGE: one layer, sleep ls stat cat sh env dd head grep work"

# -- genericdp -----------------------------------------------------------------------------
version=$(podman run --rm "$GENERICDP_IMAGE" --version)
[[ $version == "genericdp "* ]] || die "$GENERICDP_IMAGE --version printed: $version"
check "$GENERICDP_IMAGE --version: $version"

examples=()
for file in "$EXAMPLES"/*; do
  examples+=("/examples/${file##*/}")
done
((${#examples[@]} > 0)) || die "no examples in $EXAMPLES"
# One `validate` per file (together they would be one config set, where two
# examples define the same resource), all in one container.
# shellcheck disable=SC2016 # expanded by the container's shell
confined --volume "$EXAMPLES:/examples:ro" --entrypoint /bin/sh "$GENERICDP_IMAGE" -c \
  'status=0; for f; do genericdp validate "$f" >/dev/null || status=1; done; exit $status' \
  sh "${examples[@]}" || die "$GENERICDP_IMAGE validate failed on configs/examples/ (above)"
check "$GENERICDP_IMAGE validate: all ${#examples[@]} files of configs/examples/"

confined --volume "$EXAMPLES:/examples:ro" "$GENERICDP_IMAGE" \
  simulate /examples/demo.yaml --once >"$STORE_DIR/simulate.log" 2>&1 || {
  cat "$STORE_DIR/simulate.log" >&2
  die "$GENERICDP_IMAGE simulate --once of the demo failed (read-only root, no capabilities)"
}
check "$GENERICDP_IMAGE simulate --once: read-only root, no capabilities, no network"

# serve, as the DaemonSet does (its mounts at their paths), minus the host's
# /dev and /sys: the demo's /dev/null and /dev/zero exist in every container.
plugins=$STORE_DIR/device-plugins
mkdir -p "$plugins" "$STORE_DIR/pod-resources" "$STORE_DIR/config"
cp "$EXAMPLES/demo.yaml" "$STORE_DIR/config/"
serve_started=$(now)
podman run --detach --name smoke-serve \
  --read-only --read-only-tmpfs=false --tmpfs /tmp:size=64m \
  --cap-drop=ALL --security-opt no-new-privileges --network none \
  --volume "$STORE_DIR/config:/etc/genericdp:ro" \
  --volume "$plugins:/var/lib/kubelet/device-plugins" \
  --volume "$STORE_DIR/pod-resources:/var/lib/kubelet/pod-resources:ro" \
  "$GENERICDP_IMAGE" >/dev/null
sockets() {
  # The demo's two resources that exist in any container: example.com/null and zero.
  (($(find "$plugins" -maxdepth 1 -type s | wc -l) >= 2))
}
serving() {
  sockets && podman logs smoke-serve 2>&1 | grep -q 'serving on'
}
if ! (wait_until "genericdp serve: its plugin sockets in the bind-mounted directory" serving); then
  podman logs smoke-serve >&2 || true
  die "$GENERICDP_IMAGE serve did not start"
fi
timing "image-smoke genericdp serve: sockets up" "$(seconds_since "$serve_started")"
# The root is read-only even for root without capabilities.
if podman exec smoke-serve sh -c 'echo x >/opt/genericdp/x' 2>/dev/null; then
  die "$GENERICDP_IMAGE: the root filesystem is writable under --read-only"
fi
podman stop --time 600 smoke-serve >/dev/null &
wait_until "genericdp exits on SIGTERM" exited smoke-serve
wait
status=$(podman inspect --format '{{.State.ExitCode}}' smoke-serve)
logs=$(podman logs smoke-serve 2>&1)
if ((status != 0)) || [[ $logs != *"shut down cleanly"* ]]; then
  printf '%s\n' "$logs" >&2
  die "$GENERICDP_IMAGE serve: status $status on SIGTERM, or no clean shutdown (log above)"
fi
podman rm smoke-serve >/dev/null
check "$GENERICDP_IMAGE serve: sockets in the plugin directory, read-only root, clean SIGTERM shutdown"

# Nothing of the build machine's pip setup is in the image.
leftovers=$(podman run --rm --entrypoint /bin/sh "$GENERICDP_IMAGE" -c \
  'for p in /etc/pip.conf /etc/xdg/pip /opt/wheels /opt/pypi /root/.config/pip /opt/genericdp/bin/pip; do
     if [ -e "$p" ]; then echo "$p"; fi
   done')
[[ -z $leftovers ]] || die "$GENERICDP_IMAGE contains: $leftovers"
check "$GENERICDP_IMAGE: no pip, pip configuration or local index in the image"

for image in "$PAUSE_IMAGE" "$BUSYBOX_IMAGE" "$GENERICDP_IMAGE"; do
  log "size: $image $(podman image inspect --format '{{.Size}}' "$image" |
    awk '{ printf "%.1f MB", $1 / 1e6 }') uncompressed, $(layers "$image") layer(s)"
done
timing "image-smoke all" "$(seconds_since "$started")"
