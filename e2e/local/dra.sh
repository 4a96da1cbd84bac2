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
#   - slices deleted by someone else right after a daemon start come back;
#   - after a kubelet restart (which deletes the node's slices) they are back.
# The move of docs/dra.md, sharing, a held device unplugged and a node lost
# run on the kind fleet (e2e/kind/dra.sh).
# Then down (also on failure). Root.
#   KUBE_BIN_DIR=DIR e2e/local/dra.sh IMAGES_DIR [CHECK...]
set -euo pipefail
images=${1:?usage: KUBE_BIN_DIR=DIR e2e/local/dra.sh IMAGES_DIR [CHECK...]}
shift
# shellcheck source-path=SCRIPTDIR source=../checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" local

# shellcheck source-path=SCRIPTDIR source=../dra-lib.sh
source "$E2E_ROOT/dra-lib.sh"
DRA_OVERLAY=$LOCAL_DIR/overlay-dra
REGISTRY_DIR=$KUBELET_ROOT/plugins_registry
MARKERS=/var/lib/genericdp-e2e/markers
CDI_DIR=/var/run/cdi
CDI_CONTAINERD=${CDI_CONTAINERD:-$ARTIFACTS/containerd-cdi}
CLAIM_POD=e2e-dra-claim
EXT_POD=e2e-dra-limits
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
  example.com/e2e-nonroot=1 example.com/e2e-vda="$VDA")

# names_in DIR: the entries of DIR on one line.
names_in() {
  find "$1" -mindepth 1 -maxdepth 1 -printf '%f ' 2>&1
}

