#!/usr/bin/env bash
# The DRA round on the kind fleet, installed with the chart from the run's
# registry (helm install oci://...), two workers with the same fake devices:
#   - both served by the device plugin (release genericdp), a consumer
#     Deployment (limits example.com/kdra: 1) Running on each;
#   - the move of docs/dra.md on worker A only: the DRA release beside it
#     (genericdp-dra, nodeSelector genericdp.io/backend=dra, the DeviceClass
#     reconciler), the device plugin's affinity, then the page's commands as
#     written (tests/docs_commands.py move: drain, label, allocatable, uncordon,
#     slices); A's consumer comes back with a DRA claim, B's keeps its pod and
#     its device-plugin device all along, B has no slice and A no allocatable;
#   - on A: one pool of slices per node, classes with extendedResourceName
#     (the reconciler, its Lease held), a claim from a template with its
#     device and env through CDI, a pod the DRA node cannot serve placed on B
#     by the device plugin, sharing (count: 2 and unbounded, allowMultipleAllocations),
#     a held device unplugged (tainted, Unhealthy, cleanup once when freed);
#   - A lost (docker stop): its slices and its pod's claim stay, the pod
#     evicted but not gone, until the node's out-of-service taint has the
#     pod deleted (the claim goes) and the slices deleted, as docs/dra.md says.
# Worker B, stopped by lost-worker.sh, is started again first. Both releases
# are uninstalled at the end.
#   e2e/kind/dra.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" kind
# shellcheck source-path=SCRIPTDIR source=../dra-lib.sh
source "$E2E_ROOT/dra-lib.sh"
VERSION=$(awk -F'"' '/^appVersion:/ { print $2 }' "$REPO_ROOT/deploy/helm/genericdp/Chart.yaml")
A=$CLUSTER-worker
B=$CLUSTER-worker2
NODE=$A
NAMESPACE=kube-system
CONSUMER_IMAGE=$REGISTRY/genericdp:$VERSION
CHART=oci://$REGISTRY/charts/genericdp
DP=genericdp
DRA=genericdp-dra
RECONCILER_SELECTOR=app.kubernetes.io/name=genericdp-deviceclasses,app.kubernetes.io/instance=$DRA
CLASS_LEASE=genericdp-deviceclasses-$DRIVER
BACKEND_LABEL=genericdp.io/backend
OUT_OF_SERVICE=node.kubernetes.io/out-of-service=nodeshutdown:NoExecute
work=$ARTIFACTS/dra
mkdir -p "$work"
cat >"$work/config.yaml" <<'YAML'
version: v1
resources:
  # Two units a worker; the env reaches the container through the device
  # plugin's Allocate or DRA's CDI spec alike.
  - name: example.com/kdra
    match: [{glob: /dev/gdp-kdra*}]
    allocate:
      env:
        KDRA: "{{ devices | map(attribute='path') | join(',') }}"
    hooks:
      cleanup: {exec: [/bin/true], timeout: 5s}
  # One unit two claims share.
  - name: example.com/kshare
    match: [{glob: /dev/gdp-kshare*}]
    count: 2
    hooks:
      cleanup: {exec: [/bin/true], timeout: 5s}
  # One unit any number of claims share.
  - name: example.com/kunb
    match: [{glob: /dev/gdp-kunb*}]
    count: unbounded
YAML

# on_node NODE COMMAND...: as root in the node's container.
on_node() {
  local node=$1
  shift
  docker exec "$node" "$@"
}

