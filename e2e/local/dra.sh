#!/usr/bin/env bash
# DRA end to end on the local node: the node served by genericdp's DRA
# backend instead of the device-plugin one, with a containerd that applies
# CDI (Debian 13's 1.7, e2e/local/containerd-cdi.sh) and the kubelet at -v=4
# (its DRA lines). Up, deploy e2e/local/overlay-dra, then check that
#   - the driver registers with the kubelet's plugin registry (v1.DRAPlugin)
#     and nothing is served through the device-plugin API;
#   - its ResourceSlices form one pool named after the node, one device per
#     unit, each named device_name(resource, unitID);
#   - `genericdp deviceclasses` gives classes the API server takes;
#   - a pod with a ResourceClaim, and a pod with plain `limits` mapped to a
#     claim through a class's extendedResourceName, are scheduled by the real
#     scheduler, prepared by genericdp (init hook, CDI spec), and started by
#     the real kubelet with their device node, env and mount applied by
#     containerd from the spec; an over-request stays Unschedulable;
#   - deleting a pod unprepares its claim: the cleanup hook runs, the spec goes;
#   - hotplug and health show in the slices within seconds;
#   - after a kubelet restart (which deletes the node's slices) they are back;
#   - a node moves from the device plugin to DRA as docs/dra.md says, with
#     a pod running (dra-node-move-lib.sh).
# Then down (also on failure). Root.
#   KUBE_BIN_DIR=DIR e2e/local/dra.sh IMAGES_DIR [CHECK...]
set -euo pipefail
images=${1:?usage: KUBE_BIN_DIR=DIR e2e/local/dra.sh IMAGES_DIR [CHECK...]}
shift
# shellcheck source-path=SCRIPTDIR source=../checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" local

DRIVER=${DRA_DRIVER:-genericdp.io}
DRA_OVERLAY=$LOCAL_DIR/overlay-dra
REGISTRY_DIR=$KUBELET_ROOT/plugins_registry
MARKERS=/var/lib/genericdp-e2e/markers
CDI_DIR=/var/run/cdi
CDI_CONTAINERD=${CDI_CONTAINERD:-$ARTIFACTS/containerd-cdi}
INSPECT=$LOCAL_DIR/dra-inspect.py
CLAIM_POD=e2e-dra-claim
EXT_POD=e2e-dra-limits
# shellcheck source-path=SCRIPTDIR source=dra-node-move-lib.sh
source "$LOCAL_DIR/dra-node-move-lib.sh"
# The kubelet logs its DRA plugin registration at -v=3, prepare calls at -v=4.
export KUBELET_VERBOSITY=4
# Devices per resource (loop and fuse depend on the machine): one per unit,
# whatever `count` says (docs/dra.md: a DRA device goes to one claim, shared
# by the pods that share the claim), so null (count 4) and e2e-health
# (count 2) are one each.
VDA=0
[[ -b /dev/vda ]] && VDA=1
EXPECTED=(example.com/null=1 example.com/zero=1 example.com/e2e-dev=2 example.com/e2e-health=1
  example.com/e2e-dra=2 example.com/e2e-hotplug=0 example.com/e2e-shared=1 example.com/e2e-unplug=0
  example.com/e2e-nonroot=1 example.com/e2e-share3=1 example.com/e2e-vda="$VDA")

# names_in DIR: the entries of DIR on one line.
names_in() {
  find "$1" -mindepth 1 -maxdepth 1 -printf '%f ' 2>&1
}

has_socket() {
  [[ -n $(find "$1" -mindepth 1 -maxdepth 1 -type s -print -quit 2>/dev/null) ]]
}

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

claim_pod_manifest() {
  cat <<EOM
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: e2e-dra
spec:
  spec:
    devices:
      requests:
        - name: dev
          exactly:
            deviceClassName: $1
---
apiVersion: v1
kind: Pod
metadata:
  name: $CLAIM_POD
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims:
    - name: dev
      resourceClaimTemplateName: e2e-dra
  containers:
    - name: consumer
      image: $CONSUMER_IMAGE
      imagePullPolicy: Never
      command: [sleep, "1000000"]
      resources:
        claims:
          - name: dev
EOM
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

claim_uid() {
  k -n "$NAMESPACE" get resourceclaim "$1" -o 'jsonpath={.metadata.uid}'
}

container_id() {
  k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.status.containerStatuses[0].containerID}' |
    sed 's|^containerd://||'
}

# cdi_injected POD: containerd's log line naming the CDI devices it applied
# to the pod's container.
cdi_injected() {
  local id
  id=$(container_id "$1")
  grep -F "Container $id: CDI devices from CRI Config.CDIDevices:" "$LOG_DIR/containerd.log" |
    sed 's/.*CDIDevices: //; s/"$//' | tail -1
}

# prepare_timings SINCE NAME: the kubelet's NodePrepareResources calls after
# SINCE, each a TIMING line.
prepare_timings() {
  local seconds claims
  while read -r seconds claims; do
    [[ -n $seconds ]] || continue
    timing "DRA: NodePrepareResources as the kubelet timed it ($2)" "$seconds"
    log "  claims: $claims"
  done < <(python3 "$INSPECT" prepares "$LOG_DIR/kubelet.log" "$DRIVER" "$1")
}

kubelet_said() {
  # Never grep -q at the end of a pipe: under pipefail the writer's SIGPIPE
  # would turn a match into a failure.
  grep -F "$1" "$LOG_DIR/kubelet.log" | grep -F "\"driverName\":\"$DRIVER\"" | grep -F -- "${2:-}" >/dev/null
}

