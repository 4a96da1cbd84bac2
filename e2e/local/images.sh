#!/usr/bin/env bash
# Build the images the local-node e2e imports into containerd, as OCI archives
# named by their io.containerd.image.name annotation, then smoke-test them:
#   OUTDIR/pause.tar      localhost/pause:e2e       containerd's sandbox_image
#   OUTDIR/busybox.tar    localhost/busybox:e2e     consumer pods
#   OUTDIR/genericdp.tar  localhost/genericdp:e2e   the DaemonSet, from ./Containerfile
# Import:  for f in OUTDIR/*.tar; do ctr -n k8s.io images import "$f"; done
#
#   e2e/local/images.sh OUTDIR
#
# Root; needs what e2e/local/install-deps.sh installs. No registry is used:
# the pause program is compiled here, busybox comes from Debian's
# busybox-static, and the genericdp image's base (a stand-in for
# python:3.11-slim: debian:bookworm-slim's packages + Debian's python3 and
# what the official image adds) is made with mmdebstrap, cached in
# $IMAGES_CACHE keyed by everything that makes it.
# Environment:
#   IMAGES_CACHE=/var/cache/genericdp-e2e   the base tarball (delete to refresh)
#   DEBIAN_MIRROR=http://deb.debian.org/debian
#   DEBIAN_SECURITY_MIRROR=http://deb.debian.org/debian-security
#   STORAGE_DRIVER=overlay                  or vfs (buildah/podman storage)
#   SKIP_SMOKE=1                            do not run smoke-image.sh afterwards
#   EXAMPLE_IMAGES=0                        do not build deploy/examples/image-with-tools
#   TIMINGS=FILE                            also append the TIMING lines there
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=images-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/images-lib.sh"

(($# == 1)) || die "usage: $0 OUTDIR"
require_root_and gcc strip buildah podman mmdebstrap python3 flock findmnt dpkg
OUTDIR=$(mkdir -p "$1" && cd "$1" && pwd)
IMAGES_CACHE=${IMAGES_CACHE:-/var/cache/genericdp-e2e}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
BASE_IMAGE=localhost/genericdp-e2e-base:bookworm

lock_images
store_up build
WORK=$STORE_DIR/work
mkdir -p "$WORK"
trap store_down EXIT

# No archive of an earlier run may pass for one of this run.
for archive in "${!ARCHIVES[@]}"; do
  rm -f "$OUTDIR/$archive"
done

# export IMAGE ARCHIVE: write the OCI archive, named for containerd, atomically.
export_archive() {
  local image=$1 archive=$OUTDIR/$2 partial=$OUTDIR/.$2.partial
  rm -f "$partial"
  buildah push --quiet "$image" "oci-archive:$partial:$image" >/dev/null
  python3 "$IMAGES_DIR/imagetool.py" name "$partial" "$image"
  mv -f "$partial" "$archive"
  log "$archive: $image, $(podman image inspect --format '{{.Size}}' "$image" |
    awk '{ printf "%.1f MB", $1 / 1e6 }') uncompressed"
}

# single_layer_image NAME ROOTFS BUILDAH-CONFIG-ARGS...: ROOTFS as one layer.
single_layer_image() {
  local image=$1 rootfs=$2 ctr
  shift 2
  ctr=$(buildah from --quiet scratch)
  buildah copy --quiet "$ctr" "$rootfs" / >/dev/null
  buildah config --os linux --arch "$(dpkg --print-architecture)" \
    --label org.opencontainers.image.source=https://github.com/genericdp/genericdp \
    --created-by "e2e/local/images.sh" "$@" "$ctr"
  buildah commit --quiet --rm "$ctr" "$image" >/dev/null
}

build_pause() {
  local started rootfs=$WORK/pause-root
  started=$(now)
  mkdir -p "$rootfs"
  gcc -static -Os -Wall -Wextra -Werror -o "$rootfs/pause" "$IMAGES_DIR/pause/pause.c"
  strip "$rootfs/pause"
  "$rootfs/pause" -v >/dev/null
  # As kubernetes' own pause image: no shell, unprivileged user.
  single_layer_image "$PAUSE_IMAGE" "$rootfs" \
    --entrypoint '["/pause"]' --cmd '' --user 65535:65535 --stop-signal SIGTERM
  export_archive "$PAUSE_IMAGE" pause.tar
  timing "image-build $PAUSE_IMAGE" "$(seconds_since "$started")"
}

build_busybox() {
  local started rootfs=$WORK/busybox-root busybox applet
  started=$(now)
  # busybox-static's binary, whatever else provides a `busybox` on PATH.
  busybox=$(dpkg -L busybox-static | grep -m1 -E '/bin/busybox$') ||
    die "busybox-static is not installed"
  mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,var/tmp}
  chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
  cp "$busybox" "$rootfs/bin/busybox"
  # Every applet as a symlink where busybox itself would install it.
  while read -r applet; do
    [[ $applet == bin/busybox ]] || ln -sfn /bin/busybox "$rootfs/$applet"
  done < <("$rootfs/bin/busybox" --list-full)
  # What the e2e checks run in consumer pods.
  for applet in sh sleep ls stat cat env dd head grep test; do
    [[ -L $rootfs/bin/$applet || -L $rootfs/usr/bin/$applet ]] ||
      die "busybox-static ($busybox) has no $applet applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
    >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
  single_layer_image "$BUSYBOX_IMAGE" "$rootfs" \
    --cmd '["sh"]' --env PATH=/usr/sbin:/usr/bin:/sbin:/bin
  export_archive "$BUSYBOX_IMAGE" busybox.tar
  timing "image-build $BUSYBOX_IMAGE" "$(seconds_since "$started")"
}