# revive: start the node containers a previous phase stopped, and give them
# their pod routes again (cni.sh).
revive() {
  local node started revived=()
  for node in $(kind get nodes --name "$CLUSTER"); do
    [[ $(docker inspect -f '{{.State.Running}}' "$node") == true ]] && continue
    docker start "$node" >/dev/null
    revived+=("$node")
  done
  ((${#revived[@]})) || return 0
  log "started again: ${revived[*]}"
  started=$(now)
  wait_for 180 "every node Ready" k wait --for=condition=Ready nodes --all --timeout=5s
  if [[ $KIND_SOURCE == local ]]; then
    "$E2E_DIR/cni.sh"
  fi
  timing "DRA: stopped worker started again -> Ready" "$(seconds_between "$started" "$(now)")"
}

helm_chart() {
  inns helm "$1" "$2" "$CHART" --version "$VERSION" -n kube-system \
    --set image.repository="$REGISTRY/genericdp" --set-file configYaml="$work/config.yaml" "${@:3}"
}

# consumer NAME NODE: a Deployment of one pod on NODE with limits
# example.com/kdra: 1, tolerating an unreachable node for 5 s (lost below).
consumer() {
  k -n "$NAMESPACE" apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1}
spec:
  replicas: 1
  selector: {matchLabels: {genericdp-e2e: $1}}
  template:
    metadata: {labels: {genericdp-e2e: $1}}
    spec:
      nodeSelector: {kubernetes.io/hostname: $2}
      terminationGracePeriodSeconds: 1
      tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      containers:
        - name: c
          image: $CONSUMER_IMAGE
          command: [sleep, "3600"]
          resources: {limits: {example.com/kdra: 1}}
YAML
}

# ready_pod GROUP: the one Ready pod labelled genericdp-e2e=GROUP, not being deleted.
ready_pod() {
  local name deleting
  while read -r name deleting; do
    if [[ -z $deleting ]] && pod_ready "$name"; then
      echo "$name"
      return 0
    fi
  done < <(k -n "$NAMESPACE" get pods -l "genericdp-e2e=$1" \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}')
  return 1
}

# has NODE RESOURCE N: the node's allocatable RESOURCE is N (lib.sh's quantity_is).
has() {
  NODE=$1 quantity_is allocatable "$2" "$3"
}

# serves_kdra POD NODE: the pod runs on NODE and its container has the one
# device its KDRA names (the device plugin's Allocate or DRA's CDI spec).
serves_kdra() {
  local dev
  expect "the node of pod $1" "$2" "$(k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.spec.nodeName}')"
  dev=$(env_of "$1" KDRA)
  [[ $dev == /dev/gdp-kdra[01] ]] || fail "KDRA in pod $1 is '$dev', not one of /dev/gdp-kdra0, /dev/gdp-kdra1"
  pod_in "$1" test -c "$dev" || fail "pod $1 has no character device $dev"
  echo "$dev"
}

dra_pod_on() {
  k -n "$NAMESPACE" get pods -l "app.kubernetes.io/instance=$DRA,app.kubernetes.io/component=device-plugin" \
    --field-selector "spec.nodeName=$1" -o 'jsonpath={.items[0].metadata.name}'
}

# hook_runs RESOURCE: how many cleanup hooks of RESOURCE A's DRA pod logged.
hook_runs() {
  k -n "$NAMESPACE" logs "$(dra_pod_on "$A")" | grep -cF "cleanup hook for $1 " || true
}

hook_runs_are() {
  LAST_SEEN="$(hook_runs "$1") cleanups of $1"
  [[ $LAST_SEEN == "$2 cleanups of $1" ]]
}

# taints_are RESOURCE EFFECT: the one device of RESOURCE in A's slices has
# the unhealthy taint with EFFECT ("-": no taint).
taints_are() {
  LAST_SEEN=$(slices_json | python3 "$INSPECT" taints "$1") || return 1
  if [[ $2 == - ]]; then
    [[ $LAST_SEEN != *"$DRIVER/unhealthy="* ]]
  else
    [[ $LAST_SEEN == *"$DRIVER/unhealthy="*":$2"* ]]
  fi
}

setup() {
  revive
  local node dev
  for node in "$A" "$B"; do
    on_node "$node" sh -c "rm -f /dev/gdp-kdra* /dev/gdp-kshare* /dev/gdp-kunb*"
    for dev in kdra0 kdra1 kshare0 kunb0; do
      on_node "$node" mknod -m 0666 "/dev/gdp-$dev" c 1 3
    done
  done
  log "the device plugin on every node (release $DP), a consumer on each worker"
  helm_chart install "$DP" >/dev/null
  k -n "$NAMESPACE" rollout status "daemonset/$DP" --timeout=180s
  wait_for 90 "$A advertising 2 example.com/kdra" has "$A" example.com/kdra 2
  wait_for 90 "$B advertising 2 example.com/kdra" has "$B" example.com/kdra 2
  consumer kdra-a "$A"
  consumer kdra-b "$B"
  wait_for 120 "the consumer on $A Ready" ready_pod kdra-a
  wait_for 120 "the consumer on $B Ready" ready_pod kdra-b
}

# run_move_commands: docs/dra.md's move commands (tests/docs_commands.py
# move), in the page's order, NODE swapped for A. The allocatable one is
# asked until it reads 0 for the resources, as step 5 says before uncordon;
# the slices' listing until it lists A's.
run_move_commands() {
  local where text out started ran=0
  while IFS=$'\t' read -r where text; do
    log "docs ($where): $text"
    started=$(now)
    if [[ $text == *"{.status.allocatable}"* ]]; then
      wait_for 90 "$where: '$text' to read 0 for the resources" allocatable_zero "$text"
      log "  $LAST_SEEN"
    elif [[ $text == *" get resourceslices "* ]]; then
      wait_for 60 "$where: '$text' to list the slices of $A" lists_slices "$text"
      printf '%s\n' "$LAST_SEEN" | sed 's/^/  /' >&2
    else
      out=$(cd "$REPO_ROOT" && inns bash -euo pipefail -c "$text" 2>&1) ||
        fail "the documented command failed on kind ($where): $text: $out"
      printf '%s\n' "$out" | sed 's/^/  /' >&2
    fi
    timing "DRA move, docs: ${text:0:48}" "$(seconds_between "$started" "$(now)")"
    ran=$((ran + 1))
  done < <(python3 "$REPO_ROOT/tests/docs_commands.py" move "$A")
  ((ran >= 4)) || fail "docs/dra.md has $ran move commands (tests/docs_commands.py move), not drain, label, allocatable, uncordon"
}

lists_slices() {
  LAST_SEEN=$(cd "$REPO_ROOT" && inns bash -euo pipefail -c "$1") || return 1
  [[ $(awk -v node="$A" '$2 == node' <<<"$LAST_SEEN" | grep -c .) == 3 ]]
}

allocatable_zero() {
  LAST_SEEN=$(cd "$REPO_ROOT" && inns bash -euo pipefail -c "$1") || return 1
  python3 -c '
import json, sys
got = json.loads(sys.argv[1])
sys.exit(any(got.get(r, "0") != "0" for r in ("example.com/kdra", "example.com/kshare", "example.com/kunb")))
' "$LAST_SEEN"
}

check_move() {
  log "check: docs/dra.md's move on $A while $B keeps serving through the device plugin"
  local started move_started pod_b dev_b pod_a dev_a claim
  pod_b=$(ready_pod kdra-b)
  dev_b=$(serves_kdra "$pod_b" "$B")

  log "move, step 1: release $DRA (backend dra, nodeSelector $BACKEND_LABEL=dra) beside $DP"
  move_started=$(now)
  helm_chart install "$DRA" --set backend=dra --set-string "nodeSelector.genericdp\.io/backend=dra" >/dev/null
  k -n "$NAMESPACE" rollout status "deployment/$DRA-deviceclasses" --timeout=120s
  wait_for 60 "a DeviceClass for every resource" classes_made
  timing "DRA move 1: release installed -> every DeviceClass made" "$(seconds_between "$move_started" "$(now)")"
  expect "the desired pods of DaemonSet $DRA (no node labelled)" 0 \
    "$(k -n "$NAMESPACE" get daemonset "$DRA" -o 'jsonpath={.status.desiredNumberScheduled}')"

  log "move, step 2: release $DP gets the affinity $BACKEND_LABEL NotIn [dra]"
  started=$(now)
  helm_chart upgrade "$DP" --set-json \
    "affinity={\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"$BACKEND_LABEL\",\"operator\":\"NotIn\",\"values\":[\"dra\"]}]}]}}}" >/dev/null
  k -n "$NAMESPACE" rollout status "daemonset/$DP" --timeout=180s
  wait_for 60 "$A advertising 2 example.com/kdra again" has "$A" example.com/kdra 2
  timing "DRA move 2: affinity -> the device plugin rolled" "$(seconds_between "$started" "$(now)")"
  expect "the consumer on $B after the roll" "$pod_b" "$(ready_pod kdra-b)"

  log "move, steps 3 to 5: docs/dra.md's commands on $A"
  run_move_commands
  wait_for 120 "the consumer on $A back, Ready" ready_pod kdra-a
  timing "DRA move: steps 1 to 5, the consumer on $A Ready with a DRA device" "$(seconds_between "$move_started" "$(now)")"
  pod_a=$(ready_pod kdra-a)
  claim=$(pod_claim "$pod_a") || fail "pod $pod_a on $A has no claim: its limits did not go to DRA"
  expect "the driver of claim $claim" "$DRIVER" \
    "$(k -n "$NAMESPACE" get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[*].driver}')"
  dev_a=$(serves_kdra "$pod_a" "$A")
  log "  $A: pod $pod_a holds $dev_a through DRA (claim $claim)"

  expect "the consumer on $B after the move" "$pod_b" "$(ready_pod kdra-b)"
  expect "KDRA in pod $pod_b after the move" "$dev_b" "$(serves_kdra "$pod_b" "$B")"
  [[ -z $(pod_claim "$pod_b") ]] || fail "pod $pod_b on $B has a claim; the device plugin serves it"
  has "$B" example.com/kdra 2 || fail "$B advertises $LAST_SEEN example.com/kdra, not the device plugin's 2"
  has "$A" example.com/kdra 0 || fail "$A still advertises $LAST_SEEN example.com/kdra"
  [[ -z $(k get resourceslices --field-selector "spec.nodeName=$B" -o name) ]] ||
    fail "$B, served by the device plugin, has ResourceSlices"
  log "  $B: pod $pod_b kept $dev_b through the device plugin, allocatable 2, no slice"
}

classes_made() {
  [[ -n $(class_for example.com/kdra) && -n $(class_for example.com/kshare) && -n $(class_for example.com/kunb) ]]
}

check_slices_and_classes() {
  log "check: one pool of slices for $A, none for $B or the control plane; the reconciler's classes"
  local summary r class
  wait_for 30 "2 devices of example.com/kdra in the slices of $A" devices_are example.com/kdra 2 2
  wait_for 30 "1 device of example.com/kshare in the slices of $A" devices_are example.com/kshare 1 1
  wait_for 30 "1 device of example.com/kunb in the slices of $A" devices_are example.com/kunb 1 1
  summary=$(slices_json | python3 "$INSPECT" pool "$A" "$DRIVER" 2>&1) ||
    fail "the slices of $A do not form one pool: $summary"
  log "  $A: slices, devices, generation: $summary"
  expect "the nodes with slices of $DRIVER" "$A" \
    "$(k get resourceslices -o jsonpath='{range .items[*]}{.spec.driver} {.spec.nodeName}{"\n"}{end}' |
      awk -v d="$DRIVER" '$1 == d { print $2 }' | sort -u | xargs)"
  # DRAConsumableCapacity: the API server keeps the sharing fields.
  expect "the devices of $A with allowMultipleAllocations (is DRAConsumableCapacity on?)" "kshare kunb" \
    "$(slices_json | python3 -c '
import json, sys
for s in json.load(sys.stdin)["items"]:
    for d in s["spec"].get("devices", []):
        if d.get("allowMultipleAllocations"):
            print(d["name"].split("-")[0])
' | sort | xargs)"
  for r in example.com/kdra example.com/kshare example.com/kunb; do
    class=$(class_for "$r")
    expect "the labels of DeviceClass $class" "genericdp $DRIVER" \
      "$(k get deviceclass "$class" -o 'jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by} {.metadata.labels.genericdp\.io/driver}')"
    log "  DeviceClass $class: extendedResourceName $r"
  done

  log "check: the running reconciler pod holds its Lease; a class deleted by hand is made again"
  local pod started
  pod=$(reconciler_pod)
  [[ -n $pod ]] || fail "no running reconciler pod ($RECONCILER_SELECTOR)"
  wait_for 30 "Lease $CLASS_LEASE held by $pod" lease_held_by "$pod"
  log "  Lease $CLASS_LEASE: $LAST_SEEN"
  class=$(class_for example.com/kshare)
  started=$(now)
  k delete deviceclass "$class" >/dev/null
  wait_for 30 "the reconciler to make DeviceClass $class again" k get deviceclass "$class"
  timing "DRA reconciler: a class deleted -> made again" "$(seconds_between "$started" "$(now)")"
}

# claim_pod NAME CLASS: a ResourceClaimTemplate NAME of one device of CLASS
# and a pod NAME on A with a claim from it; applied.
claim_pod() {
  k -n "$NAMESPACE" apply -f - >/dev/null <<YAML
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: $1}
spec:
  spec:
    devices:
      requests:
        - {name: dev, exactly: {deviceClassName: $2}}
---
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {genericdp-e2e: $1}}
spec:
  nodeSelector: {kubernetes.io/hostname: $A}
  terminationGracePeriodSeconds: 1
  resourceClaims:
    - {name: dev, resourceClaimTemplateName: $1}
  containers:
    - name: c
      image: $CONSUMER_IMAGE
      command: [sleep, "3600"]
      resources: {claims: [{name: dev}]}
