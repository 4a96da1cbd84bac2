#!/usr/bin/env bash
# The whole local-node e2e: install the Debian packages, unpack the Kubernetes
# binaries, build the images, then ROUNDS times: bring the node up, deploy
# the DaemonSet, run the checks, tear the node down (also on failure) and
# check that nothing was left behind. Prints the timings. Root.
#   e2e/local/run.sh
# Environment:
#   ROUNDS=1                 rounds of up -> deploy -> checks -> down (.ci/run: 2;
#                            0: none, e.g. ROUNDS=0 CDI=0 for the DRA round alone)
#   KUBE_BIN_DIR=DIR         use these binaries (default: unpacked from KUBE_XZ_DIR)
#   KUBE_XZ_DIR=DIR          default ../shared/k8s next to the checkout
#   IMAGES_DIR=DIR           use these OCI archives instead of building them
#   SKIP_DEPS=1              do not run install-deps.sh
#   ARTIFACTS=/tmp/genericdp-e2e-artifacts   logs, diagnostics, timings
#   CHECKS="capacity ..."    these checks (e2e/checks.sh, ALL_CHECKS) instead of
#                            LOCAL_CHECKS, what the kind e2e does not show
#   CDI=0                    skip the CDI round (cdi.sh, Debian 13's containerd 1.7)
#   DRA=0                    skip the DRA round (dra.sh: the DRA backend, containerd 1.7)
#   DRA_CHECKS="dra_slices ..."  only these checks of the DRA round (dra.sh, ALL_DRA_CHECKS)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"
[[ $(id -u) == 0 ]] || {
  echo "error: the local-node e2e needs root (the unit suite does not: ./dev test)" >&2
  exit 2
}

# One local node a machine: a second run waits for the first to finish, as
# both use /var/lib/kubelet, the node's network namespace and its cgroups.
exec {node_lock}>/run/lock/genericdp-e2e.lock
if ! flock -n "$node_lock"; then
  log "another local-node e2e is running; waiting for it to finish"
  flock "$node_lock"
fi

ROUNDS=${ROUNDS:-1}
mkdir -p "$ARTIFACTS"
rm -f "$TIMINGS"
export ARTIFACTS TIMINGS

summary() {
  local result=passed
  (($1 == 0)) || result=FAILED
  echo
  echo "local-node e2e $result; timings:"
  sed 's/^TIMING  /  /' "$TIMINGS"
  if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
    {
      echo "### genericdp e2e on the local node: $result"
      echo
      echo "| measurement | seconds |"
      echo "| --- | ---: |"
      sed -E 's/^TIMING +(.*[^ ]) +([0-9.]+) s$/| \1 | \2 |/' "$TIMINGS"
    } >>"$GITHUB_STEP_SUMMARY"
  fi
}

finish() {
  local status=$?
  trap - EXIT
  if [[ -d $NODE_STATE ]]; then
    log "tearing the node down (down.sh)"
    "$LOCAL_DIR/down.sh" || status=1
    if [[ -f $ARTIFACTS/before.txt ]]; then
      "$LOCAL_DIR/leftovers.sh" check "$ARTIFACTS/before.txt" || status=1
    fi
  fi
  if [[ -s $TIMINGS ]]; then
    summary "$status"
  fi
  exit "$status"
}
trap finish EXIT

started=$(now)
if [[ ${SKIP_DEPS:-} != 1 ]]; then
  log "Debian packages (e2e/local/install-deps.sh)"
  "$LOCAL_DIR/install-deps.sh" iproute2 util-linux xz-utils curl
fi
if [[ -z $KUBE_BIN_DIR ]]; then
  KUBE_BIN_DIR=$ARTIFACTS/kube-bin
  log "Kubernetes binaries into $KUBE_BIN_DIR (checked against pinned sums)"
  "$LOCAL_DIR/kube-binaries.sh" unpack "$KUBE_BIN_DIR" ${KUBE_XZ_DIR:+"$KUBE_XZ_DIR"}
fi
export KUBE_BIN_DIR
if [[ -z ${IMAGES_DIR:-} ]]; then
  IMAGES_DIR=$ARTIFACTS/images
  log "images (e2e/local/images.sh $IMAGES_DIR)"
  images_started=$(now)
  TIMINGS=$TIMINGS "$LOCAL_DIR/images.sh" "$IMAGES_DIR"
  timing "images built and smoke-tested (pause, busybox, genericdp)" \
    "$(seconds_between "$images_started" "$(now)")"
fi

read -ra checks <<<"${CHECKS:-}"
for ((round = 1; round <= ROUNDS; round++)); do
  log "===== round $round of $ROUNDS: up, deploy, checks, down"
  "$LOCAL_DIR/down.sh"
  "$LOCAL_DIR/leftovers.sh" snapshot >"$ARTIFACTS/before.txt"
  "$LOCAL_DIR/up.sh" "$IMAGES_DIR"
  "$E2E_ROOT/deploy.sh" local
  "$E2E_ROOT/checks.sh" local "${checks[@]}"
  "$LOCAL_DIR/down.sh"
  "$LOCAL_DIR/leftovers.sh" check "$ARTIFACTS/before.txt"
done
if [[ ${CDI:-1} != 0 ]]; then
  log "===== CDI round: containerd 1.7 with enable_cdi (cdi.sh)"
  "$LOCAL_DIR/leftovers.sh" snapshot >"$ARTIFACTS/before.txt"
  "$LOCAL_DIR/cdi.sh" "$IMAGES_DIR"
  "$LOCAL_DIR/leftovers.sh" check "$ARTIFACTS/before.txt"
fi
if [[ ${DRA:-1} != 0 ]]; then
  log "===== DRA round: the DRA backend, containerd 1.7 with enable_cdi (dra.sh)"
  read -ra dra_checks <<<"${DRA_CHECKS:-}"
  "$LOCAL_DIR/leftovers.sh" snapshot >"$ARTIFACTS/before.txt"
  "$LOCAL_DIR/dra.sh" "$IMAGES_DIR" "${dra_checks[@]}"
  "$LOCAL_DIR/leftovers.sh" check "$ARTIFACTS/before.txt"
fi
extra=""
[[ ${CDI:-1} != 0 ]] && extra+=", the CDI round"
[[ ${DRA:-1} != 0 ]] && extra+=", the DRA round"
timing "local-node e2e, everything ($ROUNDS rounds$extra)" "$(seconds_between "$started" "$(now)")"
