# shellcheck shell=bash
# The move of a node from the device-plugin backend to DRA (docs/dra.md,
# "Moving a node from the device plugin to DRA, and back"), every step as the
# docs write it, on the DRA round's node: check_dra_node_move. Sourced by
# dra.sh (its names and helpers: k, NODE, DRIVER, slices_complete, pod_claim,
# env_of...); never run.
#
# The round starts with the DRA backend deployed, so the check first puts the
# node where a move starts: the DRA deployment removed, the device-plugin
# deployment (e2e/local/overlay) serving and a consumer Deployment (limits
# example.com/e2e-dev: 1) Running with a device-plugin device. Then the doc's
# steps, each timed; the consumer's pod spec, unchanged, gets a DRA device
# at the end. Last, the round's own DRA deployment (overlay-dra) is put
# back, as the other checks expect it. MOVE_TIDY=1 also waits out the
# kubelet's 5 minutes and removes the stale capacity (docs/dra.md's tidying).

MOVE_DP_OVERLAY=$LOCAL_DIR/overlay-move-dp
MOVE_DRA_OVERLAY=$LOCAL_DIR/overlay-move-dra
MOVE_DP_DS=genericdp
MOVE_DRA_DS=genericdp-dra
MOVE_APP=e2e-move
MOVE_RESOURCE=example.com/e2e-dev
MOVE_LABEL=genericdp.io/backend

# move_manifest: the consumer, a Deployment of one pod with limits
# MOVE_RESOURCE: 1.
move_manifest() {
  cat <<EOM
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $MOVE_APP
spec:
  replicas: 1
  selector:
    matchLabels: {genericdp-e2e: move}
  template:
    metadata:
      labels: {genericdp-e2e: move}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: consumer
          image: $CONSUMER_IMAGE
          imagePullPolicy: Never
          command: [sleep, "1000000"]
          resources:
            limits:
              $MOVE_RESOURCE: 1
EOM
}

# move_pods: the consumer Deployment's pods, "NAME PHASE" a line, not those
# being deleted.
move_pods() {
  k -n "$NAMESPACE" get pods -l genericdp-e2e=move \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}' |
    awk 'NF == 2 { print $1, $2 }'
}

no_move_pods() {
  [[ -z $(k -n "$NAMESPACE" get pods -l genericdp-e2e=move -o name) ]]
}

# move_pod_ready: the consumer's one pod is Ready; MOVE_POD names it.
MOVE_POD=""
move_pod_ready() {
  LAST_SEEN=$(move_pods) || return 1
  [[ $(grep -c . <<<"$LAST_SEEN") == 1 ]] || return 1
  MOVE_POD=${LAST_SEEN%% *}
  pod_ready "$MOVE_POD"
}

# ds_pods DAEMONSET: its pods on the node, "NAME DELETING" a line (DELETING:
# the deletion timestamp, "-" when there is none).
ds_pods() {
  k -n "$NAMESPACE" get pods --field-selector "spec.nodeName=$NODE" \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].name} {.metadata.deletionTimestamp}{"\n"}{end}' |
    awk -v ds="$1" '$2 == ds { print $1, ($3 == "" ? "-" : $3) }'
}

# ds_pod DAEMONSET: its pod on the node that is Ready and not being deleted.
ds_pod() {
  local name deleting
  while read -r name deleting; do
    if [[ $deleting == - ]] && pod_ready "$name"; then
      echo "$name"
      return 0
    fi
  done < <(ds_pods "$1")
  return 1
}

# ds_pods_gone DAEMONSET: no pod of it on the node, not even a terminating one.
ds_pods_gone() {
  LAST_SEEN=$(ds_pods "$1") || return 1
  [[ -z $LAST_SEEN ]]
}

pod_gone() {
  ! k -n "$NAMESPACE" get pod "$1" >/dev/null 2>&1
}

# move_pending: the consumer Deployment has one pod, Pending.
move_pending() {
  LAST_SEEN=$(move_pods) || return 1
  [[ $(grep -c . <<<"$LAST_SEEN") == 1 && $LAST_SEEN == *" Pending" ]]
}