YAML
}

# limits_pod_on NAME RESOURCE GROUP [NODE]: a pod with limits RESOURCE: 1,
# labelled genericdp-e2e=GROUP, on NODE when given.
limits_pod_on() {
  device_pod_manifest "$1" "$2" "$3" | sed "s/imagePullPolicy: Never/imagePullPolicy: IfNotPresent/" |
    if [[ -n ${4:-} ]]; then sed "s/^spec:\$/spec:\n  nodeSelector: {kubernetes.io\/hostname: $4}/"; else cat; fi |
    k -n "$NAMESPACE" apply -f - >/dev/null
}

check_claims_and_unplug() {
  log "check: a claim from a template gets A's other kdra device, its env and node through CDI"
  local started dev claim where
  claim_pod kdra-claim "$(class_for example.com/kdra)"
  k -n "$NAMESPACE" wait --for=condition=Ready pod/kdra-claim --timeout=120s >/dev/null ||
    fail "pod kdra-claim (a claim of $(class_for example.com/kdra)) did not become Ready"
  dev=$(serves_kdra kdra-claim "$A")
  [[ $dev != "$(env_of "$(ready_pod kdra-a)" KDRA)" ]] || fail "kdra-claim got $dev, which kdra-a holds"
  claim=$(pod_claim kdra-claim)
  log "  kdra-claim: claim $claim, $dev"

  log "check: with A's kdra devices held, a pod with limits example.com/kdra: 1 goes to $B, through the device plugin"
  limits_pod_on kdra-more example.com/kdra kdra-more
  k -n "$NAMESPACE" wait --for=condition=Ready pod/kdra-more --timeout=120s >/dev/null ||
    fail "pod kdra-more did not become Ready"
  where=$(k -n "$NAMESPACE" get pod kdra-more -o 'jsonpath={.spec.nodeName}')
  expect "the node of pod kdra-more" "$B" "$where"
  [[ -z $(pod_claim kdra-more) ]] || fail "pod kdra-more on $B has a claim; the device plugin serves it"
  k -n "$NAMESPACE" delete pod kdra-more --wait=false >/dev/null

  log "check: the device node of kdra-claim's device removed: the device stays, tainted and Unhealthy, until the pod goes"
  started=$(now)
  on_node "$A" rm "$dev"
  LAST_SEEN=""
  wait_for 20 "the held device of example.com/kdra unhealthy and tainted NoSchedule in A's slices" \
    kdra_unplugged
  timing "DRA unplug in use: node removed -> tainted in the slice" "$(seconds_between "$started" "$(now)")"
  log "  $LAST_SEEN"
  LAST_SEEN=""
  wait_for 60 "pod kdra-claim's allocatedResourcesStatus to say Unhealthy: device nodes gone: $dev" \
    pod_resource_status_is kdra-claim Unhealthy "device nodes gone: $dev"
  log "  kdra-claim: $LAST_SEEN"
  timing "DRA unplug in use: node removed -> Unhealthy in the pod's status" "$(seconds_between "$started" "$(now)")"
  hold_for 3 "the unplugged device in the slice, tainted, while the pod holds it" kdra_unplugged
  local before
  before=$(hook_runs example.com/kdra)
  started=$(now)
  k -n "$NAMESPACE" delete pod kdra-claim --wait=false >/dev/null
  wait_for 60 "the unplugged device to leave A's slices once its claim is unprepared" devices_are example.com/kdra 1 1
  timing "DRA unplug in use: pod deleted -> device gone from the slice" "$(seconds_between "$started" "$(now)")"
  wait_for 30 "its cleanup hook to run once" hook_runs_are example.com/kdra $((before + 1))
  wait_for 30 "claim $claim deleted with its pod" claim_gone "$claim"
  started=$(now)
  on_node "$A" mknod -m 0666 "$dev" c 1 3
  wait_for 30 "the device back, healthy and untainted" kdra_replugged
  timing "DRA unplug: node made again -> healthy, untainted in the slice" "$(seconds_between "$started" "$(now)")"
  k -n "$NAMESPACE" delete resourceclaimtemplate kdra-claim >/dev/null
}