check_dra_registered() {
  log "check: genericdp registers with the kubelet as DRA driver $DRIVER (plugin registry)"
  wait_for 60 "a registration socket in $REGISTRY_DIR" has_socket "$REGISTRY_DIR"
  log "  $REGISTRY_DIR: $(names_in "$REGISTRY_DIR")"
  wait_for 60 "the kubelet to log 'Registered DRA plugin' for $DRIVER" \
    kubelet_said "Registered DRA plugin" '"chosenService":"v1.DRAPlugin"'
  wait_for 30 "the kubelet to connect to $DRIVER's DRA socket" \
    kubelet_said '"msg":"Connection changed"' '"connected":true'
  log "  $(grep -F "Registered DRA plugin" "$LOG_DIR/kubelet.log" | tail -1 | cut -c1-300)"

  log "check: nothing is served through the device-plugin API (one backend per node)"
  local sockets spec
  sockets=$(find "$PLUGIN_DIR" -mindepth 1 -maxdepth 1 -type s ! -name kubelet.sock -printf '%f ')
  [[ -z $sockets ]] || fail "device-plugin sockets next to the DRA backend: $sockets"
  for spec in "${EXPECTED[@]}"; do
    [[ -z $(node_quantity capacity "${spec%=*}") ]] ||
      fail "the Node lists ${spec%=*} in its capacity: served through the device-plugin API too"
  done
}