# node_extended FIELD: the node's example.com resources in status.FIELD,
# "NAME=VALUE ..." sorted.
node_extended() {
  k get node "$NODE" -o json | python3 -c '
import json, sys
field = json.load(sys.stdin)["status"].get(sys.argv[1], {})
print(" ".join(f"{k}={v}" for k, v in sorted(field.items()) if k.startswith("example.com/")))
' "$1"
}

# stale_capacity_zero: the node lists device-plugin resources, all at 0
# (what the kubelet leaves about 5 minutes after the plugin left).
stale_capacity_zero() {
  LAST_SEEN=$(node_extended capacity) || return 1
  [[ -n $LAST_SEEN && $(tr ' ' '\n' <<<"$LAST_SEEN" | grep -vc '=0$') == 0 ]]
}

# stale_allocatable_zero: the node lists device-plugin resources, with
# allocatable 0 for each (the kubelet's view once the plugin left).
stale_allocatable_zero() {
  LAST_SEEN=$(node_extended allocatable) || return 1
  [[ -n $LAST_SEEN && $(tr ' ' '\n' <<<"$LAST_SEEN" | grep -vc '=0$') == 0 ]]
}

no_extended_resources() {
  LAST_SEEN="capacity: $(node_extended capacity); allocatable: $(node_extended allocatable)" || return 1
  [[ $LAST_SEEN == "capacity: ; allocatable: " ]]
}

has_extended_capacity() {
  [[ -n $(node_quantity capacity "$1") ]]
}