kdra_unplugged() {
  devices_are example.com/kdra 2 1 || return 1
  taints_are example.com/kdra NoSchedule
}

kdra_replugged() {
  devices_are example.com/kdra 2 2 || return 1
  taints_are example.com/kdra -
}

check_sharing() {
  log "check: count: 2 shares A's one kshare device between 2 claims: of 3 pods, 2 run, 1 waits"
  local n started ids pending said running before
  before=$(hook_runs example.com/kshare)
  started=$(now)
  for ((n = 0; n < 3; n++)); do
    limits_pod_on "kshare-$n" example.com/kshare kshare "$A"
  done
  LAST_SEEN=""
  wait_for 120 "2 pods of example.com/kshare Running and 1 Pending" phases_are kshare "Pending Running Running "
  timing "DRA sharing: 3 pods of a count: 2 unit -> 2 Running" "$(seconds_between "$started" "$(now)")"
  pending=$(k -n "$NAMESPACE" get pods -l genericdp-e2e=kshare --field-selector status.phase=Pending \
    -o 'jsonpath={.items[0].metadata.name}')
  said=$(k -n "$NAMESPACE" get pod "$pending" -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}')
  [[ $said == *"cannot allocate all claims"* ]] ||
    fail "the Pending $pending should wait for a share (cannot allocate all claims); the scheduler says: '$said'"
  ids=$(share_ids kshare) || fail "could not read the shareIDs of the claims of example.com/kshare"
  [[ $(sort -u <<<"$ids" | grep -c .) == 2 ]] || fail "the 2 Running claims should have 2 distinct shareIDs: $(xargs <<<"$ids")"
  log "  $pending: $said; shareIDs $(xargs <<<"$ids")"
  running=$(k -n "$NAMESPACE" get pods -l genericdp-e2e=kshare --field-selector status.phase=Running \
    -o 'jsonpath={.items[0].metadata.name}')
  started=$(now)
  k -n "$NAMESPACE" delete pod "$running" --wait=true >/dev/null
  wait_for 120 "the Pending pod to run on the freed share" phases_are kshare "Running Running "
  timing "DRA sharing: a pod deleted -> the Pending one Running" "$(seconds_between "$started" "$(now)")"
  hook_runs_are example.com/kshare "$before" || fail "kshare's cleanup ran while a claim held it ($LAST_SEEN)"
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=kshare --wait=true >/dev/null
  wait_for 60 "kshare's cleanup hook to run after the last pod" hook_runs_are example.com/kshare $((before + 1))
  hold_for 3 "one cleanup of example.com/kshare" hook_runs_are example.com/kshare $((before + 1))

  log "check: count: unbounded: 3 pods share A's one kunb device, all Running"
  started=$(now)
  for ((n = 0; n < 3; n++)); do
    limits_pod_on "kunb-$n" example.com/kunb kunb "$A"
  done
  wait_for 120 "3 pods of example.com/kunb Running" phases_are kunb "Running Running Running "
  timing "DRA sharing: 3 pods of a count: unbounded unit -> all Running" "$(seconds_between "$started" "$(now)")"
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=kunb --wait=false >/dev/null
}

