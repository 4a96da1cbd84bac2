# shellcheck shell=bash
# Shared by images.sh and smoke-image.sh: the image names, logging and
# timings, and a private container store for buildah and podman.
# Sourced, never run: the caller sets `set -euo pipefail`.
#
# The store is the scripts' own (its own graph root, run root, configuration
# and network directory), made empty at the start and removed at the end, so
# a run depends on nothing a previous or failed run left, leaves no image or
# container behind, and never touches the machine's /var/lib/containers,
# /etc/containers or the CNI configuration the local node's containerd reads.

IMAGES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034 # used by the scripts that source this file
REPO_ROOT=$(cd "$IMAGES_DIR/../.." && pwd)
# The names containerd gives the imported archives (io.containerd.image.name).
PAUSE_IMAGE=${PAUSE_IMAGE:-localhost/pause:e2e}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-localhost/busybox:e2e}
GENERICDP_IMAGE=${GENERICDP_IMAGE:-localhost/genericdp:e2e}
# archive file in OUTDIR -> image name
# shellcheck disable=SC2034 # used by the scripts that source this file
declare -A ARCHIVES=(
  [pause.tar]=$PAUSE_IMAGE
  [busybox.tar]=$BUSYBOX_IMAGE
  [genericdp.tar]=$GENERICDP_IMAGE
)
# Where the stores live; everything under them is the scripts' own.
IMAGES_STATE=${IMAGES_STATE:-/var/tmp/genericdp-e2e-images}
IMAGES_RUN=${IMAGES_RUN:-/run/genericdp-e2e-images}
# overlay works on these machines (ext4, kernel overlayfs); vfs works anywhere.
STORAGE_DRIVER=${STORAGE_DRIVER:-overlay}

log() {
  printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

now() {
  date +%s.%N
}

seconds_since() {
  awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'
}

# timing NAME SECONDS: one measurement, in e2e/kind/lib.sh's format; also
# appended to $TIMINGS when the caller collects them.
timing() {
  local line
  line=$(printf 'TIMING  %-62s %8s s' "$1" "$2")
  printf '%s\n' "$line" >&2
  if [[ -n ${TIMINGS:-} ]]; then
    mkdir -p "$(dirname "$TIMINGS")"
    printf '%s\n' "$line" >>"$TIMINGS"
  fi
}

require_root_and() {
  ((EUID == 0)) || die "run as root (buildah and podman here use root's storage drivers)"
  local tool missing=()
  for tool in "$@"; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  ((${#missing[@]} == 0)) ||
    die "not found: ${missing[*]} (install them: e2e/local/install-deps.sh)"
}

# lock_images: one images.sh or smoke-image.sh at a time on this machine (the
# store and cache paths are shared); waits up to $IMAGES_LOCK_WAIT seconds.
# images.sh holds it for the smoke test it starts (IMAGES_LOCKED=1).
lock_images() {
  [[ ${IMAGES_LOCKED:-} != 1 ]] || return 0
  mkdir -p "$IMAGES_RUN"
  exec 9>"$IMAGES_RUN/lock"
  if ! flock -n 9; then
    log "waiting for another images.sh or smoke-image.sh (lock $IMAGES_RUN/lock)"
    flock -w "${IMAGES_LOCK_WAIT:-1800}" 9 ||
      die "still locked after ${IMAGES_LOCK_WAIT:-1800}s: $IMAGES_RUN/lock"
  fi
  export IMAGES_LOCKED=1
}

# ulimit_pair LETTER [CAP] -> "soft:hard" of this shell's limit, at most CAP.
ulimit_pair() {
  local soft hard cap=${2:-}
  soft=$(ulimit -S"$1")
  hard=$(ulimit -H"$1")
  if [[ -n $cap ]]; then
    [[ $soft != unlimited ]] && ((soft <= cap)) || soft=$cap
    [[ $hard != unlimited ]] && ((hard <= cap)) || hard=$cap
  fi
  printf '%s:%s' "${soft/unlimited/-1}" "${hard/unlimited/-1}"
}

# store_up NAME: an empty private store; buildah and podman use it from here on.
store_up() {
  STORE_NAME=$1
  STORE_DIR=$IMAGES_STATE/$STORE_NAME
  STORE_RUN=$IMAGES_RUN/$STORE_NAME
  store_down
  mkdir -p "$STORE_DIR/graph" "$STORE_DIR/networks" "$STORE_RUN"
  cat >"$STORE_DIR/storage.conf" <<EOF
[storage]
driver = "$STORAGE_DRIVER"
graphroot = "$STORE_DIR/graph"
runroot = "$STORE_RUN/storage"
EOF
  # Containers keep this shell's limits on open files and processes. Podman
  # would ask runc for 1048576 files and 4194304 processes, and lowers its
  # own process limit to 32768 when it starts: where root lacks
  # CAP_SYS_RESOURCE (as in some sandboxes), runc may not raise either.
  cat >"$STORE_DIR/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(ulimit_pair n)", "nproc=$(ulimit_pair u 32768)"]
# No container gets a network: podman's default bridge would add an address
# to a host interface, iptables rules and ip_forward.
netns = "none"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "none"
tmp_dir = "$STORE_RUN/libpod"
volume_path = "$STORE_DIR/volumes"

[network]
network_config_dir = "$STORE_DIR/networks"
EOF
  # Images are named in full (localhost/...): nothing is looked up anywhere.
  printf 'unqualified-search-registries = []\n' >"$STORE_DIR/registries.conf"
  export CONTAINERS_STORAGE_CONF=$STORE_DIR/storage.conf
  export CONTAINERS_CONF=$STORE_DIR/containers.conf
  export CONTAINERS_REGISTRIES_CONF=$STORE_DIR/registries.conf
  export TMPDIR=$STORE_DIR/tmp
  mkdir -p "$TMPDIR"
}

# store_down: stop and remove whatever the store holds (a failed run's
# containers and mounts included), then the store itself. Safe to repeat.
store_down() {
  [[ -n ${STORE_DIR:-} ]] || return 0
  if [[ -f $STORE_DIR/storage.conf ]]; then
    CONTAINERS_STORAGE_CONF=$STORE_DIR/storage.conf CONTAINERS_CONF=$STORE_DIR/containers.conf \
      podman rm --all --force --time 0 >/dev/null 2>&1 || true
    CONTAINERS_STORAGE_CONF=$STORE_DIR/storage.conf CONTAINERS_CONF=$STORE_DIR/containers.conf \
      buildah rm --all >/dev/null 2>&1 || true
  fi
  local dir mnt
  for dir in "$STORE_DIR" "$STORE_RUN"; do
    # Deepest first; anything the tools left mounted below the store.
    while read -r mnt; do
      umount -l "$mnt" 2>/dev/null || true
    done < <(findmnt -rn -o TARGET | awk -v d="$dir/" 'index($0 "/", d) == 1' | sort -r)
    rm -rf "$dir"
  done
}
