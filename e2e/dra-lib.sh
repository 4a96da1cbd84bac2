# shellcheck shell=bash
# DRA helpers for any cluster, written once for the local node's DRA round
# (e2e/local/dra.sh) and the kind fleet's (e2e/kind/dra.sh): the slices of
# NODE for DRIVER, the classes, the claims and the pods of NAMESPACE, the
# reconciler's pod (RECONCILER_SELECTOR) and Lease (CLASS_LEASE). Sourced
# after e2e/checks.sh (k, NODE, NAMESPACE, LAST_SEEN); never run.

DRIVER=${DRA_DRIVER:-genericdp.io}
INSPECT=$E2E_ROOT/local/dra-inspect.py

slices_json() {
  k get resourceslices --field-selector "spec.nodeName=$NODE,spec.driver=$DRIVER" -o json
}

# slice_devices RESOURCE -> "NAME UNIT_ID healthy|unhealthy" per device.
slice_devices() {
  slices_json | python3 "$INSPECT" devices "$1"
}

# devices_are RESOURCE N [HEALTHY]: the slices hold N devices of RESOURCE
# (HEALTHY of them healthy, when given).
devices_are() {
  local listed healthy
  listed=$(slice_devices "$1") || return 1
  LAST_SEEN="$(grep -c . <<<"$listed" || true) devices of $1: $(tr '\n' ';' <<<"$listed")"
  [[ $(grep -c . <<<"$listed") == "$2" ]] || return 1
  [[ -z ${3:-} ]] && return 0
  healthy=$(grep -c ' healthy$' <<<"$listed" || true)
  [[ $healthy == "$3" ]]
}

# pod_in NAME COMMAND...: run in a pod of the e2e namespace.
pod_in() {
  local pod=$1
  shift
  k -n "$NAMESPACE" exec "$pod" -- "$@" | tr -d '\r'
}

# env_of POD NAME: an environment variable of the pod (busybox has no printenv).
env_of() {
  pod_in "$1" env | sed -n "s/^$2=//p"
}

# class_for RESOURCE: the DeviceClass whose extendedResourceName is RESOURCE.
class_for() {
  k get deviceclasses -o jsonpath='{range .items[*]}{.metadata.name} {.spec.extendedResourceName}{"\n"}{end}' |
    awk -v r="$1" '$2 == r && !found { print $1; found = 1 }'
}

# pod_claim POD -> the name of the pod's ResourceClaim (from a template, or
# made by the scheduler for its extended resources).
pod_claim() {
  local name
  name=$(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}{.status.extendedResourceClaimStatus.resourceClaimName}')
  [[ -n $name ]] || return 1
  echo "$name"
}

# pods_phases GROUP: the phases of the pods labelled genericdp-e2e=GROUP, sorted.
pods_phases() {
  k -n "$NAMESPACE" get pods -l "genericdp-e2e=$1" -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}' |
    sort | tr '\n' ' '
}

phases_are() {
  LAST_SEEN=$(pods_phases "$1") || return 1
  [[ $LAST_SEEN == "$2" ]]
}

# share_ids GROUP: the shareID of each Running pod's claim, one a line.
share_ids() {
  local pod claim
  for pod in $(k -n "$NAMESPACE" get pods -l "genericdp-e2e=$1" --field-selector status.phase=Running -o name); do
    claim=$(pod_claim "${pod#pod/}") || return 1
    k -n "$NAMESPACE" get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[0].shareID}{"\n"}'
  done
}

# reconciler_pod: the running reconciler pod not being deleted.
reconciler_pod() {
  k -n "$NAMESPACE" get pods -l "$RECONCILER_SELECTOR" --field-selector=status.phase=Running \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}' |
    awk '$2 == "" { print $1; exit }'
}

lease_holder() {
  k -n "$NAMESPACE" get lease "$CLASS_LEASE" -o 'jsonpath={.spec.holderIdentity}'
}

# lease_held_by POD: the Lease's holder is POD (identity "<pod name>-<pid>").
lease_held_by() {
  LAST_SEEN="holder $(lease_holder 2>&1)"
  [[ $LAST_SEEN == "holder $1-"* ]]
}