check_lost_worker() {
  log "check: $A, serving through DRA, lost (docker stop): what becomes of its slices, claims and pods"
  local pod claim dra_pod started slices
  pod=$(ready_pod kdra-a)
  claim=$(pod_claim "$pod")
  dra_pod=$(dra_pod_on "$A")
  slices=$(k get resourceslices --field-selector "spec.nodeName=$A" -o name | sort | xargs)
  started=$(now)
  docker stop "$A" >/dev/null
  wait_for 150 "$A NotReady (Ready=Unknown)" node_ready_is "$A" Unknown
  timing "DRA lost worker: docker stop -> Ready=Unknown" "$(seconds_between "$started" "$(now)")"
  wait_for 90 "pod $pod evicted (deletion requested)" pod_deleting "$pod"
  timing "DRA lost worker: docker stop -> its pod evicted" "$(seconds_between "$started" "$(now)")"
  # No kubelet confirms the stop: the pod stays, its claim stays allocated
  # and reserved for it, the node's slices stay as they were.
  hold_for 10 "pod $pod Terminating, claim $claim reserved for it, $A's slices unchanged" \
    lost_state_kept "$pod" "$claim" "$slices"
  k -n "$NAMESPACE" get pod "$dra_pod" -o 'jsonpath={.metadata.deletionTimestamp}' | grep -q . &&
    fail "the DRA pod on the lost node was evicted; a DaemonSet's pods tolerate unreachable nodes"
  expect "the phase of the consumer's replacement (nodeSelector $A)" Pending \
    "$(k -n "$NAMESPACE" get pods -l genericdp-e2e=kdra-a \
      -o 'jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.status.phase}{"\n"}{end}' | awk -F'|' '$1 == "" { print $2 }')"
  serves_kdra "$(ready_pod kdra-b)" "$B" >/dev/null
  log "  $A lost: pod $pod Terminating, claim $claim allocated and reserved, slices kept: $slices; $B still serves"

  log "check: $A tainted out-of-service (docs/dra.md): its pods are deleted, their claims go; its slices stay until deleted"
  started=$(now)
  k taint node "$A" "$OUT_OF_SERVICE" >/dev/null
  wait_for 120 "pod $pod deleted (the pod garbage collector: out-of-service node)" pod_gone "$pod"
  timing "DRA lost worker: out-of-service taint -> its pod deleted" "$(seconds_between "$started" "$(now)")"
  wait_for 60 "claim $claim deleted" claim_gone "$claim"
  timing "DRA lost worker: out-of-service taint -> its claim deleted" "$(seconds_between "$started" "$(now)")"
  expect "the slices of the lost $A after its pod went" "$slices" \
    "$(k get resourceslices --field-selector "spec.nodeName=$A" -o name | sort | xargs)"
  k delete resourceslices --field-selector "spec.nodeName=$A,spec.driver=$DRIVER" >/dev/null
  [[ -z $(k get resourceslices --field-selector "spec.nodeName=$A" -o name) ]] ||
    fail "$A's slices came back after their deletion"
}