has_socket() {
  [[ -n $(find "$1" -mindepth 1 -maxdepth 1 -type s -print -quit 2>/dev/null) ]]
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

  log "check: every device is named device_name(resource, unitID) (genericdp.kubeletplugin.naming, in the image)"
  listed=""
  for spec in "${EXPECTED[@]}"; do
    while read -r name unit _; do
      [[ -n $name ]] && listed+="${spec%=*} $unit $name"$'\n'
    done < <(slice_devices "${spec%=*}")
  done
  expected=$(printf '%s' "$listed" | k -n "$NAMESPACE" exec -i "$(daemon_pod)" -- python3 -c '
import sys
from genericdp.kubeletplugin.naming import device_name
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
  log "check: the DeviceClass reconciler makes one class per resource (their labels, the reconciler's Lease: e2e/kind/dra.sh)"
  local out spec class
  k -n "$NAMESPACE" rollout status deployment/genericdp-deviceclasses --timeout=120s ||
    fail "the DeviceClass reconciler (deployment/genericdp-deviceclasses) did not become ready"
  wait_for 60 "the reconciler to make a DeviceClass for every resource" classes_made
  timing "DRA: kubectl apply -> every DeviceClass made by the reconciler" "$(seconds_between "$deployed" "$(now)")"

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

RECONCILER_SELECTOR=app.kubernetes.io/name=genericdp,app.kubernetes.io/component=deviceclasses
CLASS_LEASE=genericdp-deviceclasses-$DRIVER
ELSEWHERE_SLICE=gdp-e2e-elsewhere

# classes_config_patch FILE|"": the ConfigMap patch adding FILE as the key
# classes.yaml, or removing that key.
classes_config_patch() {
  python3 -c 'import json, sys
text = open(sys.argv[1]).read() if sys.argv[1] else None
print(json.dumps({"data": {"classes.yaml": text}}))' "$1"
}

# class_name_of RESOURCE: genericdp.config.names.device_class_name, in the image.
class_name_of() {
  k -n "$NAMESPACE" exec "$(daemon_pod)" -- python3 -c \
    'import sys; from genericdp.config.names import device_class_name; print(device_class_name(sys.argv[1]))' "$1" |
    tr -d '\r'
}

class_version() {
  k get deviceclass "$1" -o 'jsonpath={.metadata.resourceVersion}'
}

# class_versions_are "NAME=VERSION ...": every class at its resourceVersion.
class_versions_are() {
  local pair
  for pair in $1; do
    LAST_SEEN="$pair: $(class_version "${pair%=*}" 2>&1)"
    [[ $LAST_SEEN == "$pair: ${pair#*=}" ]] || return 1
  done
}

class_gone() {
  ! k get deviceclass "$1" >/dev/null 2>&1
}

reconciler_said() {
  # Not grep -q: under pipefail kubectl's SIGPIPE would fail a match.
  k -n "$NAMESPACE" logs -l "$RECONCILER_SELECTOR" --tail=-1 2>/dev/null | grep -F -- "$1" >/dev/null
}

# new_reconciler_running OLD: a running reconciler pod other than OLD (in LAST_SEEN).
new_reconciler_running() {
  local pod
  pod=$(k -n "$NAMESPACE" get pods -l "$RECONCILER_SELECTOR" \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[0].state.running.startedAt}{"\n"}{end}' |
    awk -v old="$1" '$1 != old && $2 != "" { print $1; exit }') || return 1
  LAST_SEEN=$pod
  [[ -n $pod ]]
}

# elsewhere_slice RESOURCE: a ResourceSlice of the driver for another node,
# listing one device of RESOURCE (as a node still running the old config would).
elsewhere_slice() {
  cat <<EOM
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: $ELSEWHERE_SLICE
spec:
  driver: $DRIVER
  nodeName: $ELSEWHERE_SLICE
  pool: {name: $ELSEWHERE_SLICE, generation: 1, resourceSliceCount: 1}
  devices:
    - name: e2e-elsewhere-0
      attributes:
        resource: {string: $1}
EOM
}

# lease_handover deleted|stopped: force-delete the reconciler pod holding
# the Lease (the way a node that is gone is cleared), and wait for the new
# pod to take it. "stopped" SIGSTOPs the holder's process first, so it can
# neither renew nor release: the new pod must wait for the Lease to expire.
# HANDOVER_TO is the new holder's pod.
HANDOVER_TO=""
lease_handover() {
  local how=$1 old duration transitions id pid started running new seconds waited
  old=$(reconciler_pod)
  [[ -n $old ]] || fail "no running reconciler pod"
  lease_held_by "$old" || fail "Lease $NAMESPACE/$CLASS_LEASE is not held by $old: $LAST_SEEN"
  duration=$(k -n "$NAMESPACE" get lease "$CLASS_LEASE" -o 'jsonpath={.spec.leaseDurationSeconds}')
  transitions=$(k -n "$NAMESPACE" get lease "$CLASS_LEASE" -o 'jsonpath={.spec.leaseTransitions}')
  if [[ $how == stopped ]]; then
    id=$(container_id "$old")
    pid=$(ctr_k8s tasks ls | awk -v id="$id" '$1 == id { print $2 }')
    [[ -n $pid ]] || fail "no containerd task for container $id of reconciler pod $old"
    kill -STOP "$pid"
  fi
  started=$(now)
  k -n "$NAMESPACE" delete pod "$old" --force --grace-period=0
  wait_for 120 "a new reconciler pod (not $old) running" new_reconciler_running "$old"
  new=$LAST_SEEN
  running=$(now)
  wait_for $((duration * 4)) "reconciler pod $new to take Lease $NAMESPACE/$CLASS_LEASE" lease_held_by "$new"
  waited=$(seconds_between "$started" "$(now)")
  seconds=$(seconds_between "$running" "$(now)")
  timing "DRA classes: reconciler pod force-deleted ($how) -> new pod holds the Lease" "$waited"
  timing "DRA classes: its new pod running -> holds the Lease ($how, lease ${duration}s)" "$seconds"
  expect "leaseTransitions of Lease $CLASS_LEASE" $((transitions + 1)) \
    "$(k -n "$NAMESPACE" get lease "$CLASS_LEASE" -o 'jsonpath={.spec.leaseTransitions}')"
  if [[ $how == deleted ]]; then
    awk -v s="$waited" -v d="$duration" 'BEGIN { exit !(s <= d) }' ||
      fail "the Lease was taken ${waited}s after the holder's pod was deleted, not within its ${duration}s"
    if k -n "$NAMESPACE" logs "$new" | grep -F "has not renewed for" >/dev/null; then
      fail "reconciler pod $new waited for the Lease to expire: the deleted holder did not release it"
    fi
  else
    k -n "$NAMESPACE" logs "$new" | grep -F "has not renewed for ${duration}s: taking it" >/dev/null ||
      fail "reconciler pod $new did not log taking the expired Lease"
    # Not before the old record stayed unchanged for the duration, by the
    # new pod's clock from its first look (its start line, just before);
    # then within one retry (duration/5), a second given for a busy machine.
    awk -v s="$waited" -v d="$duration" 'BEGIN { exit !(s >= d) }' ||
      fail "the Lease of a stopped holder was taken ${waited}s after, before its ${duration}s ran out"
    seconds=$(k -n "$NAMESPACE" logs --timestamps "$new" | python3 -c '
import datetime, sys
def at(text):
    line = next(l for l in sys.stdin if text in l)
    return datetime.datetime.fromisoformat(line.split()[0][:26].rstrip("Z"))
start = at("keeping the DeviceClasses")
print("%.2f" % (at("has not renewed for") - start).total_seconds())') ||
      fail "no start and take lines in the log of reconciler pod $new"
    timing "DRA classes: the new pod started -> took the expired Lease (its log)" "$seconds"
    awk -v s="$seconds" -v d="$duration" 'BEGIN { exit !(s >= d && s <= d + d / 5 + 1) }' ||
      fail "reconciler pod $new took the expired Lease ${seconds}s after its start, not within ${duration}s and one retry"
  fi
  HANDOVER_TO=$new
}

check_dra_deviceclasses_more() {
  log "check: a resource added to the ConfigMap (a new key) gets its DeviceClass; a pod with its limits runs"
  local fresh=example.com/e2e-classnew taken=example.com/e2e-classtaken
  local config patched fresh_class taken_class versions started class new
  fresh_class=$(class_name_of "$fresh")
  taken_class=$(class_name_of "$taken")
  # Not ours: no labels at all, and one holding the name $taken wants.
  k apply -f - <<EOM
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: e2e-unlabelled.example.com
spec:
  selectors: [{cel: {expression: 'device.driver == "e2e.example.com"'}}]
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: $taken_class
  labels: {app.kubernetes.io/managed-by: someone-else}
spec:
  selectors: [{cel: {expression: 'device.driver == "e2e.example.com"'}}]
EOM
  versions="e2e-unlabelled.example.com=$(class_version e2e-unlabelled.example.com) $taken_class=$(class_version "$taken_class")"
  mknod -m 0666 /dev/gdp-e2e-cn0 c 1 3
  config=$(mktemp)
  cat >"$config" <<EOM
version: v1
resources:
  - name: $fresh
    match:
      - glob: /dev/gdp-e2e-cn0
  - name: $taken
    match:
      - glob: /dev/gdp-e2e-taken*
EOM
  started=$(now)
  k -n "$NAMESPACE" patch configmap genericdp-config --type merge -p "$(classes_config_patch "$config")"
  rm -f "$config"
  patched=$started
  wait_for 120 "the reconciler to make DeviceClass $fresh_class for $fresh" k get deviceclass "$fresh_class"
  timing "DRA classes: ConfigMap key added -> DeviceClass made (the kubelet's ConfigMap sync included)" \
    "$(seconds_between "$started" "$(now)")"
  expect "the driver label of DeviceClass $fresh_class" "$DRIVER" \
    "$(k get deviceclass "$fresh_class" -o 'jsonpath={.metadata.labels.genericdp\.io/driver}')"
  expect "the extendedResourceName of DeviceClass $fresh_class" "$fresh" \
    "$(k get deviceclass "$fresh_class" -o 'jsonpath={.spec.extendedResourceName}')"
  LAST_SEEN=""
  wait_for 120 "1 device of $fresh in the slices of $NODE" devices_are "$fresh" 1 1
  limits_pod e2e-dra-classnew "$fresh" classnew
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-dra-classnew --timeout=120s ||
    fail "pod e2e-dra-classnew (limits $fresh: 1) did not become Ready"
  timing "DRA classes: ConfigMap key added -> pod with its limits Ready" "$(seconds_between "$patched" "$(now)")"

  log "check: classes without the reconciler's labels keep their resourceVersion, a wanted name among them"
  wait_for 30 "the reconciler to log that DeviceClass $taken_class is not its own" \
    reconciler_said "DeviceClass $taken_class exists without the labels"
  hold_for 5 "the classes not ours unchanged ($versions)" class_versions_are "$versions"
  expect "the labels of DeviceClass $taken_class" '{"app.kubernetes.io/managed-by":"someone-else"}' \
    "$(k get deviceclass "$taken_class" -o 'jsonpath={.metadata.labels}')"

  log "check: a removed key's class stays while a slice lists its resource, and goes once none does"
  elsewhere_slice "$fresh" | k apply -f -
  k -n "$NAMESPACE" delete pod e2e-dra-classnew --wait=true
  started=$(now)
  k -n "$NAMESPACE" patch configmap genericdp-config --type merge -p "$(classes_config_patch "")"
  LAST_SEEN=""
  wait_for 120 "no device of $fresh in the slices of $NODE (the key removed)" devices_are "$fresh" 0
  wait_for 60 "the reconciler to keep DeviceClass $fresh_class while slice $ELSEWHERE_SLICE lists $fresh" \
    reconciler_said "DeviceClass $fresh_class: left the config, kept while a node publishes it"
  timing "DRA classes: ConfigMap key removed -> class kept (the kubelet's ConfigMap sync included)" \
    "$(seconds_between "$started" "$(now)")"
  hold_for 5 "DeviceClass $fresh_class kept while slice $ELSEWHERE_SLICE lists $fresh" \
    k get deviceclass "$fresh_class"
  started=$(now)
  k delete resourceslice "$ELSEWHERE_SLICE"
  wait_for 30 "the reconciler to delete DeviceClass $fresh_class (no slice lists $fresh)" \
    class_gone "$fresh_class"
  timing "DRA classes: last slice listing the resource deleted -> class deleted" \
    "$(seconds_between "$started" "$(now)")"
  class_versions_are "$versions" || fail "a class not ours changed: $LAST_SEEN"
  k delete deviceclass e2e-unlabelled.example.com "$taken_class"
  rm -f /dev/gdp-e2e-cn0

  log "check: the reconciler's pod force-deleted, the new pod takes the Lease at once (the kubelet's SIGTERM releases it)"
  lease_handover deleted
  log "check: the same with the holder stopped first (SIGSTOP: no renewal, no release, as a node gone): taken once it expires"
  lease_handover stopped
  new=$HANDOVER_TO
  class=$(class_for example.com/e2e-dra)
  started=$(now)
  k delete deviceclass "$class"
  wait_for 30 "the new leader ($new) to make DeviceClass $class again" k get deviceclass "$class"
  timing "DRA classes: a class deleted -> made again by the new leader" "$(seconds_between "$started" "$(now)")"
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

# published_by_another OLD: a genericdp pod other than OLD logged its slices up
# to date; sets NEW_POD.
NEW_POD=""
published_by_another() {
  NEW_POD=$(k -n "$NAMESPACE" get pods -l "$DS_SELECTOR" --field-selector "spec.nodeName=$NODE" \
    -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' | grep -vxF "$1" | head -1)
  [[ -n $NEW_POD ]] || return 1
  k -n "$NAMESPACE" logs "$NEW_POD" 2>/dev/null | grep -qF "ResourceSlices of node $NODE up to date"
}

check_dra_slice_restored() {
  log "check: the node's slices, deleted by someone else right after a daemon start, are back within seconds"
  local old started
  old=$(daemon_pod)
  k -n "$NAMESPACE" delete pod "$old" --wait=false
  wait_for 120 "a new genericdp pod (not $old) to log its ResourceSlices up to date" published_by_another "$old"
  started=$(now)
  k delete resourceslices --field-selector "spec.nodeName=$NODE,spec.driver=$DRIVER" --wait=false
  LAST_SEEN=""
  wait_for 10 "every device back in the slices after they were deleted right after $NEW_POD started" \
    slices_complete
  timing "DRA slices deleted right after a daemon start -> complete again" \
    "$(seconds_between "$started" "$(now)")"
  hold_for 5 "every device in the slices after the restore" slices_complete
}

# -- dra_rollout: a rolling update of the DaemonSet while claims come and go -----------------

ROLLOUT_POD=e2e-dra-rollout
# The pids of the check's background jobs: stop_background ends them, also on failure.
BACKGROUND=()
ROLLOUT_PROBLEMS=()

# kubectl_exec ARGS...: kubectl in place of the calling subshell, so that the
# pid of `(kubectl_exec ...) &` is kubectl's own and stop_background ends it.
kubectl_exec() {
  exec nsenter --net="$NETNS_PATH" "$(kube_bin kubectl)" --kubeconfig "$ADMIN_KUBECONFIG" "$@"
}

stop_background() {
  local pid
  for pid in "${BACKGROUND[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${BACKGROUND[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  BACKGROUND=()
}

# stop_job PID [wait]: end one background job (or, with wait, let it end on
# its own) and reap it.
stop_job() {
  local pid kept=()
  [[ ${2:-} == wait ]] || kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for pid in "${BACKGROUND[@]}"; do
    [[ $pid == "$1" ]] || kept+=("$pid")
  done
  BACKGROUND=("${kept[@]}")
}

# problem WHAT: an observation of the rolling update that does not hold; the
# check goes on observing and fails at its end, naming them all.
problem() {
  ROLLOUT_PROBLEMS+=("$*")
  log "  does not hold: $*"
}

# within TIMEOUT COMMAND...: poll COMMAND until it succeeds (0) or TIMEOUT
# seconds have passed (1); wait_for without the failure.
within() {
  local deadline
  deadline=$(awk -v n="$(now)" -v t="$1" 'BEGIN { printf "%.3f", n + t }')
  shift
  until "$@" >/dev/null 2>&1; do
    awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && return 1
    sleep "$POLL"
  done
}

# sample_registry: a line "UNIXTIME NAME..." each time the set of the driver's
# registration sockets named after a pod (<driver>-<pod UID or its hash>-reg.sock)
# changes, sampled every 20 ms, until killed.
sample_registry() {
  local last=- names
  shopt -s nullglob
  while :; do
    names=("$REGISTRY_DIR/$DRIVER"-*-reg.sock)
    names=("${names[@]##*/}")
    if [[ ${names[*]} != "$last" ]]; then
      printf '%s %s\n' "$EPOCHREALTIME" "${names[*]}"
      last=${names[*]}
    fi
    sleep 0.02
  done
}

# churn OUT STOP: about every second a pod holding one example.com/e2e-shared
# (through limits: a claim the scheduler makes) is created, and each churn pod
# seen Running is deleted (its claim unprepared), until the file STOP exists.
# Each kubectl runs beside the loop, so that a slow one (a loaded machine)
# does not slow the loop down. Writes "created|running NAME UNIXTIME" and
# "unapplied NAME" lines to OUT; waits for its kubectl calls before it returns.
churn() {
  local out=$1 stop=$2 n=0 began reaper=""
  while [[ ! -e $stop ]]; do
    began=$EPOCHREALTIME
    churn_create "e2e-churn-$n" "$out" &
    n=$((n + 1))
    if [[ -z $reaper ]] || ! kill -0 "$reaper" 2>/dev/null; then
      churn_reap "$out" &
      reaper=$!
    fi
    sleep "$(awk -v b="$began" -v n="$EPOCHREALTIME" 'BEGIN { d = 1 - (n - b); printf "%.2f", (d > 0 ? d : 0) }')"
  done
  wait
}

churn_create() {
  local began=$EPOCHREALTIME
  if device_pod_manifest "$1" example.com/e2e-shared churn |
    k --request-timeout=20s -n "$NAMESPACE" apply -f - >/dev/null 2>&1; then
    echo "created $1 $began" >>"$2"
  else
    echo "unapplied $1" >>"$2"
  fi
}

# churn_reap OUT: delete the churn pods that are Running (and not being deleted).
churn_reap() {
  local name phase deleting
  while read -r name phase deleting; do
    [[ $phase == Running && -z $deleting ]] || continue
    echo "running $name $EPOCHREALTIME" >>"$1"
    k --request-timeout=20s -n "$NAMESPACE" delete pod "$name" --wait=false >/dev/null 2>&1 &
  done < <(k --request-timeout=20s -n "$NAMESPACE" get pods -l genericdp-e2e=churn \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}' \
    2>/dev/null || true)
  wait
}

# churn_unseen OUT: the churn pods created but not seen Running.
churn_unseen() {
  awk '$1 == "created" { c[$2] = 1 } $1 == "running" { r[$2] = 1 }
    END { for (n in c) if (!(n in r)) print n }' "$1"
}

# churn_all_ran OUT: every churn pod created has been seen Running (those the
# loop did not see are looked at now); LAST_SEEN names the others.
churn_all_ran() {
  local name phase
  LAST_SEEN=""
  for name in $(churn_unseen "$1"); do
    phase=$(k -n "$NAMESPACE" get pod "$name" -o 'jsonpath={.status.phase}' 2>&1) || phase="unreadable: $phase"
    if [[ $phase == Running ]]; then
      echo "running $name $EPOCHREALTIME" >>"$1"
    else
      LAST_SEEN+="$name ${phase:-no phase}; "
    fi
  done
  [[ -z $LAST_SEEN ]]
}

churn_ran_since() {
  awk -v t="$2" -v n="$3" '$1 == "running" && $3 > t { c++ } END { exit !(c >= n) }' "$1"
}

# failed_prepares SINCE: the FailedPrepareDynamicResources events of any pod
# last seen at or after SINCE (RFC 3339, UTC), one a line.
failed_prepares() {
  k get events -A --field-selector reason=FailedPrepareDynamicResources \
    -o 'jsonpath={range .items[*]}{.lastTimestamp} {.involvedObject.namespace}/{.involvedObject.name}: {.message}{"\n"}{end}' |
    awk -v t="$1" '$1 >= t'
}

# node_state_held: the driver's checkpoint lists, prepared, exactly the claims
# allocated on the node that have consumers, and the CDI directory holds
# exactly their specs (dra-inspect.py held); LAST_SEEN says which or what differs.
node_state_held() {
  local claims
  claims=$(k get resourceclaims -A -o json) || return 1
  LAST_SEEN=$(python3 "$INSPECT" held "$KUBELET_ROOT/plugins/$DRIVER/checkpoint.json" "$CDI_DIR" \
    "$NODE" "$DRIVER" <<<"$claims" 2>&1)
}

# new_daemon_pod OLD: the DaemonSet's pod on the node that is not OLD.
new_daemon_pod() {
  k -n "$NAMESPACE" get pods -l "$DS_SELECTOR" --field-selector "spec.nodeName=$NODE" \
    -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' | grep -vxF "$1" | head -1
}

check_dra_rollout() {
  log "check: a rolling update of the DaemonSet (maxSurge 1) while a claim is held and pods with claims come and go"
  local dir=$ARTIFACTS/rollout since_iso class claim uid mine container old old_uid new new_uid
  local started rolled gone stop out names expected line both overlap calls said n unseen
  local sampler watch churner
  rm -rf "$dir"
  mkdir -p "$dir"
  ROLLOUT_PROBLEMS=()
  since_iso=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  wait_for 60 "a DeviceClass for every resource (the reconciler)" classes_made
  class=$(class_for example.com/e2e-dra)
  template_pod "$ROLLOUT_POD" example.com/e2e-dra
  k -n "$NAMESPACE" wait --for=condition=Ready "pod/$ROLLOUT_POD" --timeout=120s ||
    fail "pod $ROLLOUT_POD (a claim of class $class) did not become Ready"
  claim=$(pod_claim "$ROLLOUT_POD") || fail "pod $ROLLOUT_POD has no ResourceClaim"
  uid=$(claim_uid "$claim")
  mine=$(env_of "$ROLLOUT_POD" E2E_DRA_PATHS)
  [[ $mine == /dev/gdp-e2e-dra[01] ]] || fail "E2E_DRA_PATHS in pod $ROLLOUT_POD is '$mine'"
  container=$(container_id "$ROLLOUT_POD")
  rm -f "$MARKERS/cleanup-${mine#/dev/}" # an earlier check's unprepare of the same unit
  old=$(daemon_pod)
  old_uid=$(k -n "$NAMESPACE" get pod "$old" -o 'jsonpath={.metadata.uid}')
  log "  $ROLLOUT_POD holds claim $claim ($uid, $mine); genericdp pod $old ($old_uid)"

  sample_registry >"$dir/registry.txt" &
  sampler=$!
  (kubectl_exec get resourceslices --field-selector "spec.nodeName=$NODE,spec.driver=$DRIVER" \
    --watch --output-watch-events -o json) >"$dir/slices.watch" 2>"$dir/slices.watch.err" &
  watch=$!
  # The old pod's log, which goes with it.
  (kubectl_exec -n "$NAMESPACE" logs -f --timestamps "$old") >"$dir/old-pod.log" 2>&1 &
  BACKGROUND+=("$sampler" "$watch" $!)
  out=$dir/churn.txt stop=$dir/churn.stop
  : >"$out"
  churn "$out" "$stop" &
  churner=$!
  BACKGROUND+=("$churner")
  wait_for 30 "the slice watch to list the slices of $NODE" test -s "$dir/slices.watch"
  wait_for 60 "a first churn pod to run" churn_ran_since "$out" 0 1

  log "  kubectl rollout restart daemonset/genericdp"
  started=$(now)
  k -n "$NAMESPACE" rollout restart daemonset/genericdp
  k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
    problem "the rollout of daemonset/genericdp did not finish within 180 s"
  rolled=$(now)
  timing "DRA rollout: rollout restart -> rollout status done" "$(seconds_between "$started" "$rolled")"
  k -n "$NAMESPACE" wait --for=delete "pod/$old" --timeout=60s ||
    problem "the old genericdp pod $old was still there 60 s after the rollout"
  gone=$(now)
  new=$(new_daemon_pod "$old")
  [[ -n $new ]] || fail "no new genericdp pod on $NODE after the rollout"
  new_uid=$(k -n "$NAMESPACE" get pod "$new" -o 'jsonpath={.metadata.uid}')
  log "  new genericdp pod $new ($new_uid); the old one gone $(seconds_between "$started" "$gone") s after the restart"
  # The new pod alone serves the next few prepares and unprepares too.
  within 60 churn_ran_since "$out" "$gone" 3 ||
    problem "fewer than 3 churn pods ran within 60 s after the old genericdp pod left"
  touch "$stop"
  stop_job "$churner" wait
  if ! within 60 churn_all_ran "$out"; then
    unseen=$(churn_unseen "$out" | head -1)
    problem "churn pods that never ran: $LAST_SEEN ($unseen's events: $(k -n "$NAMESPACE" get events \
      --field-selector "involvedObject.name=$unseen" -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' |
      tail -3 | tr '\n' ';'))"
  fi
  n=$(grep -c '^created ' "$out" || true)
  log "  churn: $n pods created, $(awk '$1 == "running" { r[$2] = 1 } END { print length(r) }' "$out") seen Running, $(grep -c '^unapplied ' "$out" || true) not applied"
  grep -q '^unapplied ' "$out" && problem "the API server refused churn pods: $(grep '^unapplied ' "$out" | tr '\n' ' ')"
  timing "DRA rollout: churn pod created -> seen Running, the slowest" "$(awk '
    $1 == "created" { c[$2] = $3 } $1 == "running" && !($2 in r) { r[$2] = $3 }
    END { for (n in r) if (n in c && r[n] - c[n] > m) m = r[n] - c[n]; printf "%.2f", m }' "$out")"

  log "check: two registration sockets, the old pod's and the new one's, exist at once"
  stop_job "$sampler"
  log "  $REGISTRY_DIR over time: $(tr '\n' ';' <"$dir/registry.txt" | cut -c1-600)"
  expected=$(k -n "$NAMESPACE" exec "$new" -- python3 -c '
import sys
from pathlib import Path
from genericdp.kubeletplugin.socketnames import registration_socket
print(" ".join(sorted(registration_socket(Path(sys.argv[1]), sys.argv[2], uid).name for uid in sys.argv[3:])))
' "$REGISTRY_DIR" "$DRIVER" "$old_uid" "$new_uid") || fail "could not compute the socket names in $new"
  both=$(awk 'NF >= 3 { print; exit }' "$dir/registry.txt")
  overlap=none
  if [[ -z $both ]]; then
    problem "never two registration sockets of $DRIVER at once in $REGISTRY_DIR"
  else
    names=$(cut -d' ' -f2- <<<"$both" | tr ' ' '\n' | sort | tr '\n' ' ')
    [[ $names == "$expected " ]] ||
      problem "the registration sockets at once are '$names', not the old and the new pod's ($expected)"
    overlap=$(awk -v t="${both%% *}" '$1 > t && NF < 3 { printf "%.2f", $1 - t; found = 1; exit }
      END { if (!found) print "none" }' "$dir/registry.txt")
    if [[ $overlap == none ]]; then
      problem "the old pod's registration socket stayed after the rollout"
    else
      timing "DRA rollout: both registration sockets there (the overlap)" "$overlap"
    fi
  fi
  said=$(grep -F '"msg":"Registered DRA plugin"' "$LOG_DIR/kubelet.log" | grep -F "dra-$new_uid.sock" |
    grep -oE '"numPlugins":[0-9]+' | head -1 || true)
  log "  the kubelet registered the new pod's socket with ${said:-no numPlugins}"

  log "check: the new pod serves claims at once and takes over the slices once the old one is gone"
  k -n "$NAMESPACE" logs "$new" >"$dir/new-pod.log" 2>&1 || true
  grep -F "holds $KUBELET_ROOT/plugins/$DRIVER/lock: waiting for it to exit before publishing" \
    "$dir/new-pod.log" >/dev/null ||
    problem "the new pod $new did not log that it waits for the old one before publishing the slices"
  said=$(grep -F ': taking over' "$dir/new-pod.log" | head -1 || true)
  if [[ -z $said ]]; then
    problem "the new pod $new did not log 'taking over' (the slice lock)"
  else
    log "  $new: ${said:0:300}"
    timing "DRA rollout: the new pod waited for the slice lock (its log)" \
      "$(grep -oE 'after [0-9.]+s: taking over' <<<"$said" | grep -oE '[0-9.]+' | head -1)"
  fi
  calls=$(python3 "$INSPECT" calls "$LOG_DIR/kubelet.log" "$DRIVER" "$started" "$(now)") ||
    fail "could not read the kubelet's calls: $calls"
  printf '%s\n' "$calls" >"$dir/calls.txt"
  for line in "dra-$old_uid.sock old" "dra-$new_uid.sock new"; do
    log "  calls answered by the ${line#* } pod: $(awk -v s="${line% *}" '$3 == s { c[$1 " " $4]++ }
      END { for (k in c) printf "%s %d, ", k, c[k] }' <<<"$calls")"
  done
  if [[ $overlap != none ]]; then
    log "  calls the new pod answered while both were registered: $(awk -v s="dra-$new_uid.sock" \
      -v a="${both%% *}" -v b="$(awk -v a="${both%% *}" -v o="$overlap" 'BEGIN { printf "%.3f", a + o }')" \
      '$3 == s && $5 > a && $5 < b { c++ } END { print c + 0 }' <<<"$calls")"
  fi
  said=$(awk '$4 != "ok"' <<<"$calls")
  [[ -z $said ]] || problem "calls of the kubelet failed during the rollout: $(tr '\n' ';' <<<"$said")"
  if grep -q '^Prepare ' <<<"$calls"; then
    timing "DRA rollout: NodePrepareResources during it, median (kubelet)" \
      "$(awk '$1 == "Prepare" { print $2 }' <<<"$calls" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
    timing "DRA rollout: NodePrepareResources during it, slowest (kubelet)" \
      "$(awk '$1 == "Prepare" { print $2 }' <<<"$calls" | sort -n | tail -1)"
  else
    problem "the kubelet made no NodePrepareResources call during the rollout"
  fi

  log "check: no FailedPrepareDynamicResources event"
  said=$(failed_prepares "$since_iso") || fail "could not list the events"
  [[ -z $said ]] || problem "FailedPrepareDynamicResources events: $(tr '\n' ';' <<<"$said" | cut -c1-800)"

  log "check: afterwards the checkpoint lists exactly the node's held claims, and $CDI_DIR holds exactly their specs"
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=churn --wait=true --timeout=60s >/dev/null ||
    problem "the churn pods did not go away within 60 s"
  if within 60 node_state_held; then
    log "  held: $(tr '\n' ';' <<<"$LAST_SEEN")"
  else
    problem "the checkpoint and the claim specs differ from the node's held claims: $LAST_SEEN"
  fi
  [[ $(container_id "$ROLLOUT_POD") == "$container" ]] ||
    problem "pod $ROLLOUT_POD's container changed during the rollout ($container -> $(container_id "$ROLLOUT_POD"))"
  said=$(pod_in "$ROLLOUT_POD" sh -c "exec 3<>$mine" 2>&1 || true)
  [[ $said != *"Operation not permitted"* ]] || problem "pod $ROLLOUT_POD can no longer open $mine: $said"

  log "check: deleting $ROLLOUT_POD makes the new pod unprepare its claim: cleanup hook, spec removed"
  started=$(now)
  k -n "$NAMESPACE" delete pod "$ROLLOUT_POD" --wait=false
  if within 60 test -e "$MARKERS/cleanup-${mine#/dev/}"; then
    timing "DRA rollout: held pod deleted -> cleanup hook ran (new pod)" "$(seconds_between "$started" "$(now)")"
  else
    problem "the cleanup hook of example.com/e2e-dra left no $MARKERS/cleanup-${mine#/dev/} within 60 s"
  fi
  within 30 test ! -e "$CDI_DIR/gdp-claim-${DRIVER}_$uid.json" ||
    problem "$CDI_DIR/gdp-claim-${DRIVER}_$uid.json is still there 30 s after the pod was deleted"
  within 30 daemon_log_has "$new" "unprepared claim $NAMESPACE/$claim (UID $uid)" ||
    problem "the new pod $new did not log 'unprepared claim $NAMESPACE/$claim (UID $uid)'"
  grep -F '"msg":"Done calling NodeUnprepareResources rpc"' "$LOG_DIR/kubelet.log" | grep -F "$uid" |
    grep -F "dra-$new_uid.sock" >/dev/null ||
    problem "the kubelet did not send the NodeUnprepareResources of claim $uid to the new pod (dra-$new_uid.sock)"

  log "check: no ResourceSlice of $NODE deleted, the kubelet's 30 s after the old pod's connection dropped included"
  n=$(awk -v g="$gone" -v n="$(now)" 'BEGIN { d = g + 35 - n; print (d > 0 ? int(d) + 1 : 1) }')
  hold_for "$n" "every device in the slices after the old pod left" slices_complete
  stop_job "$watch"
  said=$(python3 "$INSPECT" watch-events <"$dir/slices.watch" 2>&1) ||
    problem "could not read the slice watch ($dir/slices.watch): $said"
  log "  slice events: $(awk '{ c[$1]++ } END { for (t in c) printf "%s %d ", t, c[t] }' <<<"$said")"
  grep '^DELETED ' <<<"$said" >/dev/null &&
    problem "ResourceSlices deleted during the rollout: $(grep '^DELETED ' <<<"$said" | tr '\n' ' ')"
  [[ ! -s $dir/slices.watch.err ]] || log "  the slice watch said: $(tr '\n' ' ' <"$dir/slices.watch.err")"
  stop_background
  if ((${#ROLLOUT_PROBLEMS[@]})); then
    fail "the rolling update: $(printf '%s; ' "${ROLLOUT_PROBLEMS[@]}")"
  fi
}

finish() {
  local status=$?
  trap - EXIT
  stop_background
  # genericdp's log outlives its pod (the kubelet's and the others' are in $LOG_DIR).
  k -n "$NAMESPACE" logs -l "$DS_SELECTOR" --tail=-1 --timestamps >"$LOG_DIR/genericdp-dra.log" 2>&1 || true
  "$LOCAL_DIR/down.sh" || status=1
  exit "$status"
}

ALL_DRA_CHECKS=(dra_registered dra_slices dra_deviceclasses dra_deviceclasses_more dra_claim_pod dra_metadata dra_limits_pod dra_unprepare
  dra_hotplug dra_health dra_health_message dra_standard_attributes dra_nonroot
  dra_rollout dra_slice_restored dra_kubelet_restart)

trap finish EXIT
started=$(now)
"$LOCAL_DIR/containerd-cdi.sh" "$CDI_CONTAINERD"
CONTAINERD_BIN_DIR=$CDI_CONTAINERD CDI=1 "$LOCAL_DIR/up.sh" "$images"

log "preparing $NODE: /dev/gdp-e2e-dev{0,1} and /dev/gdp-e2e-dra{0,1} (c 10:229, c 10:237), /dev/gdp-e2e-ctl (c 10:238), /dev/gdp-e2e-shared (c 1:5), /dev/gdp-e2e-nr0 (c 1:3), /var/lib/genericdp-e2e"
# The device-plugin round's nodes (e2e/deploy.sh), and e2e-dra's.
rm -f /dev/gdp-e2e-*
mknod -m 0600 /dev/gdp-e2e-dev0 c 10 229
mknod -m 0600 /dev/gdp-e2e-dev1 c 10 237
mknod -m 0600 /dev/gdp-e2e-ctl c 10 238
mknod -m 0666 /dev/gdp-e2e-shared c 1 5
mknod -m 0600 /dev/gdp-e2e-dra0 c 10 229
mknod -m 0600 /dev/gdp-e2e-dra1 c 10 237
mknod -m 0600 /dev/gdp-e2e-nr0 c 1 3
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