# clear_capacity: docs/dra.md's tidying of the stale capacity, one remove of
# capacity and one of allocatable per resource the node lists.
clear_capacity() {
  local entry name ops=()
  for entry in $(node_extended capacity); do
    name=${entry%=*}
    ops+=("{\"op\":\"remove\",\"path\":\"/status/capacity/${name//\//\~1}\"}"
      "{\"op\":\"remove\",\"path\":\"/status/allocatable/${name//\//\~1}\"}")
  done
  ((${#ops[@]})) || fail "no example.com resource in the capacity of $NODE to clear"
  local IFS=,
  log "  kubectl patch node $NODE --subresource=status --type=json -p '[${ops[*]}]'"
  k patch node "$NODE" --subresource=status --type=json -p "[${ops[*]}]"
}

# check_dra_node_move: the procedure, with the consumer running throughout.
check_dra_node_move() {
  log "check: a node moves from the device plugin to DRA as docs/dra.md says; the same pod spec gets a DRA device"
  local started move_started mine dp_pod dra_pod old_pod labelled gone_at
  move_to_device_plugin
  mine=$(env_of "$MOVE_POD" E2E_DEV_PATHS)
  [[ $mine == /dev/gdp-e2e-dev[01] ]] ||
    fail "E2E_DEV_PATHS in pod $MOVE_POD is '$mine', not one of /dev/gdp-e2e-dev0, /dev/gdp-e2e-dev1"
  pod_has_node "$MOVE_POD" "$mine"
  old_pod=$MOVE_POD
  log "  $MOVE_POD holds $mine through the device plugin; the node: capacity $(node_extended capacity)"

  log "node move, step 1: the DRA DaemonSet (nodeSelector $MOVE_LABEL=dra) and the DeviceClass reconciler beside the device plugin ($MOVE_DRA_OVERLAY)"
  move_started=$(now)
  k apply -k "$MOVE_DRA_OVERLAY"
  k -n "$NAMESPACE" rollout status deployment/genericdp-deviceclasses-dra --timeout=120s ||
    fail "the DeviceClass reconciler of $MOVE_DRA_OVERLAY did not become ready"
  wait_for 60 "the reconciler to make a DeviceClass for every resource" classes_made
  timing "node move 1: DRA side applied -> every DeviceClass made" "$(seconds_between "$move_started" "$(now)")"
  [[ -z $(ds_pods "$MOVE_DRA_DS") ]] || fail "a pod of $MOVE_DRA_DS runs on $NODE, which has no $MOVE_LABEL label"
  expect "the desired pods of DaemonSet $MOVE_DRA_DS (no node labelled yet)" 0 \
    "$(k -n "$NAMESPACE" get daemonset "$MOVE_DRA_DS" -o 'jsonpath={.status.desiredNumberScheduled}')"

  log "node move, step 2: the device-plugin DaemonSet gets the node affinity $MOVE_LABEL NotIn [dra] ($MOVE_DP_OVERLAY)"
  dp_pod=$(ds_pod "$MOVE_DP_DS") || fail "no Ready pod of DaemonSet $MOVE_DP_DS"
  started=$(now)
  k apply -k "$MOVE_DP_OVERLAY"
  k -n "$NAMESPACE" rollout status "daemonset/$MOVE_DP_DS" --timeout=120s ||
    fail "the device-plugin DaemonSet did not roll to its node affinity"
  wait_for 60 "the old device-plugin pod $dp_pod to go" pod_gone "$dp_pod"
  wait_quantity allocatable "$MOVE_RESOURCE" 2 60
  timing "node move 2: affinity applied -> device-plugin pod replaced, registered" "$(seconds_between "$started" "$(now)")"
  dp_pod=$(ds_pod "$MOVE_DP_DS") || fail "no Ready pod of DaemonSet $MOVE_DP_DS after its rollout"
  move_pod_ready || fail "the consumer's pod did not stay Ready while the device plugin rolled: $LAST_SEEN"
  expect "the consumer's pod after the device plugin's rollout" "$old_pod" "$MOVE_POD"
  expect "E2E_DEV_PATHS in pod $MOVE_POD after the rollout" "$mine" "$(env_of "$MOVE_POD" E2E_DEV_PATHS)"
  pod_has_node "$MOVE_POD" "$mine"
  log "  $MOVE_POD still holds $mine, opened after the device plugin's rollout"

  log "node move, step 3: kubectl drain $NODE --ignore-daemonsets"
  started=$(now)
  k drain "$NODE" --ignore-daemonsets --timeout=120s || fail "kubectl drain $NODE --ignore-daemonsets failed"
  timing "node move 3: kubectl drain (the consumer's pod evicted)" "$(seconds_between "$started" "$(now)")"
  pod_gone "$old_pod" || fail "pod $old_pod is still there after the drain"
  started=$(now)
  wait_for 60 "the device plugin ($dp_pod) to run the cleanup hook of $mine ('e2e cleaned $mine')" \
    daemon_log_has "$dp_pod" "e2e cleaned $mine"
  timing "node move 3: drain returned -> cleanup hook of the evicted pod's unit ran" "$(seconds_between "$started" "$(now)")"
  LAST_SEEN=""
  wait_for 30 "the consumer Deployment to have one pod, Pending, while $NODE is cordoned" move_pending
  log "  the consumer's replacement waits: $LAST_SEEN"

  log "node move, step 4: kubectl label node $NODE $MOVE_LABEL=dra"
  labelled=$(now)
  k label node "$NODE" "$MOVE_LABEL=dra"
  wait_for 60 "the device-plugin pod $dp_pod to leave $NODE" ds_pods_gone "$MOVE_DP_DS"
  gone_at=$(now)
  timing "node move 4: label -> device-plugin pod gone" "$(seconds_between "$labelled" "$gone_at")"
  wait_for 120 "a Ready pod of DaemonSet $MOVE_DRA_DS on $NODE" ds_pod "$MOVE_DRA_DS"
  timing "node move 4: label -> DRA pod Ready" "$(seconds_between "$labelled" "$(now)")"
  dra_pod=$(ds_pod "$MOVE_DRA_DS")
  LAST_SEEN=""
  wait_for 60 "every device in the ResourceSlices of $NODE" slices_complete
  timing "node move 4: label -> every device in the ResourceSlices" "$(seconds_between "$labelled" "$(now)")"

  wait_for 60 "the kubelet to report allocatable 0 for every resource the device plugin had" stale_allocatable_zero
  timing "node move 4: device-plugin pod gone -> allocatable 0 (kubelet)" "$(seconds_between "$gone_at" "$(now)")"
  log "  the node, with the device plugin gone: capacity $(node_extended capacity); allocatable $(node_extended allocatable)"

  log "node move, step 5: kubectl uncordon $NODE (the capacity still listed)"
  started=$(now)
  k uncordon "$NODE"
  LAST_SEEN=""
  wait_for 120 "the consumer's replacement pod to be Ready" move_pod_ready
  timing "node move 5: uncordon -> the consumer's pod Ready with a DRA device" "$(seconds_between "$started" "$(now)")"
  timing "node move: steps 1 to 5" "$(seconds_between "$move_started" "$(now)")"
  move_pod_checks "$dra_pod"
  has_extended_capacity "$MOVE_RESOURCE" ||
    fail "the node no longer lists $MOVE_RESOURCE: the check meant to show DRA serving beside the stale capacity"
  log "  served by DRA while the node lists capacity $(node_extended capacity)"
  log "  kubectl get resourceslices --field-selector spec.nodeName=$NODE: $(k get resourceslices \
    --field-selector "spec.nodeName=$NODE" -o name | grep -c .) slices"

  log "node move, tidying: the stale capacity removed within the kubelet's grace comes back"
  clear_capacity
  started=$(now)
  wait_for 60 "the kubelet to put $MOVE_RESOURCE back into the capacity of $NODE" has_extended_capacity "$MOVE_RESOURCE"
  timing "node move, tidying: capacity removed within the grace -> back" "$(seconds_between "$started" "$(now)")"
  if [[ ${MOVE_TIDY:-0} == 1 ]]; then
    LAST_SEEN=""
    wait_for 420 "the kubelet to report the device plugin's resources at 0" stale_capacity_zero
    timing "node move, tidying: device-plugin pod gone -> capacity 0" "$(seconds_between "$gone_at" "$(now)")"
    clear_capacity
    wait_for 30 "no example.com resource in the status of $NODE" no_extended_resources
    # The kubelet writes the node's status every 10 s: the keys must stay gone.
    hold_for 12 "no example.com resource in the status of $NODE" no_extended_resources
    log "  removed once at 0, the keys stay removed"
  fi
  move_restore
}

# move_to_device_plugin: the node as a move starts: served by the device
# plugin, the consumer's pod Running with its device, nothing of DRA.
move_to_device_plugin() {
  log "node move, before: the DRA deployment removed, the device-plugin one ($OVERLAY) and a consumer Deployment ($MOVE_RESOURCE: 1)"
  local started pods
  started=$(now)
  # Pods of the earlier checks go while the driver can still unprepare their
  # claims; none may be left for the drain (a pod of no controller stops it).
  pods=$(k -n "$NAMESPACE" get pods \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}{"\n"}{end}' |
    awk '$2 != "DaemonSet" && $2 != "ReplicaSet" { print $1 }')
  if [[ -n $pods ]]; then
    # shellcheck disable=SC2086 # a list of names
    k -n "$NAMESPACE" delete pod $pods --wait=true --timeout=120s
  fi
  k -n "$NAMESPACE" delete daemonset/genericdp deployment/genericdp-deviceclasses \
    --cascade=foreground --wait=true --timeout=120s
  k delete deviceclasses -l app.kubernetes.io/managed-by=genericdp
  k delete resourceslices --field-selector "spec.nodeName=$NODE,spec.driver=$DRIVER"
  wait_for 30 "no registration socket left in $REGISTRY_DIR" sh -c "! find '$REGISTRY_DIR' -mindepth 1 -type s | grep -q ."
  k apply -k "$OVERLAY"
  k -n "$NAMESPACE" rollout status "daemonset/$MOVE_DP_DS" --timeout=120s ||
    fail "the device-plugin DaemonSet ($OVERLAY) did not become ready"
  wait_quantity allocatable "$MOVE_RESOURCE" 2 60
  timing "node move, before: DRA removed -> device plugin serving" "$(seconds_between "$started" "$(now)")"
  started=$(now)
  move_manifest | k -n "$NAMESPACE" apply -f -
  LAST_SEEN=""
  wait_for 120 "the consumer Deployment's pod to be Ready" move_pod_ready
  timing "node move, before: consumer Deployment created -> Ready (device plugin)" "$(seconds_between "$started" "$(now)")"
  [[ -z $(k -n "$NAMESPACE" get pod "$MOVE_POD" -o 'jsonpath={.status.extendedResourceClaimStatus}') ]] ||
    fail "pod $MOVE_POD has a DRA claim: the device plugin should serve it"
}

# move_pod_checks DRA_POD: the consumer's pod is served by DRA: the
# scheduler's claim, allocated by our driver, the device node and env.
move_pod_checks() {
  local claim drivers mine
  claim=$(pod_claim "$MOVE_POD") ||
    fail "pod $MOVE_POD has no status.extendedResourceClaimStatus: its limits were not mapped to a DRA claim"
  drivers=$(k -n "$NAMESPACE" get resourceclaim "$claim" -o 'jsonpath={.status.allocation.devices.results[*].driver}')
  expect "the driver of claim $claim" "$DRIVER" "$drivers"
  expect "the limits of pod $MOVE_POD (the Deployment's, unchanged)" "{\"$MOVE_RESOURCE\":\"1\"}" \
    "$(k -n "$NAMESPACE" get pod "$MOVE_POD" -o 'jsonpath={.spec.containers[0].resources.limits}')"
  mine=$(env_of "$MOVE_POD" E2E_DEV_PATHS)
  [[ $mine == /dev/gdp-e2e-dev[01] ]] ||
    fail "E2E_DEV_PATHS in pod $MOVE_POD is '$mine' under DRA, not one of /dev/gdp-e2e-dev0, /dev/gdp-e2e-dev1"
  pod_has_node "$MOVE_POD" "$mine"
  log "  $MOVE_POD: claim $claim ($(k -n "$NAMESPACE" get resourceclaim "$claim" \
    -o 'jsonpath={.status.allocation.devices.results[0].device}')), $mine, prepared by $1"
}

# move_restore: the round's own DRA deployment back (overlay-dra, every node),
# the move's objects and the node's label gone.
move_restore() {
  log "node move: putting the round's DRA deployment back ($DRA_OVERLAY)"
  local started dra_pod
  started=$(now)
  dra_pod=$(ds_pod "$MOVE_DRA_DS") || fail "no Ready pod of DaemonSet $MOVE_DRA_DS"
  k -n "$NAMESPACE" delete deployment "$MOVE_APP" --wait=true
  wait_for 60 "the consumer's pod to go" no_move_pods
  wait_for 30 "its claim unprepared (no claim CDI spec left in $CDI_DIR)" sh -c "! ls $CDI_DIR/gdp-claim-*.json"
  k delete -k "$MOVE_DRA_OVERLAY" --wait=true
  wait_for 60 "pod $dra_pod to go" pod_gone "$dra_pod"
  k apply -k "$DRA_OVERLAY"
  k label node "$NODE" "$MOVE_LABEL-"
  k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=120s ||
    fail "the round's DRA DaemonSet did not come back"
  k -n "$NAMESPACE" rollout status deployment/genericdp-deviceclasses --timeout=120s ||
    fail "the round's DeviceClass reconciler did not come back"
  LAST_SEEN=""
  wait_for 60 "every device in the ResourceSlices of $NODE" slices_complete
  if [[ ${MOVE_TIDY:-0} == 1 ]]; then
    no_extended_resources || fail "the node lists extended resources again: $LAST_SEEN"
  fi
  timing "node move: the round's DRA deployment back" "$(seconds_between "$started" "$(now)")"
}