pod_gone() {
  ! k -n "$NAMESPACE" get pod "$1" >/dev/null 2>&1
}

claim_gone() {
  ! k -n "$NAMESPACE" get resourceclaim "$1" >/dev/null 2>&1
}

node_ready_is() {
  LAST_SEEN=$(k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
  [[ $LAST_SEEN == "$2" ]]
}

pod_deleting() {
  [[ -n $(k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.metadata.deletionTimestamp}') ]]
}

# lost_state_kept POD CLAIM SLICES
lost_state_kept() {
  LAST_SEEN="pod $(k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.metadata.deletionTimestamp}' 2>&1);" || return 1
  LAST_SEEN+=" claim reserved for $(k -n "$NAMESPACE" get resourceclaim "$2" \
    -o 'jsonpath={.status.reservedFor[*].name} allocated {.status.allocation.devices.results[0].device}' 2>&1);"
  LAST_SEEN+=" slices $(k get resourceslices --field-selector "spec.nodeName=$A" -o name 2>&1 | sort | xargs)"
  [[ $LAST_SEEN == "pod 20"*"; claim reserved for $1 allocated kdra-"*"; slices $3" ]]
}

teardown() {
  k -n "$NAMESPACE" delete deployment kdra-a kdra-b --wait=false >/dev/null
  inns helm uninstall "$DRA" -n kube-system >/dev/null
  inns helm uninstall "$DP" -n kube-system >/dev/null
  # The lost worker's pods: no kubelet confirms their deletion.
  k -n "$NAMESPACE" delete pods --field-selector "spec.nodeName=$A" -l app.kubernetes.io/name=genericdp \
    --force --grace-period=0 >/dev/null 2>&1 || true
  k label node "$A" "$BACKEND_LABEL-" >/dev/null
  k taint node "$A" "${OUT_OF_SERVICE%%=*}-" >/dev/null
  on_node "$B" sh -c 'rm -f /dev/gdp-kdra* /dev/gdp-kshare* /dev/gdp-kunb*'
}

setup
check_move
check_slices_and_classes
check_claims_and_unplug
check_sharing
check_lost_worker
teardown
log "ok: the DRA round on the kind fleet"