# The mmdebstrap base tarball: made once per distinct input, then reused.
base_tarball() {
  local args key tarball partial
  # A stand-in for python:3.11-slim, package for package (docs/contributing/performance.md,
  # "The image", says where it differs: Debian's Python 3.11.2 in /usr instead
  # of python.org's 3.11.x built in /usr/local):
  # - debian:bookworm-slim: Priority:required + apt (debuerreotype's minbase),
  #   /usr merged by the hook as debuerreotype does (no usrmerge, hence no Perl
  #   beyond perl-base), no manuals, translations or documentation;
  # - what python:3.11-slim's Dockerfile adds: ca-certificates, netbase,
  #   tzdata, the libraries its interpreter links (Debian's python3 depends
  #   on them; libgdbm6 it has besides), pip, setuptools and wheel installed,
  #   the venv module, and no bytecode (it deletes every .pyc).
  # --include takes a comma-separated list; the hook's $1 is mmdebstrap's (the root)
  # shellcheck disable=SC2054,SC2016
  args=(
    --variant=minbase --format=tar
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --include=ca-certificates,netbase,tzdata,python3,python3-venv,python3-pip,libgdbm6
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/groff/*'
    --dpkgopt='path-exclude=/usr/share/linda/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    --customize-hook='find "$1/usr/lib/python3" "$1/usr/lib/python3.11" -depth -name __pycache__ -exec rm -rf {} +'
    bookworm
  )
  local mirrors=(
    "deb $DEBIAN_MIRROR bookworm main"
    "deb $DEBIAN_MIRROR bookworm-updates main"
    "deb $DEBIAN_SECURITY_MIRROR bookworm-security main"
  )
  key=$({
    mmdebstrap --version
    dpkg --print-architecture
    printf '%s\n' "${args[@]}" "${mirrors[@]}"
  } | sha256sum | cut -c1-16)
  tarball=$IMAGES_CACHE/base-$key.tar
  if [[ -s $tarball ]]; then
    log "base: cached $tarball"
  else
    mkdir -p "$IMAGES_CACHE"
    partial=$IMAGES_CACHE/.base-$key.tar.partial
    log "base: mmdebstrap Debian 12 slim + python3 (about two minutes)"
    if ! mmdebstrap --quiet "${args[@]}" "$partial" "${mirrors[@]}" >"$WORK/mmdebstrap.log" 2>&1; then
      cat "$WORK/mmdebstrap.log" >&2
      rm -f "$partial"
      die "mmdebstrap failed"
    fi
    # Only the current base is kept.
    find "$IMAGES_CACHE" -maxdepth 1 -name 'base-*.tar' -delete
    mv -f "$partial" "$tarball"
  fi
  printf '%s\n' "$tarball"
}

build_base() {
  local started tarball
  started=$(now)
  tarball=$(base_tarball)
  # The environment python:3.11-slim sets that the Containerfile relies on
  # (its final ENV extends PATH).
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$tarball" "$BASE_IMAGE" >/dev/null
  log "base: $BASE_IMAGE, $(podman image inspect --format '{{.Size}}' "$BASE_IMAGE" |
    awk '{ printf "%.1f MB", $1 / 1e6 }') uncompressed"
  timing "image-build $BASE_IMAGE" "$(seconds_since "$started")"
}

build_genericdp() {
  local started revision version pipconf path mounts=()
  started=$(now)
  revision=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  # The checked-in release version (the package takes its own from git tags;
  # tools/versions.py keeps the checked-in copies equal).
  version=$(cd "$REPO_ROOT" && python3 -m tools.versions resolve --ref HEAD)
  # pip in the build sees this machine's index configuration and CA bundle:
  # one merged pip.conf (files + PIP_* environment) and the host paths it
  # names, bind-mounted read-only into the RUN steps only. Nothing of it is
  # in any layer, and the final stage has no RUN step at all.
  pipconf=$WORK/pip.conf
  mounts+=(--volume "$pipconf:/etc/pip.conf:ro")
  while read -r path; do
    mounts+=(--volume "$path:$path:ro")
  done < <(python3 "$IMAGES_DIR/imagetool.py" pip-config "$pipconf")
  log "building $GENERICDP_IMAGE from $REPO_ROOT/Containerfile ($version, $revision)"
  buildah build --pull=never --layers=false --network host \
    "${mounts[@]}" \
    --build-arg PYTHON_IMAGE="$BASE_IMAGE" \
    --build-arg VERSION="$version" \
    --build-arg REVISION="$revision" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    -f "$REPO_ROOT/Containerfile" -t "$GENERICDP_IMAGE" "$REPO_ROOT" >"$WORK/build.log" 2>&1 || {
    cat "$WORK/build.log" >&2
    die "buildah build failed"
  }
  export_archive "$GENERICDP_IMAGE" genericdp.tar
  timing "image-build $GENERICDP_IMAGE" "$(seconds_since "$started")"
}

# The documented way to add the tools hooks run (docs/deploy.md, "Extending
# the image"): deploy/examples/image-with-tools FROM the image just built, with
# apt-get over the host's network as the Containerfile's own RUN steps do; then
# its tool and genericdp itself run in it as the DaemonSet runs the container
# (read-only root, no capabilities, no network). Not exported: the node does
# not run it. EXAMPLE_IMAGES=0 skips it.
build_example_tools() {
  local started lsusb image=localhost/genericdp-tools:e2e
  local example=$REPO_ROOT/deploy/examples/image-with-tools
  started=$(now)
  log "building $image from $example (FROM $GENERICDP_IMAGE)"
  buildah build --pull=never --layers=false --network host \
    --build-arg GENERICDP_IMAGE="$GENERICDP_IMAGE" \
    -f "$example/Containerfile" -t "$image" "$example" >"$WORK/build-tools.log" 2>&1 || {
    cat "$WORK/build-tools.log" >&2
    die "buildah build of $example failed"
  }
  local confined=(podman run --rm --read-only --cap-drop=ALL
    --security-opt no-new-privileges --network none)
  "${confined[@]}" --entrypoint lsusb "$image" --version >"$WORK/tools.out" 2>&1 || {
    cat "$WORK/tools.out" >&2
    die "$image: lsusb --version failed"
  }
  grep -q '^lsusb' "$WORK/tools.out" || die "$image: lsusb said: $(cat "$WORK/tools.out")"
  lsusb=$(head -n1 "$WORK/tools.out")
  "${confined[@]}" "$image" --version >"$WORK/tools.out" 2>&1 ||
    die "$image: genericdp --version failed: $(cat "$WORK/tools.out")"
  log "ok: $image runs $lsusb and $(head -n1 "$WORK/tools.out")"
  timing "image-build $image (example FROM genericdp) + run" "$(seconds_since "$started")"
}

build_pause
build_busybox
build_base
build_genericdp
if [[ ${EXAMPLE_IMAGES:-1} != 0 ]]; then
  build_example_tools
fi
store_down
trap - EXIT

if [[ ${SKIP_SMOKE:-} != 1 ]]; then
  "$IMAGES_DIR/smoke-image.sh" "$OUTDIR"
fi
log "images in $OUTDIR: $(cd "$OUTDIR" && echo "${!ARCHIVES[@]}" | tr ' ' '\n' | sort | xargs)"