check_dra_slices() {
  log "check: ResourceSlices of $NODE: one pool named after the node, one device per unit"
  local spec summary listed name unit resource expected
  for spec in "${EXPECTED[@]}"; do
    LAST_SEEN=""
    wait_for 60 "${spec#*=} devices of ${spec%=*} in the slices of $NODE" \
      devices_are "${spec%=*}" "${spec#*=}" "${spec#*=}"
  done
  summary=$(slices_json | python3 "$INSPECT" pool "$NODE" "$DRIVER" 2>&1) ||
    fail "the slices of $NODE do not form one pool: $summary"
  log "  slices, devices, generation: $summary"
  for resource in example.com/loop example.com/fuse; do
    log "  $resource on this node: $(slice_devices "$resource" | grep -c . || true) devices"
  done

  log "check: every device is named device_name(resource, unitID) (genericdp.dra.naming, in the image)"
  listed=""
  for spec in "${EXPECTED[@]}"; do
    while read -r name unit _; do
      [[ -n $name ]] && listed+="${spec%=*} $unit $name"$'\n'
    done < <(slice_devices "${spec%=*}")
  done
  expected=$(printf '%s' "$listed" | k -n "$NAMESPACE" exec -i "$(daemon_pod)" -- python3 -c '
import sys
from genericdp.dra.naming import device_name
for line in sys.stdin:
    resource, unit, name = line.split()
    if device_name(resource, unit) != name:
        print(f"{resource} unit {unit}: named {name}, device_name says {device_name(resource, unit)}")
') || fail "could not compute device names in the genericdp pod"
  [[ -z $expected ]] || fail "device names in the slices: $expected"
}

classes_made() {
  local spec
  for spec in "${EXPECTED[@]}"; do
    [[ -n $(class_for "${spec%=*}") ]] || return 1
  done
}

check_dra_deviceclasses() {
  log "check: the DeviceClass reconciler makes one class per resource, labelled as the driver's"
  local out spec class started
  k -n "$NAMESPACE" rollout status deployment/genericdp-deviceclasses --timeout=120s ||
    fail "the DeviceClass reconciler (deployment/genericdp-deviceclasses) did not become ready"
  wait_for 60 "the reconciler to make a DeviceClass for every resource" classes_made
  timing "DRA: kubectl apply -> every DeviceClass made by the reconciler" "$(seconds_between "$deployed" "$(now)")"
  for spec in "${EXPECTED[@]}"; do
    class=$(class_for "${spec%=*}")
    expect "the driver label of DeviceClass $class" "$DRIVER" \
      "$(k get deviceclass "$class" -o 'jsonpath={.metadata.labels.genericdp\.io/driver}')"
  done
  class=$(class_for example.com/e2e-dra)
  started=$(now)
  k delete deviceclass "$class"
  wait_for 30 "the reconciler to make DeviceClass $class again" k get deviceclass "$class"
  timing "DRA: a DeviceClass deleted by hand -> made again by the reconciler" "$(seconds_between "$started" "$(now)")"

  log "check: \`genericdp deviceclasses\` prints classes the API server takes, one per resource"
  out=$ARTIFACTS/deviceclasses.yaml
  k -n "$NAMESPACE" exec "$(daemon_pod)" -- genericdp deviceclasses /etc/genericdp >"$out" ||
    fail "genericdp deviceclasses /etc/genericdp failed in the genericdp pod"
  k apply -f "$out" || fail "the API server refused the DeviceClasses of genericdp deviceclasses ($out)"
  for spec in "${EXPECTED[@]}"; do
    class=$(class_for "${spec%=*}")
    [[ -n $class ]] || fail "no DeviceClass with extendedResourceName ${spec%=*} in $out"
  done
  log "  $(k get deviceclasses -o name | tr '\n' ' ')"
}

check_dra_claim_pod() {
  log "check: a pod with a ResourceClaim for example.com/e2e-dra runs with its device, env and mount through CDI"
  local class started claim uid mine other nodes cdi said numbers
  class=$(class_for example.com/e2e-dra)
  started=$(now)
  claim_pod_manifest "$class" | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready "pod/$CLAIM_POD" --timeout=120s ||
    fail "pod $CLAIM_POD (a ResourceClaim of class $class) did not become Ready"
  timing "DRA: pod with a ResourceClaim created -> Ready" "$(seconds_between "$started" "$(now)")"
  prepare_timings "$started" "claim from a template"
  claim=$(pod_claim "$CLAIM_POD") || fail "pod $CLAIM_POD has no ResourceClaim in its status"
  uid=$(claim_uid "$claim")
  log "  claim $claim ($uid): $(k -n "$NAMESPACE" get resourceclaim "$claim" \
    -o 'jsonpath={.status.allocation.devices.results}')"

  mine=$(env_of "$CLAIM_POD" E2E_DRA_PATHS)
  case $mine in
    /dev/gdp-e2e-dra0) other=/dev/gdp-e2e-dra1 ;;
    /dev/gdp-e2e-dra1) other=/dev/gdp-e2e-dra0 ;;
    *) fail "E2E_DRA_PATHS in pod $CLAIM_POD is '$mine', not one of /dev/gdp-e2e-dra0, /dev/gdp-e2e-dra1" ;;
  esac
  nodes=$(pod_in "$CLAIM_POD" sh -c 'ls /dev | grep gdp-e2e || true' | tr '\n' ' ')
  expect "the e2e device nodes in pod $CLAIM_POD" "${mine#/dev/} " "$nodes"
  # No allocate.deviceNodes: the host node's mode and owner (0600, root's).
  expect "stat -c '%A %u %g' $mine in pod $CLAIM_POD (the host's)" "crw------- 0 0" \
    "$(pod_in "$CLAIM_POD" stat -c '%A %u %g' "$mine")"
  said=$(pod_in "$CLAIM_POD" sh -c "exec 3<>$mine" 2>&1 || true)
  [[ $said != *"Operation not permitted"* ]] ||
    fail "the device cgroup of pod $CLAIM_POD refuses its own $mine: $said"
  numbers=$(node_device_numbers "$other")
  pod_in "$CLAIM_POD" mknod /gdp-e2e-other c "${numbers%:*}" "${numbers#*:}" ||
    fail "mknod c $numbers in pod $CLAIM_POD failed"
  said=$(pod_in "$CLAIM_POD" sh -c 'exec 3<>/gdp-e2e-other' 2>&1 || true)
  [[ $said == *"Operation not permitted"* ]] ||
    fail "opening c $numbers ($other, not in the claim) should be refused by the device cgroup; the pod said: '${said:-opened}'"
  expect "E2E_DRA_NODE in pod $CLAIM_POD" "$NODE" "$(env_of "$CLAIM_POD" E2E_DRA_NODE)"
  expect "/e2e-share/hello.txt in pod $CLAIM_POD" "hello from $NODE" "$(pod_in "$CLAIM_POD" cat /e2e-share/hello.txt)"

  [[ -e $MARKERS/init-${mine#/dev/} ]] ||
    fail "the init hook of example.com/e2e-dra left no $MARKERS/init-${mine#/dev/} at prepare (markers: $(names_in "$MARKERS"))"
  [[ -s $CDI_DIR/gdp-claim-${DRIVER}_$uid.json ]] ||
    fail "no CDI spec $CDI_DIR/gdp-claim-${DRIVER}_$uid.json for claim $claim (in $CDI_DIR: $(names_in "$CDI_DIR"))"
  log "  $CDI_DIR/gdp-claim-${DRIVER}_$uid.json: $(tr -d ' \n' <"$CDI_DIR/gdp-claim-${DRIVER}_$uid.json" | cut -c1-400)"
  cdi=$(cdi_injected "$CLAIM_POD")
  [[ $cdi == *"$DRIVER/"* ]] ||
    fail "containerd did not log CDI devices of $DRIVER for pod $CLAIM_POD's container (got: '${cdi:-nothing}')"
  log "  containerd applied: $cdi"
}

check_dra_metadata() {
  log "check: the claim pod reads its device metadata (KEP-5304: attributes, its device node), mounted read-only"
  local claim uid mine file meta host
  claim=$(pod_claim "$CLAIM_POD") || fail "pod $CLAIM_POD has no ResourceClaim"
  uid=$(claim_uid "$claim")
  mine=$(env_of "$CLAIM_POD" E2E_DRA_PATHS)
  file=/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/dev/dev/$DRIVER-metadata.json
  meta=$(pod_in "$CLAIM_POD" cat "$file") || fail "pod $CLAIM_POD cannot read $file"
  log "  $file: $(printf %s "$meta" | tr -d ' \n' | cut -c1-400)"
  printf %s "$meta" | python3 -c '
import json, sys
text, objs, at, dec = sys.stdin.read(), [], 0, json.JSONDecoder()
while at < len(text):
    obj, at = dec.raw_decode(text, at); objs.append(obj)
    while at < len(text) and text[at].isspace(): at += 1
assert [o["apiVersion"] for o in objs] == ["metadata.resource.k8s.io/v1beta1", "metadata.resource.k8s.io/v1alpha1"], objs
o = objs[0]; (req,) = o["requests"]; (dev,) = req["devices"]
assert (o["metadata"]["name"], o["metadata"]["uid"], o["podClaimName"], req["name"]) == (sys.argv[1], sys.argv[2], "dev", "dev"), o
assert dev["driver"] == sys.argv[3] and dev["attributes"]["resource"] == {"string": "example.com/e2e-dra"}, dev
assert dev["attributes"]["deviceNode0"] == {"string": sys.argv[4]}, dev
' "$claim" "$uid" "$DRIVER" "$mine" || fail "the device metadata in pod $CLAIM_POD is not what prepare wrote: $meta"
  if pod_in "$CLAIM_POD" sh -c "echo x >>$file" 2>/dev/null; then fail "$file is writable in pod $CLAIM_POD"; fi
  host=$KUBELET_ROOT/plugins/$DRIVER/dra-device-metadata/${NAMESPACE}_$claim/dev/metadata.json
  expect "the mode of $host" 644 "$(stat -c %a "$host")"
}

check_dra_limits_pod() {
  log "check: the device-plugin round's consumer spec (limits example.com/e2e-dev: 1, example.com/null: 1) runs through extendedResourceName"
  local started claim mine
  started=$(now)
  consumer_manifest "$EXT_POD" 1 | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready "pod/$EXT_POD" --timeout=120s ||
    fail "pod $EXT_POD (limits example.com/e2e-dev: 1, example.com/null: 1) did not become Ready"
  timing "DRA: pod with plain limits created -> Ready" "$(seconds_between "$started" "$(now)")"
  prepare_timings "$started" "extended resources"
  claim=$(pod_claim "$EXT_POD") ||
    fail "pod $EXT_POD has no status.extendedResourceClaimStatus: the scheduler did not map its limits to a claim"
  log "  the scheduler's claim $claim: $(k -n "$NAMESPACE" get pod "$EXT_POD" \
    -o 'jsonpath={.status.extendedResourceClaimStatus.requestMappings}')"
  mine=$(env_of "$EXT_POD" E2E_DEV_PATHS)
  [[ $mine == /dev/gdp-e2e-dev[01] ]] ||
    fail "E2E_DEV_PATHS in pod $EXT_POD is '$mine', not one of /dev/gdp-e2e-dev0, /dev/gdp-e2e-dev1"
  pod_in "$EXT_POD" test -c "$mine" || fail "$mine is not a character device in pod $EXT_POD"
  expect "DEMO_NULL in pod $EXT_POD (example.com/null)" /dev/null "$(env_of "$EXT_POD" DEMO_NULL)"

  log "check: 2 more units of example.com/e2e-dev (1 free) stay Pending (scheduler, DRA allocator)"
  started=$(now)
  consumer_manifest e2e-dra-too-many 2 | k -n "$NAMESPACE" apply -f -
  wait_for 60 "pod e2e-dra-too-many to be Unschedulable" pod_unschedulable e2e-dra-too-many
  timing "DRA: over-request -> Unschedulable (scheduler)" "$(seconds_between "$started" "$(now)")"
  log "  $(k -n "$NAMESPACE" get pod e2e-dra-too-many -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}')"
  k -n "$NAMESPACE" delete pod e2e-dra-too-many --wait=false
}

check_dra_unprepare() {
  log "check: deleting the claim's pod unprepares it: cleanup hook, CDI spec removed"
  local claim uid mine started pod
  claim=$(pod_claim "$CLAIM_POD") || fail "pod $CLAIM_POD has no ResourceClaim"
  uid=$(claim_uid "$claim")
  mine=$(env_of "$CLAIM_POD" E2E_DRA_PATHS)
  started=$(now)
  k -n "$NAMESPACE" delete pod "$CLAIM_POD" --wait=false
  wait_for 60 "the cleanup hook of example.com/e2e-dra to leave $MARKERS/cleanup-${mine#/dev/}" \
    test -e "$MARKERS/cleanup-${mine#/dev/}"
  timing "DRA: claim pod deleted -> cleanup hook ran (unprepare)" "$(seconds_between "$started" "$(now)")"
  wait_for 30 "genericdp to remove $CDI_DIR/gdp-claim-${DRIVER}_$uid.json" test ! -e "$CDI_DIR/gdp-claim-${DRIVER}_$uid.json"
  wait_for 30 "genericdp to remove the claim's device metadata" \
    test ! -e "$KUBELET_ROOT/plugins/$DRIVER/dra-device-metadata/${NAMESPACE}_$claim"
  kubelet_said "Done calling NodeUnprepareResources rpc" "$uid" ||
    fail "the kubelet did not log NodeUnprepareResources for claim $uid"

  log "check: deleting the limits pod runs example.com/e2e-dev's cleanup hook"
  pod=$(daemon_pod)
  mine=$(env_of "$EXT_POD" E2E_DEV_PATHS)
  started=$(now)
  k -n "$NAMESPACE" delete pod "$EXT_POD" --wait=false
  wait_for 60 "genericdp ($pod) to log 'e2e cleaned $mine' from the cleanup hook" \
    daemon_log_has "$pod" "e2e cleaned $mine"
  timing "DRA: limits pod deleted -> cleanup hook ran (unprepare)" "$(seconds_between "$started" "$(now)")"
  k -n "$NAMESPACE" wait --for=delete "pod/$CLAIM_POD" "pod/$EXT_POD" --timeout=60s ||
    fail "the pods did not go away after unprepare"
  wait_for 30 "no claim CDI spec left in $CDI_DIR" sh -c "! ls $CDI_DIR/gdp-claim-*.json"

  log "check: /metrics counted both claims as prepared and unprepared, and timed them"
  local metrics name
  metrics=$(k -n "$NAMESPACE" exec "$pod" -- python3 -c \
    'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9090/metrics").read().decode())') ||
    fail "could not read /metrics in $pod"
  for name in genericdp_dra_prepares_total genericdp_dra_unprepares_total; do
    awk -v n="$name{driver=\"$DRIVER\",result=\"ok\"}" '$1 == n && $2 >= 2 { found = 1 } END { exit !found }' \
      <<<"$metrics" || fail "$name of $DRIVER with result ok is not 2 or more: $(grep -F "$name" <<<"$metrics" | tr '\n' ';')"
  done
  grep -F "genericdp_dra_prepare_duration_seconds_count{driver=\"$DRIVER\"}" <<<"$metrics" >/dev/null ||
    fail "no genericdp_dra_prepare_duration_seconds in /metrics"
  log "  $(grep -E '^genericdp_dra_(un)?prepares_total\{.*result="ok"' <<<"$metrics" | tr '\n' ' ')"
}

check_dra_hotplug() {
  log "check: device nodes created and removed on the node change the slices"
  local started
  started=$(now)
  node_exec sh -c 'mknod -m 0600 /dev/gdp-e2e-hp0 c 1 3 && mknod -m 0600 /dev/gdp-e2e-hp1 c 1 3'
  wait_for 30 "2 devices of example.com/e2e-hotplug in the slices" devices_are example.com/e2e-hotplug 2
  timing "DRA hotplug: 2 nodes created -> 2 devices in the slice" "$(seconds_between "$started" "$(now)")"
  started=$(now)
  node_exec rm /dev/gdp-e2e-hp1
  wait_for 30 "1 device of example.com/e2e-hotplug in the slices" devices_are example.com/e2e-hotplug 1
  timing "DRA hotplug: 1 node removed -> 1 device in the slice" "$(seconds_between "$started" "$(now)")"
  node_exec rm /dev/gdp-e2e-hp0
  wait_for 30 "no device of example.com/e2e-hotplug in the slices" devices_are example.com/e2e-hotplug 0
}

check_dra_health() {
  log "check: a failing health probe marks the devices in the slice, a passing one clears them"
  local started
  started=$(now)
  node_exec touch "$FLAG"
  wait_for 30 "the device of example.com/e2e-health to show unhealthy in the slice" \
    devices_are example.com/e2e-health 1 0
  timing "DRA health: probe fails -> unhealthy in the slice" "$(seconds_between "$started" "$(now)")"
  log "  $(slice_devices example.com/e2e-health | tr '\n' ';')"
  started=$(now)
  node_exec rm -f "$FLAG"
  wait_for 30 "the device of example.com/e2e-health to show healthy again" \
    devices_are example.com/e2e-health 1 1
  timing "DRA health: probe passes -> healthy in the slice" "$(seconds_between "$started" "$(now)")"
}

# limits_pod NAME RESOURCE GROUP [SECURITY_CONTEXT]: a pod holding one
# RESOURCE through plain limits (the scheduler makes its claim), labelled
# genericdp-e2e=GROUP; applied.
limits_pod() {
  device_pod_manifest "$@" | k -n "$NAMESPACE" apply -f -
}

# template_pod NAME RESOURCE: a ResourceClaimTemplate NAME for RESOURCE's
# class and a pod NAME with a claim from it; applied. The kubelet reports
# allocatedResourcesStatus for the claims a container names in
# resources.claims: a pod's plain limits (the claim the scheduler makes for
# extended resources) get none.
template_pod() {
  local class
  class=$(class_for "$2")
  [[ -n $class ]] || fail "no DeviceClass for $2 (dra_deviceclasses applies them)"
  claim_pod_manifest "$class" | sed "s/name: e2e-dra\$/name: $1/; s/resourceClaimTemplateName: e2e-dra\$/resourceClaimTemplateName: $1/; s/name: $CLAIM_POD\$/name: $1/" |
    k -n "$NAMESPACE" apply -f -
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

check_dra_health_message() {
  log "check: a failing probe's reason reaches the allocatedResourcesStatus of a pod holding the device"
  local started want="health probe exited 1: flag $FLAG is set"
  template_pod e2e-dra-health example.com/e2e-health
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-dra-health --timeout=120s ||
    fail "pod e2e-dra-health (a claim of example.com/e2e-health) did not become Ready"
  LAST_SEEN=""
  wait_for 60 "pod e2e-dra-health's allocatedResourcesStatus to say Healthy" \
    pod_resource_status_is e2e-dra-health Healthy
  started=$(now)
  node_exec touch "$FLAG"
  LAST_SEEN=""
  wait_for 60 "pod e2e-dra-health's allocatedResourcesStatus to say Unhealthy: $want" \
    pod_resource_status_is e2e-dra-health Unhealthy "$want"
  timing "DRA health: probe fails -> Unhealthy with its reason in the pod's status" \
    "$(seconds_between "$started" "$(now)")"
  log "  pod e2e-dra-health: $LAST_SEEN"
  started=$(now)
  node_exec rm -f "$FLAG"
  LAST_SEEN=""
  wait_for 60 "pod e2e-dra-health's allocatedResourcesStatus to say Healthy again" \
    pod_resource_status_is e2e-dra-health Healthy
  timing "DRA health: probe passes -> Healthy in the pod's status" "$(seconds_between "$started" "$(now)")"
  k -n "$NAMESPACE" delete pod e2e-dra-health --wait=false
}

check_dra_standard_attributes() {
  log "check: /dev/vda (a virtio disk under a PCI function) carries the standard attributes sysfs gives"
  if [[ ! -b /dev/vda || ! -e /sys/class/block/vda ]]; then
    log "  no /dev/vda on this machine: example.com/e2e-vda has no device, standard attributes not checked"
    return 0
  fi
  local real root bdf numa attributes want
  real=$(realpath /sys/class/block/vda)
  root=$(cut -d/ -f4 <<<"$real")
  bdf=$(grep -oE '[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]' <<<"$real" | tail -1)
  [[ $root == pci* && -n $bdf ]] || fail "/dev/vda is not under a PCI function here ($real)"
  numa=$(cat "/sys/bus/pci/devices/$bdf/numa_node")
  log "  sysfs: $real; PCI function $bdf, numa_node $numa"
  attributes=$(slices_json | python3 "$INSPECT" attributes example.com/e2e-vda) ||
    fail "could not read the attributes of example.com/e2e-vda"
  log "  $(tr '\n' ';' <<<"$attributes")"
  want=$(awk '{ print $1 }' <<<"$attributes" | head -1)
  grep -F " resource.kubernetes.io/pcieRoot=$root" <<<"$attributes" >/dev/null ||
    fail "the device of /dev/vda has no resource.kubernetes.io/pcieRoot=$root: $(tr '\n' ';' <<<"$attributes")"
  if grep -F " resource.kubernetes.io/pciBusID=" <<<"$attributes" >/dev/null; then
    fail "the device of /dev/vda has a resource.kubernetes.io/pciBusID, but it is a virtio device, not the PCI function $bdf"
  fi
  if ((numa >= 0)); then
    grep -F " resource.kubernetes.io/numaNode=$numa" <<<"$attributes" >/dev/null ||
      fail "the device of /dev/vda has no resource.kubernetes.io/numaNode=$numa"
  elif grep -F " resource.kubernetes.io/numaNode=" <<<"$attributes" >/dev/null; then
    fail "the device of /dev/vda has a resource.kubernetes.io/numaNode, but sysfs says numa_node $numa"
  fi
  log "  device $want: pcieRoot $root, no pciBusID, numaNode ${numa/#-*/absent}"
}

check_dra_nonroot() {
  log "check: allocate.deviceNodes gives a non-root container its node (group 4242, 0660) through DRA's CDI spec"
  limits_pod e2e-dra-nr-in example.com/e2e-nonroot nonroot \
    '{runAsUser: 1000, runAsGroup: 1000, supplementalGroups: [4242]}'
  limits_pod e2e-dra-nr-out example.com/e2e-nonroot nonroot '{runAsUser: 1000, runAsGroup: 1000}'
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-dra-nr-in pod/e2e-dra-nr-out --timeout=120s ||
    fail "the non-root pods of example.com/e2e-nonroot did not become Ready"
  expect "/dev/gdp-e2e-nr0 on $NODE" "crw------- 0 0" "$(stat -c '%A %u %g' /dev/gdp-e2e-nr0)"
  nonroot_pods_see e2e-dra-nr-in e2e-dra-nr-out /dev/gdp-e2e-nr0
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=nonroot --wait=false
}

# unplug_taints_are EFFECT: the one device of example.com/e2e-unplug has the
# unhealthy taint with EFFECT ("-": no taint).
unplug_taints_are() {
  LAST_SEEN=$(slices_json | python3 "$INSPECT" taints example.com/e2e-unplug) || return 1
  if [[ $1 == - ]]; then
    [[ $LAST_SEEN == *" -" ]]
  else
    [[ $LAST_SEEN == *" $DRIVER/unhealthy="*":$1" ]]
  fi
}

unplug_marks_are() {
  devices_are example.com/e2e-unplug 1 "$1" || return 1
  unplug_taints_are "$2"
}

check_dra_unplug_in_use() {
  log "check: a device node removed while a claim holds it stays in the slice, tainted and Unhealthy, until the pod goes"
  local started
  rm -f "$MARKERS/cleanup-unplug"
  node_exec mknod -m 0666 /dev/gdp-e2e-unplug0 c 1 3
  LAST_SEEN=""
  wait_for 30 "1 healthy device of example.com/e2e-unplug in the slices" devices_are example.com/e2e-unplug 1 1
  template_pod e2e-dra-unplug example.com/e2e-unplug
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-dra-unplug --timeout=120s ||
    fail "pod e2e-dra-unplug (a claim of example.com/e2e-unplug) did not become Ready"
  LAST_SEEN=""
  wait_for 60 "pod e2e-dra-unplug's allocatedResourcesStatus to say Healthy" \
    pod_resource_status_is e2e-dra-unplug Healthy
  started=$(now)
  node_exec rm /dev/gdp-e2e-unplug0
  LAST_SEEN=""
  wait_for 10 "the device of example.com/e2e-unplug to stay, unhealthy, tainted NoSchedule" \
    unplug_marks_are 0 NoSchedule
  timing "DRA unplug in use: node removed -> tainted, healthy: false in the slice" \
    "$(seconds_between "$started" "$(now)")"
  log "  $LAST_SEEN"
  LAST_SEEN=""
  wait_for 60 "pod e2e-dra-unplug's allocatedResourcesStatus to say Unhealthy: device nodes gone: ..." \
    pod_resource_status_is_gone e2e-dra-unplug
  timing "DRA unplug in use: node removed -> Unhealthy in the pod's status" "$(seconds_between "$started" "$(now)")"
  log "  pod e2e-dra-unplug: $LAST_SEEN"
  hold_for 3 "the unplugged device in the slice while the pod holds it" unplug_marks_are 0 NoSchedule

  started=$(now)
  k -n "$NAMESPACE" delete pod e2e-dra-unplug --wait=false
  LAST_SEEN=""
  wait_for 60 "the device of example.com/e2e-unplug to leave the slice once its claim is unprepared" \
    devices_are example.com/e2e-unplug 0
  timing "DRA unplug in use: pod deleted -> device gone from the slice" "$(seconds_between "$started" "$(now)")"
  wait_for 30 "the cleanup hook of example.com/e2e-unplug to leave $MARKERS/cleanup-unplug" \
    test -e "$MARKERS/cleanup-unplug"

  log "check: the node made again is one healthy, untainted device"
  started=$(now)
  node_exec mknod -m 0666 /dev/gdp-e2e-unplug0 c 1 3
  LAST_SEEN=""
  wait_for 30 "the device of example.com/e2e-unplug back, healthy and untainted" unplug_marks_are 1 -
  timing "DRA unplug: node made again -> healthy, untainted in the slice" "$(seconds_between "$started" "$(now)")"
  node_exec rm /dev/gdp-e2e-unplug0
  wait_for 30 "no device of example.com/e2e-unplug in the slices" devices_are example.com/e2e-unplug 0
}

pod_resource_status_is_gone() {
  pod_resource_status_is "$1" Unhealthy && [[ $LAST_SEEN == "Unhealthy: device nodes gone: "* ]]
}

cleanups_are() {
  LAST_SEEN="$(grep -c . "$MARKERS/share3-cleanups" 2>/dev/null || echo 0) cleanups"
  [[ $LAST_SEEN == "$1 cleanups" ]]
}

check_dra_sharing() {
  log "check: count: 3 shares one device among 3 claims: of 4 pods with limits 1, 3 run, 1 waits"
  local n started ids said
  rm -f "$MARKERS/share3-cleanups"
  started=$(now)
  for ((n = 0; n < 4; n++)); do
    limits_pod "e2e-share3-$n" example.com/e2e-share3 share3
  done
  LAST_SEEN=""
  wait_for 120 "3 pods of example.com/e2e-share3 Running and 1 Pending" phases_are share3 "Pending Running Running Running "
  timing "DRA sharing: 4 pods of a count: 3 unit -> 3 Running" "$(seconds_between "$started" "$(now)")"
  local pending
  pending=$(k -n "$NAMESPACE" get pods -l genericdp-e2e=share3 --field-selector status.phase=Pending \
    -o 'jsonpath={.items[0].metadata.name}')
  said=$(k -n "$NAMESPACE" get pod "$pending" -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}')
  [[ $said == *"cannot allocate all claims"* ]] ||
    fail "the Pending $pending should wait for a share (cannot allocate all claims); the scheduler says: '$said'"
  log "  $pending: $said"
  ids=$(share_ids share3) || fail "could not read the shareIDs of the claims of example.com/e2e-share3"
  [[ $(grep -c . <<<"$ids") == 3 && $(sort -u <<<"$ids" | grep -c .) == 3 ]] ||
    fail "the 3 Running claims should have 3 distinct shareIDs: $(tr '\n' ' ' <<<"$ids")"
  log "  shareIDs: $(tr '\n' ' ' <<<"$ids")"

  log "check: a share freed lets the Pending pod run; cleanup runs once, after the last pod"
  started=$(now)
  local running
  running=$(k -n "$NAMESPACE" get pods -l genericdp-e2e=share3 --field-selector status.phase=Running \
    -o 'jsonpath={.items[0].metadata.name}')
  k -n "$NAMESPACE" delete pod "$running" --wait=true
  LAST_SEEN=""
  wait_for 120 "the Pending pod of example.com/e2e-share3 to run on the freed share" \
    phases_are share3 "Running Running Running "
  timing "DRA sharing: a pod deleted -> the Pending one Running" "$(seconds_between "$started" "$(now)")"
  cleanups_are 0 || fail "the cleanup hook of example.com/e2e-share3 ran while claims still held the unit ($LAST_SEEN)"
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=share3 --wait=true
  LAST_SEEN=""
  wait_for 60 "the cleanup hook of example.com/e2e-share3 to run after the last pod" cleanups_are 1
  hold_for 3 "one cleanup of example.com/e2e-share3" cleanups_are 1

  log "check: count: unbounded: 3 pods with limits 1 share example.com/e2e-shared, all Running"
  started=$(now)
  for ((n = 0; n < 3; n++)); do
    limits_pod "e2e-dra-shared-$n" example.com/e2e-shared dra-shared
  done
  LAST_SEEN=""
  wait_for 120 "3 pods of example.com/e2e-shared Running" phases_are dra-shared "Running Running Running "
  timing "DRA sharing: 3 pods of a count: unbounded unit -> all Running" "$(seconds_between "$started" "$(now)")"
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=dra-shared --wait=false
}

# registered_since T: the kubelet logged a registration of the driver after T.
registered_since() {
  kubelet_log_since "$1" | grep -F '"msg":"Registered DRA plugin"' | grep -F "\"driverName\":\"$DRIVER\"" >/dev/null
}

# wiped_since T: the kubelet deleted the node's slices after T; sets WIPED_AT.
WIPED_AT=""
wiped_since() {
  WIPED_AT=$(kubelet_log_since "$1" | grep -F '"msg":"Deleted ResourceSlices"' |
    grep -F "spec.nodeName=$NODE" | head -1 | cut -d' ' -f1)
  [[ -n $WIPED_AT ]]
}

# slices_complete: every expected device is in the slices (one read of them
# and one python3, so that a poll costs the same whatever the resources: one
# per resource made a poll take seconds on a loaded machine).
slices_complete() {
  local json
  json=$(slices_json) || return 1
  LAST_SEEN=$(python3 "$INSPECT" counts "${EXPECTED[@]}" <<<"$json" 2>&1) && return 0
  return 1
}

check_dra_kubelet_restart() {
  log "check: after a kubelet restart (it deletes the node's slices at start) the driver registers and publishes again"
  local since started
  since=$(now)
  restart_kubelet_hard
  started=$(now)
  wait_for 60 "the kubelet to register $DRIVER again" registered_since "$since"
  timing "DRA kubelet restart: start -> registered again" "$(seconds_between "$started" "$(now)")"
  wait_for 60 "the kubelet to delete the slices of $NODE as it starts (its log: Deleted ResourceSlices)" \
    wiped_since "$since"
  LAST_SEEN=""
  wait_for 60 "every device back in the slices after the kubelet's start-up wipe" slices_complete
  timing "DRA kubelet restart: slices deleted by the kubelet -> complete again" \
    "$(seconds_between "$WIPED_AT" "$(now)")"
  # The kubelet's wipe may land after the driver re-registered (seen: 23 ms
  # after): the slices must come back and stay.
  hold_for 10 "every device in the slices after the kubelet restart" slices_complete
}

finish() {
  local status=$?
  trap - EXIT
  # genericdp's log outlives its pod (the kubelet's and the others' are in $LOG_DIR).
  k -n "$NAMESPACE" logs -l "$DS_SELECTOR" --tail=-1 --timestamps >"$LOG_DIR/genericdp-dra.log" 2>&1 || true
  "$LOCAL_DIR/down.sh" || status=1
  exit "$status"
}

ALL_DRA_CHECKS=(dra_registered dra_slices dra_deviceclasses dra_claim_pod dra_metadata dra_limits_pod dra_unprepare
  dra_hotplug dra_health dra_health_message dra_standard_attributes dra_nonroot dra_unplug_in_use
  dra_sharing dra_kubelet_restart dra_node_move)

trap finish EXIT
started=$(now)
"$LOCAL_DIR/containerd-cdi.sh" "$CDI_CONTAINERD"
CONTAINERD_BIN_DIR=$CDI_CONTAINERD CDI=1 "$LOCAL_DIR/up.sh" "$images"

log "preparing $NODE: /dev/gdp-e2e-dev{0,1} and /dev/gdp-e2e-dra{0,1} (c 10:229, c 10:237), /dev/gdp-e2e-ctl (c 10:238), /dev/gdp-e2e-shared (c 1:5), /dev/gdp-e2e-nr0 and /dev/gdp-e2e-share3 (c 1:3), /var/lib/genericdp-e2e"
# The device-plugin round's nodes (e2e/deploy.sh), and e2e-dra's.
rm -f /dev/gdp-e2e-*
mknod -m 0600 /dev/gdp-e2e-dev0 c 10 229
mknod -m 0600 /dev/gdp-e2e-dev1 c 10 237
mknod -m 0600 /dev/gdp-e2e-ctl c 10 238
mknod -m 0666 /dev/gdp-e2e-shared c 1 5
mknod -m 0600 /dev/gdp-e2e-dra0 c 10 229
mknod -m 0600 /dev/gdp-e2e-dra1 c 10 237
mknod -m 0600 /dev/gdp-e2e-nr0 c 1 3
mknod -m 0666 /dev/gdp-e2e-share3 c 1 3
mkdir -p /var/lib/genericdp-e2e/share "$MARKERS"
rm -f "$FLAG" "$MARKERS"/*
echo "hello from $NODE" >/var/lib/genericdp-e2e/share/hello.txt

log "deploying $DRA_OVERLAY (backend dra, image $IMAGE)"
deployed=$(now)
k apply -k "$DRA_OVERLAY"
k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
  fail "the genericdp DaemonSet (DRA backend) did not become ready within 180s"
READY_AT=$(now)
timing "DRA: kubectl apply -> DaemonSet rolled out (pod Ready)" "$(seconds_between "$deployed" "$READY_AT")"
# Right after the rollout, before any check: one read of the slices per poll
# (the checks' per-resource reads took about 6 s for the ten resources).
LAST_SEEN=""
wait_for 60 "every device in the ResourceSlices of $NODE" slices_complete
timing "DRA: DaemonSet ready -> every device in the ResourceSlices" "$(seconds_between "$READY_AT" "$(now)")"
# genericdp's own figure: its slice publisher's start (after the imports) to
# the pool first right, from its log line.
first_publish=$(k -n "$NAMESPACE" logs "$(daemon_pod)" | grep -F "ResourceSlices of node $NODE up to date" |
  head -1 | grep -oE 'up to date [0-9.]+s' | grep -oE '[0-9.]+' || true)
[[ -n $first_publish ]] || fail "genericdp did not log 'ResourceSlices of node $NODE up to date'"
timing "DRA: genericdp's slice publisher started -> slices up to date (its log)" "$first_publish"

(($#)) || set -- "${ALL_DRA_CHECKS[@]}"
for check in "$@"; do
  "check_$check"
done
timing "DRA run (containerd 1.7, kubelet -v=4): everything" "$(seconds_between "$started" "$(now)")"
log "DRA end to end passed: $*"
