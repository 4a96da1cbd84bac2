#!/usr/bin/env bash
# The checks against a real kubelet, API server and container runtime, in
# order, written once for both ways to get a node: a kind cluster
# (e2e/kind/run.sh) and the local node (e2e/local/run.sh). Where a check needs
# the node it goes through the way's driver (node_exec, kubelet_log_since,
# kill_kubelet...; e2e/lib.sh lists them). Each check has a timeout and says
# what did not happen; a failure dumps the DaemonSet, pods, logs, node and
# kubelet log (lib.sh, dump_diagnostics) and exits 1. Every latency is printed
# as a TIMING line. Run after the deployment (e2e/deploy.sh):
#   e2e/checks.sh kind|local [CHECK...]     default: KIND_CHECKS or LOCAL_CHECKS, in order
set -euo pipefail
E2E_WAY=${1:-${E2E_WAY:-}}
case $E2E_WAY in
  kind)
    # shellcheck source-path=SCRIPTDIR source=kind/kind-lib.sh
    source "$(dirname "${BASH_SOURCE[0]}")/kind/kind-lib.sh"
    ;;
  local)
    # shellcheck source-path=SCRIPTDIR source=local/node-lib.sh
    source "$(dirname "${BASH_SOURCE[0]}")/local/node-lib.sh"
    ;;
  *)
    echo "usage: e2e/checks.sh kind|local [CHECK...]" >&2
    exit 2
    ;;
esac

CONSUMER=e2e-consumer
FLAG=/var/lib/genericdp-e2e/unhealthy
PLUGIN_SOCKET=/var/lib/kubelet/device-plugins/kubelet.sock
KUBELET_RESTARTS=${KUBELET_RESTARTS:-20}
# Every resource of the e2e config (deploy/kustomize/base/config.yaml and
# overlay/e2e.yaml): each must register again after a kubelet restart.
RESOURCES=(
  example.com/null example.com/zero example.com/loop example.com/fuse
  example.com/e2e-dev example.com/e2e-hotplug example.com/e2e-health
  example.com/e2e-shared example.com/e2e-unplug
)
SHARED_PODS=5 # example.com/e2e-shared advertises freeIds: 2

in_pod() {
  k -n "$NAMESPACE" exec "$CONSUMER" -- "$@"
}

# pod_env NAME: the consumer's environment variable (busybox has no printenv).
pod_env() {
  in_pod env | tr -d '\r' | sed -n "s/^$1=//p"
}

# expect WHAT EXPECTED ACTUAL
expect() {
  [[ $3 == "$2" ]] || fail "$1: expected '$2', got '$3'"
}

# consumer_manifest NAME E2E_DEV [NODE]: a pod wanting E2E_DEV units of
# example.com/e2e-dev and one of example.com/null; with NODE, placed there
# directly (spec.nodeName: the scheduler is not asked, the kubelet admits it).
consumer_manifest() {
  local name=$1 dev=$2 node=${3:-}
  cat <<EOM
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {app.kubernetes.io/name: genericdp-e2e-consumer}
spec:
  ${node:+nodeName: $node}
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: consumer
      image: $CONSUMER_IMAGE
      imagePullPolicy: Never
      command: [sleep, "1000000"]
      resources:
        limits:
          example.com/e2e-dev: $dev
          example.com/null: 1
EOM
}

start_consumer() {
  local started
  started=$(now)
  consumer_manifest "$CONSUMER" 1 | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready "pod/$CONSUMER" --timeout=120s ||
    fail "pod $CONSUMER (example.com/e2e-dev: 1) did not become Ready within 120s"
  timing "pod with example.com/e2e-dev created -> Ready" "$(seconds_between "$started" "$(now)")"
}

# probe_warnings POD: the kubelet's Unhealthy events for POD (a probe failed), one a line.
probe_warnings() {
  k -n "$NAMESPACE" get events \
    --field-selector "involvedObject.kind=Pod,involvedObject.name=$1,reason=Unhealthy" \
    -o 'jsonpath={range .items[*]}{.count}x {.message}{"\n"}{end}'
}

# no_probe_warnings POD: no probe of POD failed since it started. The probes'
# initialDelaySeconds follow genericdp's measured start (docs/deploy.md,
# "Probes"): a probe before /readyz answers fails with "connection refused"
# and leaves a Warning event on every start.
no_probe_warnings() {
  local said
  said=$(probe_warnings "$1") || fail "could not list the events of pod $1"
  [[ -z $said ]] ||
    fail "a probe of genericdp pod $1 failed while it started (Unhealthy events): $said"
}

check_startup_probes() {
  log "check: the genericdp pod started with no failed probe (no Unhealthy Warning event)"
  local pod
  pod=$(daemon_pod)
  pod_ready "$pod" || fail "genericdp pod $pod is not Ready"
  no_probe_warnings "$pod"
}

# dry_run_overlay DIR RESOURCES COMPONENTS [FILE...]: a kustomization in DIR
# of RESOURCES and COMPONENTS (space-separated paths from the repository's
# root), with FILEs copied in and listed as resources too, in NAMESPACE (as
# a user's overlay sets its namespace; the base alone is in kube-system).
dry_run_overlay() {
  local dir=$1 resources=$2 components=$3 path file
  shift 3
  rm -rf "$dir"
  mkdir -p "$dir"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "namespace: $NAMESPACE"
    echo "resources:"
    for path in $resources; do
      echo "  - $(realpath --relative-to="$dir" "$REPO_ROOT/$path")"
    done
    for file in "$@"; do
      cp "$file" "$dir/"
      echo "  - $(basename "$file")"
    done
    echo "components:"
    for path in $components; do
      echo "  - $(realpath --relative-to="$dir" "$REPO_ROOT/$path")"
    done
  } >"$dir/kustomization.yaml"
}

check_server_dry_run() {
  log "check: the API server accepts every kustomize variant (kubectl apply --dry-run=server)"
  local dir=$ARTIFACTS/dry-run variant
  local base=deploy/kustomize/base components=deploy/kustomize/components
  dry_run_overlay "$dir/base" "$base" ""
  dry_run_overlay "$dir/privileged" "$base" "$components/privileged"
  dry_run_overlay "$dir/networkpolicy" "$base" "$components/networkpolicy"
  dry_run_overlay "$dir/kubelet-root-dir" "$base" "$components/kubelet-root-dir" \
    "$REPO_ROOT/e2e/local/overlay/kubelet-root-dir.yaml"
  for variant in base privileged networkpolicy kubelet-root-dir; do
    k -n "$NAMESPACE" apply --dry-run=server -k "$dir/$variant" >/dev/null ||
      fail "the API server refused the kustomize base with ${variant/base/no component} (kubectl apply --dry-run=server -k $dir/$variant)"
    log "ok: the API server accepts the base with ${variant/base/no component}"
  done
  for variant in "$OVERLAY" "$OVERLAY-privileged"; do
    k apply --dry-run=server -k "$variant" >/dev/null ||
      fail "the API server refused the e2e deployment $variant (kubectl apply --dry-run=server)"
    log "ok: the API server accepts $variant"
  done
}

check_capacity() {
  log "check: node capacity and allocatable show the demo and e2e resources"
  local started spec
  started=$(now)
  for spec in example.com/null=4 example.com/zero=1 example.com/e2e-dev=2 example.com/e2e-health=2; do
    wait_quantity capacity "${spec%=*}" "${spec#*=}" 60
    wait_quantity allocatable "${spec%=*}" "${spec#*=}" 30
  done
  wait_quantity capacity example.com/e2e-hotplug 0 10
  timing "DaemonSet ready -> capacity and allocatable in node status" \
    "$(seconds_between "$started" "$(now)")"
  for spec in example.com/loop example.com/fuse; do
    log "  $spec on this node: capacity $(node_quantity capacity "$spec")" \
      "allocatable $(node_quantity allocatable "$spec")"
  done
}

# node_device_numbers PATH -> "major:minor" (decimal) of a device node on the node.
node_device_numbers() {
  local hex
  hex=$(node_exec stat -c '%t %T' "$1") || fail "cannot stat $1 on $NODE"
  hex_numbers "$hex"
}

# hex_numbers "MAJOR MINOR" (hex, as stat %t %T prints them) -> "major:minor".
hex_numbers() {
  local a b
  read -r a b <<<"$1"
  printf '%d:%d' "0x$a" "0x$b"
}

# pod_open PATH: what opening PATH read-write in the consumer says ("" = opened).
pod_open() {
  in_pod sh -c "exec 3<>$1" 2>&1 | tr -d '\r' || true
}

check_consumer_pod() {
  log "check: a pod requesting example.com/e2e-dev gets exactly its device node, env and mount"
  start_consumer
  local mine other nodes numbers major minor said
  mine=$(pod_env E2E_DEV_PATHS)
  case $mine in
    /dev/gdp-e2e-dev0) other=/dev/gdp-e2e-dev1 ;;
    /dev/gdp-e2e-dev1) other=/dev/gdp-e2e-dev0 ;;
    *) fail "E2E_DEV_PATHS in pod $CONSUMER is '$mine', not one of /dev/gdp-e2e-dev0, /dev/gdp-e2e-dev1" ;;
  esac
  nodes=$(in_pod sh -c 'ls /dev | grep gdp-e2e-dev || true' | tr -d '\r' | tr '\n' ' ')
  expect "the e2e device nodes in pod $CONSUMER" "${mine#/dev/} " "$nodes"
  numbers=$(node_device_numbers "$mine")
  expect "major:minor of $mine in the pod (the node's)" "$numbers" \
    "$(hex_numbers "$(in_pod stat -c '%t %T' "$mine" | tr -d '\r')")"
  # Opened, or refused by the driver (a kernel without the module says "No
  # such device"): either way past the device cgroup, which says EPERM.
  said=$(pod_open "$mine")
  [[ $said != *"Operation not permitted"* ]] ||
    fail "the device cgroup of pod $CONSUMER refuses its own $mine: $said"

  log "check: the pod's device cgroup refuses the unit it was not given ($other)"
  numbers=$(node_device_numbers "$other")
  major=${numbers%:*} minor=${numbers#*:}
  in_pod mknod /gdp-e2e-other c "$major" "$minor" ||
    fail "mknod c $major $minor in pod $CONSUMER failed (no CAP_MKNOD?)"
  said=$(pod_open /gdp-e2e-other)
  [[ $said == *"Operation not permitted"* ]] ||
    fail "opening c $numbers ($other, not given to the pod) should be refused by the device cgroup; the pod said: '${said:-opened}'"

  expect "E2E_NODE in the pod" "$NODE" "$(pod_env E2E_NODE)"
  expect "DEMO_NULL in the pod (example.com/null)" /dev/null "$(pod_env DEMO_NULL)"
  [[ -n $(pod_env E2E_DEVICE_IDS) ]] || fail "E2E_DEVICE_IDS is empty in the pod"
  expect "/e2e-share/hello.txt in the pod" "hello from $NODE" \
    "$(in_pod cat /e2e-share/hello.txt)"
  if in_pod touch /e2e-share/written-by-pod 2>/dev/null; then
    fail "/e2e-share is writable in the pod; the allocate mount says readOnly: true"
  fi
}

# pod_has_node POD PATH: PATH in POD is the node's device (same major:minor)
# and its device cgroup lets POD open it.
pod_has_node() {
  local pod=$1 path=$2 numbers said
  k -n "$NAMESPACE" exec "$pod" -- test -c "$path" ||
    fail "pod $pod has no character device $path (allocate.devices)"
  numbers=$(node_device_numbers "$path")
  expect "major:minor of $path in pod $pod (the node's)" "$numbers" \
    "$(hex_numbers "$(k -n "$NAMESPACE" exec "$pod" -- stat -c '%t %T' "$path" | tr -d '\r')")"
  said=$(k -n "$NAMESPACE" exec "$pod" -- sh -c "exec 3<>$path" 2>&1 | tr -d '\r' || true)
  [[ $said != *"Operation not permitted"* ]] ||
    fail "the device cgroup of pod $pod refuses $path, given by allocate.devices: $said"
}

check_allocate_devices() {
  log "check: allocate.devices gives /dev/gdp-e2e-ctl with every unit of example.com/e2e-dev, and it is no unit itself"
  local second=e2e-second-unit
  quantity_is capacity example.com/e2e-dev 2 ||
    fail "capacity of example.com/e2e-dev should stay 2 with a control node (saw: $LAST_SEEN)"
  pod_has_node "$CONSUMER" /dev/gdp-e2e-ctl
  consumer_manifest "$second" 1 | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready "pod/$second" --timeout=120s ||
    fail "pod $second (the other unit of example.com/e2e-dev) did not become Ready within 120s"
  [[ $(k -n "$NAMESPACE" exec "$second" -- env | tr -d '\r' | sed -n 's/^E2E_DEV_PATHS=//p') != \
    "$(pod_env E2E_DEV_PATHS)" ]] || fail "pods $CONSUMER and $second got the same unit"
  pod_has_node "$second" /dev/gdp-e2e-ctl
  k -n "$NAMESPACE" delete pod "$second" --wait=true
  wait_quantity allocatable example.com/e2e-dev 2 30
}

pod_unschedulable() {
  [[ $(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]]
}

# pod_status_reason POD REASON: the pod ended with status.reason REASON.
pod_status_reason() {
  LAST_SEEN=$(k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.status.phase}/{.status.reason}') || return 1
  [[ $LAST_SEEN == "Failed/$2" ]]
}

check_over_request() {
  log "check: 3 units of example.com/e2e-dev (capacity 2) stay Pending (scheduler)"
  local started
  started=$(now)
  consumer_manifest e2e-too-many 3 | k -n "$NAMESPACE" apply -f -
  wait_for 60 "pod e2e-too-many to be Unschedulable (Insufficient example.com/e2e-dev)" \
    pod_unschedulable e2e-too-many
  timing "over-request -> Unschedulable (scheduler)" "$(seconds_between "$started" "$(now)")"
  k -n "$NAMESPACE" delete pod e2e-too-many --wait=false

  log "check: 2 units with nodeName set (1 free) are refused by the kubelet: UnexpectedAdmissionError"
  started=$(now)
  consumer_manifest e2e-not-admitted 2 "$NODE" | k -n "$NAMESPACE" apply -f -
  LAST_SEEN=""
  wait_for 60 "pod e2e-not-admitted to fail with UnexpectedAdmissionError" \
    pod_status_reason e2e-not-admitted UnexpectedAdmissionError
  timing "over-request with nodeName -> UnexpectedAdmissionError (kubelet)" \
    "$(seconds_between "$started" "$(now)")"
  log "  the kubelet said: $(k -n "$NAMESPACE" get pod e2e-not-admitted -o 'jsonpath={.status.message}')"
  k -n "$NAMESPACE" delete pod e2e-not-admitted --wait=false
}

check_hotplug() {
  log "check: device nodes created and removed on the node change capacity"
  local started
  started=$(now)
  node_exec sh -c 'mknod -m 0600 /dev/gdp-e2e-hp0 c 1 3 && mknod -m 0600 /dev/gdp-e2e-hp1 c 1 3'
  wait_quantity capacity example.com/e2e-hotplug 2 30
  timing "hotplug: 2 nodes created -> capacity 2 in the Node" "$(seconds_between "$started" "$(now)")"
  wait_quantity allocatable example.com/e2e-hotplug 2 10

  started=$(now)
  node_exec rm /dev/gdp-e2e-hp1
  wait_quantity capacity example.com/e2e-hotplug 1 30
  timing "hotplug: 1 node removed -> capacity 1 in the Node" "$(seconds_between "$started" "$(now)")"
  node_exec rm /dev/gdp-e2e-hp0
  wait_quantity capacity example.com/e2e-hotplug 0 30
}

check_health() {
  log "check: a failing health probe lowers allocatable, a passing one restores it"
  local started
  started=$(now)
  node_exec touch "$FLAG"
  wait_quantity allocatable example.com/e2e-health 0 30
  timing "health: probe fails -> allocatable 0" "$(seconds_between "$started" "$(now)")"
  quantity_is capacity example.com/e2e-health 2 ||
    fail "capacity of example.com/e2e-health should stay 2 while unhealthy (saw: $LAST_SEEN)"

  started=$(now)
  node_exec rm -f "$FLAG"
  wait_quantity allocatable example.com/e2e-health 2 30
  timing "health: probe passes -> allocatable 2" "$(seconds_between "$started" "$(now)")"
}

# device_pod_manifest NAME RESOURCE [GROUP [SECURITY_CONTEXT]]: a pod holding
# one RESOURCE, sleeping; labelled genericdp-e2e=GROUP, with the pod's
# securityContext (a flow mapping) when given.
device_pod_manifest() {
  cat <<EOM
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {app.kubernetes.io/name: genericdp-e2e-consumer${3:+, genericdp-e2e: $3}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  ${4:+securityContext: $4}
  containers:
    - name: consumer
      image: $CONSUMER_IMAGE
      imagePullPolicy: Never
      command: [sleep, "1000000"]
      resources:
        limits:
          $2: 1
EOM
}

shared_pods_running() {
  LAST_SEEN=$(k -n "$NAMESPACE" get pods -l genericdp-e2e=shared \
    -o 'jsonpath={range .items[*]}{.status.phase}{" "}{end}')
  [[ $(grep -o Running <<<"$LAST_SEEN" | wc -l) -eq $SHARED_PODS ]]
}

check_unbounded() {
  log "check: $SHARED_PODS pods share example.com/e2e-shared (count: unbounded, freeIds: 2), all Running"
  local started n said
  started=$(now)
  wait_quantity allocatable example.com/e2e-shared 2 30
  for ((n = 0; n < SHARED_PODS; n++)); do
    device_pod_manifest "e2e-shared-$n" example.com/e2e-shared |
      sed 's/^  labels: {/  labels: {genericdp-e2e: shared, /' | k -n "$NAMESPACE" apply -f -
  done
  LAST_SEEN=""
  wait_for 180 "$SHARED_PODS pods of example.com/e2e-shared to be Running" \
    shared_pods_running
  timing "unbounded: $SHARED_PODS pods created -> all Running" "$(seconds_between "$started" "$(now)")"
  said=$(k -n "$NAMESPACE" exec e2e-shared-0 -- sh -c 'exec 3<>/dev/gdp-e2e-shared && echo opened' 2>&1 |
    tr -d '\r' || true)
  expect "opening /dev/gdp-e2e-shared in pod e2e-shared-0" opened "$said"
  # The held IDs plus 2 free ones, once the node status follows.
  wait_quantity capacity example.com/e2e-shared $((SHARED_PODS + 2)) 30
  log "  node: capacity $(node_quantity capacity example.com/e2e-shared)" \
    "allocatable $(node_quantity allocatable example.com/e2e-shared)"
  started=$(now)
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=shared --wait=true
  wait_quantity capacity example.com/e2e-shared 2 60
  timing "unbounded: pods deleted -> capacity back to 2 (IDs reclaimed)" \
    "$(seconds_between "$started" "$(now)")"
}

# resource_health POD: the pod's allocatedResourcesStatus, "NAME: ID=HEALTH..." a line.
resource_health() {
  k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={range .status.containerStatuses[*].allocatedResourcesStatus[*]}{.name}:{range .resources[*]} {.resourceID}={.health}{end}{"\n"}{end}'
}

# pod_resource_status_is POD HEALTH [MESSAGE]: the first resource of the
# pod's allocatedResourcesStatus has HEALTH (and MESSAGE, when given); LAST_SEEN
# is "HEALTH: MESSAGE".
pod_resource_status_is() {
  LAST_SEEN=$(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.containerStatuses[0].allocatedResourcesStatus[0].resources[0].health}: {.status.containerStatuses[0].allocatedResourcesStatus[0].resources[0].message}') ||
    return 1
  [[ ${LAST_SEEN%%: *} == "$2" ]] && [[ -z ${3:-} || ${LAST_SEEN#*: } == "$3" ]]
}

# nonroot_pods_see IN OUT PATH: in pod IN (uid 1000, in group 4242) PATH is
# root's, group 4242's, 0660 (allocate.deviceNodes), and opens; pod OUT (uid
# 1000, not in the group) is refused it by the file's mode.
nonroot_pods_see() {
  local said
  expect "stat -c '%A %u %g' $3 in pod $1" "crw-rw---- 0 4242" \
    "$(k -n "$NAMESPACE" exec "$1" -- stat -c '%A %u %g' "$3" | tr -d '\r')"
  expect "uid and groups in pod $1" "1000 1000 4242" \
    "$(k -n "$NAMESPACE" exec "$1" -- id -u | tr -d '\r') $(k -n "$NAMESPACE" exec "$1" -- id -G | tr -d '\r')"
  said=$(k -n "$NAMESPACE" exec "$1" -- sh -c "exec 3<>$3" 2>&1 | tr -d '\r' || true)
  [[ -z $said ]] || fail "pod $1 (uid 1000, in group 4242) cannot open $3: $said"
  said=$(k -n "$NAMESPACE" exec "$2" -- sh -c "exec 3<>$3" 2>&1 | tr -d '\r' || true)
  [[ $said == *"Permission denied"* ]] ||
    fail "pod $2 (uid 1000, not in group 4242) should be refused $3 (Permission denied); it said: '${said:-opened}'"
  log "  $1 (group 4242) opens $3; $2 is refused: ${said%%$'\n'*}"
}

pod_resource_health_is() {
  LAST_SEEN=$(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.containerStatuses[0].allocatedResourcesStatus[0].resources[0].health}') || return 1
  [[ $LAST_SEEN == "$2" ]]
}

check_unplug_in_use() {
  log "check: a device removed while a pod holds it stays listed Unhealthy until the pod goes"
  local started pod
  pod=$(daemon_pod)
  node_exec mknod -m 0666 /dev/gdp-e2e-unplug0 c 1 3
  wait_quantity allocatable example.com/e2e-unplug 1 30
  device_pod_manifest e2e-unplug example.com/e2e-unplug | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-unplug --timeout=120s ||
    fail "pod e2e-unplug (example.com/e2e-unplug: 1) did not become Ready within 120s"
  LAST_SEEN=""
  wait_for 30 "pod e2e-unplug's allocatedResourcesStatus to say Healthy" \
    pod_resource_health_is e2e-unplug Healthy
  started=$(now)
  node_exec rm /dev/gdp-e2e-unplug0
  wait_quantity allocatable example.com/e2e-unplug 0 30
  timing "unplug in use: node removed -> allocatable 0" "$(seconds_between "$started" "$(now)")"
  quantity_is capacity example.com/e2e-unplug 1 ||
    fail "capacity of example.com/e2e-unplug should stay 1 while the pod holds the unplugged unit (saw: $LAST_SEEN)"
  LAST_SEEN=""
  wait_for 60 "pod e2e-unplug's allocatedResourcesStatus to say Unhealthy" \
    pod_resource_health_is e2e-unplug Unhealthy
  timing "unplug in use: node removed -> pod status Unhealthy" "$(seconds_between "$started" "$(now)")"
  log "  pod e2e-unplug allocatedResourcesStatus: $(resource_health e2e-unplug | tr '\n' ';')"
  daemon_log_has "$pod" "vanished while a container holds it" ||
    fail "genericdp ($pod) did not log that the unit vanished while held"
  started=$(now)
  k -n "$NAMESPACE" delete pod e2e-unplug --wait=true
  wait_quantity capacity example.com/e2e-unplug 0 60
  timing "unplug in use: pod deleted -> capacity 0" "$(seconds_between "$started" "$(now)")"
  wait_for 30 "genericdp ($pod) to log that the released unit left the list" \
    daemon_log_has "$pod" "vanished while in use and is released now"
}

# daemon_log_has POD TEXT: genericdp's log says TEXT.
daemon_log_has() {
  # Not grep -q: under pipefail kubectl's SIGPIPE would fail a match.
  k -n "$NAMESPACE" logs "$1" --tail=-1 2>/dev/null | grep -F -- "$2" >/dev/null
}

check_cleanup_hook() {
  log "check: deleting the consumer runs the cleanup hook for its unit"
  local pod mine started
  pod=$(daemon_pod)
  mine=$(pod_env E2E_DEV_PATHS)
  started=$(now)
  k -n "$NAMESPACE" delete pod "$CONSUMER" --wait=true
  wait_for 60 "genericdp ($pod) to log 'e2e cleaned $mine' from the cleanup hook" \
    daemon_log_has "$pod" "e2e cleaned $mine"
  timing "cleanup: consumer deleted -> cleanup hook ran" "$(seconds_between "$started" "$(now)")"
  wait_quantity allocatable example.com/e2e-dev 2 30
}

# kubelet_socket_since T: the kubelet created kubelet.sock after T; sets SOCKET_AT.
SOCKET_AT=""
kubelet_socket_since() {
  SOCKET_AT=$(node_exec stat -c %.9Y "$PLUGIN_SOCKET") || return 1
  awk -v s="$SOCKET_AT" -v t="$1" 'BEGIN { exit !(s + 0 > t + 0) }'
}

# all_registered_since T: the kubelet logged a registration of every resource
# after T; sets REGISTERED_AT to the last of them (seconds since the epoch).
REGISTERED_AT=""
all_registered_since() {
  local since=$1 journal resource at
  journal=$(kubelet_log_since "$since") || return 1
  REGISTERED_AT=$since
  for resource in "${RESOURCES[@]}"; do
    at=$(awk -v r="\"$resource\"" -v t="$since" '
      index($0, "Got registration request from device plugin") && index($0, r) && $1 + 0 > t + 0 {
        print $1; exit
      }' <<<"$journal")
    if [[ -z $at ]]; then
      LAST_SEEN="no registration of $resource yet"
      return 1
    fi
    REGISTERED_AT=$(awk -v a="$at" -v b="$REGISTERED_AT" 'BEGIN { print (a + 0 > b + 0) ? a : b }')
  done
}

# registrations_since T: "RESOURCE COUNT" for every resource registered after T.
registrations_since() {
  kubelet_log_since "$1" |
    sed -nE '/Got registration request from device plugin/ s/.*"(example\.com\/[^"]+)".*/\1/p' |
    sort | uniq -c | awk '{ print $2, $1 }'
}

# allocatable_summary: every example.com resource's allocatable, one line.
allocatable_summary() {
  # shellcheck disable=SC2016 # a Go template, not shell
  k get node "$NODE" -o go-template='{{range $k, $v := .status.allocatable}}{{$k}}={{$v}} {{end}}' |
    tr ' ' '\n' | grep '^example\.com/' | sort | tr '\n' ' '
}

allocatable_is() {
  LAST_SEEN=$(allocatable_summary) || return 1
  [[ $LAST_SEEN == "$1" ]]
}

# pods_identity: uid, restarts and container start of the genericdp pod and the consumer.
pods_identity() {
  local pod
  for pod in "$(daemon_pod)" "$CONSUMER"; do
    k -n "$NAMESPACE" get pod "$pod" -o 'jsonpath={.metadata.name} {.metadata.uid} restarts={.status.containerStatuses[0].restartCount} started={.status.containerStatuses[0].state.running.startedAt};'
  done
}

# percentile P FILE: the P-th percentile (nearest rank) of the numbers in FILE.
percentile() {
  sort -n "$2" | awk -v p="$1" '{ v[NR] = $1 } END { i = int((p / 100) * NR + 0.999999); if (i < 1) i = 1; print v[i] }'
}

check_kubelet_restarts() {
  log "check: the kubelet SIGKILLed and restarted $KUBELET_RESTARTS times: every resource back each time, once, pods untouched"
  start_consumer
  local before_pods before_alloc i issued took back samples_reg samples_back counts bad
  before_pods=$(pods_identity)
  before_alloc=$(allocatable_summary)
  log "  allocatable before: $before_alloc"
  samples_reg=$(mktemp)
  samples_back=$(mktemp)
  for ((i = 1; i <= KUBELET_RESTARTS; i++)); do
    issued=$(now)
    restart_kubelet_hard
    LAST_SEEN=""
    wait_for 60 "restart $i: the kubelet to create kubelet.sock again" kubelet_socket_since "$issued"
    LAST_SEEN=""
    wait_for 30 "restart $i: every genericdp resource to register with the restarted kubelet" \
      all_registered_since "$SOCKET_AT"
    took=$(seconds_between "$SOCKET_AT" "$REGISTERED_AT")
    echo "$took" >>"$samples_reg"
    LAST_SEEN=""
    wait_for 60 "restart $i: allocatable back to what it was ($before_alloc)" allocatable_is "$before_alloc"
    back=$(seconds_between "$issued" "$(now)")
    echo "$back" >>"$samples_back"
    # No stale registration: exactly one per resource with this kubelet, and
    # it stays (a stale one makes the kubelet drop the live endpoint).
    hold_for 1 "restart $i: allocatable stays $before_alloc" allocatable_is "$before_alloc"
    counts=$(registrations_since "$SOCKET_AT")
    bad=$(awk '$2 != 1' <<<"$counts")
    [[ -z $bad ]] || fail "restart $i: a resource registered more than once with one kubelet: $bad"
    log "  restart $i: kubelet.sock -> all registered ${took}s; SIGKILL -> allocatable back ${back}s"
  done
  timing "kubelet restart: kubelet.sock -> all ${#RESOURCES[@]} registered, p50 of $KUBELET_RESTARTS" \
    "$(percentile 50 "$samples_reg")"
  timing "kubelet restart: kubelet.sock -> all ${#RESOURCES[@]} registered, max of $KUBELET_RESTARTS" \
    "$(percentile 100 "$samples_reg")"
  timing "kubelet restart: SIGKILL -> allocatable back in the Node, p50" "$(percentile 50 "$samples_back")"
  timing "kubelet restart: SIGKILL -> allocatable back in the Node, max" "$(percentile 100 "$samples_back")"
  rm -f "$samples_reg" "$samples_back"
  expect "the genericdp and consumer pods across $KUBELET_RESTARTS kubelet restarts" "$before_pods" \
    "$(pods_identity)"
  pod_ready "$CONSUMER" || fail "pod $CONSUMER is no longer Ready after the kubelet restarts"
  log "check: a new pod still gets example.com/e2e-dev after the restarts"
  consumer_manifest e2e-after-restarts 1 | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-after-restarts --timeout=60s ||
    fail "pod e2e-after-restarts (example.com/e2e-dev: 1) did not become Ready after the kubelet restarts"
  k -n "$NAMESPACE" delete pod e2e-after-restarts --wait=false
}

# apply_e2e_config FILE: the ConfigMap with the base's config.yaml and FILE as e2e.yaml.
apply_e2e_config() {
  k -n "$NAMESPACE" create configmap genericdp-config \
    --from-file=config.yaml="$REPO_ROOT/deploy/kustomize/base/config.yaml" \
    --from-file=e2e.yaml="$1" --dry-run=client -o yaml | k apply -f -
}

# pod_config_has POD TEXT / pod_config_lacks POD TEXT: what the pod's
# /etc/genericdp/e2e.yaml says now (a failed exec is neither).
pod_config_has() {
  local text
  text=$(k -n "$NAMESPACE" exec "$1" -- cat /etc/genericdp/e2e.yaml) || return 1
  [[ $text == *"$2"* ]]
}

pod_config_lacks() {
  local text
  text=$(k -n "$NAMESPACE" exec "$1" -- cat /etc/genericdp/e2e.yaml) || return 1
  [[ $text != *"$2"* ]]
}

old_config_ready() {
  quantity_is allocatable example.com/null 4 && pod_ready "$1"
}

old_config_serving() {
  quantity_is allocatable example.com/e2e-reload 2 &&
    quantity_is allocatable example.com/null 4 &&
    pod_ready "$1"
}

check_hot_reload() {
  log "check: a ConfigMap edit adds a resource without restarting the pod"
  local pod before edited invalid started propagated
  pod=$(daemon_pod)
  before=$(pod_identity "$pod")
  edited=$(mktemp)
  invalid=$(mktemp)
  cat "$E2E_ROOT/overlay/e2e.yaml" - >"$edited" <<'EOM'

  - name: example.com/e2e-reload
    match:
      - glob: /dev/random
    count: 2
EOM
  apply_e2e_config "$edited"
  started=$(now)
  wait_for 180 "the edited ConfigMap to reach /etc/genericdp in pod $pod" \
    pod_config_has "$pod" example.com/e2e-reload
  propagated=$(now)
  timing "hot reload: ConfigMap edited -> file updated in the pod (kubelet)" \
    "$(seconds_between "$started" "$propagated")"
  wait_quantity capacity example.com/e2e-reload 2 30
  wait_quantity allocatable example.com/e2e-reload 2 10
  timing "hot reload: file updated -> new resource in node status (genericdp)" \
    "$(seconds_between "$propagated" "$(now)")"
  timing "hot reload: ConfigMap edited -> new resource in node status" \
    "$(seconds_between "$started" "$(now)")"
  expect "genericdp pod $pod across the reload (uid, restarts)" "$before" "$(pod_identity "$pod")"

  log "check: an invalid edit is refused and the running config keeps serving"
  cat "$edited" - >"$invalid" <<'EOM'

  - name: not a resource name
    match:
      - glob: /dev/urandom
EOM
  apply_e2e_config "$invalid"
  wait_for 180 "the invalid ConfigMap to reach pod $pod" pod_config_has "$pod" "not a resource name"
  hold_for 10 "the old config serving (e2e-reload 2, null 4, pod Ready) after an invalid edit" \
    old_config_serving "$pod"
  expect "genericdp pod $pod after the invalid edit (uid, restarts)" "$before" \
    "$(pod_identity "$pod")"
  log "  genericdp's last log lines:"
  k -n "$NAMESPACE" logs "$pod" --tail=5 >&2 || true

  log "check: restoring the deployed config removes example.com/e2e-reload"
  k apply -k "$OVERLAY"
  started=$(now)
  wait_for 180 "the restored ConfigMap to reach pod $pod" pod_config_lacks "$pod" e2e-reload
  wait_quantity allocatable example.com/e2e-reload 0 30
  timing "hot reload: resource removed -> allocatable 0 (from ConfigMap apply)" \
    "$(seconds_between "$started" "$(now)")"
  expect "genericdp pod $pod after the restore (uid, restarts)" "$before" "$(pod_identity "$pod")"
  rm -f "$edited" "$invalid"
}

new_daemon_pod_ready() {
  local pod
  pod=$(daemon_pod) || return 1
  LAST_SEEN=$pod
  [[ -n $pod && $pod != "$1" ]] && pod_ready "$pod"
}

check_daemon_pod_recreated() {
  log "check: the genericdp pod deleted, the DaemonSet makes a new one and the resources come back"
  local pod started
  pod=$(daemon_pod)
  started=$(now)
  k -n "$NAMESPACE" delete pod "$pod" --wait=false
  wait_for 120 "a new genericdp pod (not $pod) to be Ready" new_daemon_pod_ready "$pod"
  timing "genericdp pod deleted -> new pod Ready (DaemonSet)" "$(seconds_between "$started" "$(now)")"
  local new=$LAST_SEEN
  wait_quantity allocatable example.com/e2e-dev 2 30
  wait_quantity allocatable example.com/null 4 30
  timing "genericdp pod deleted -> allocatable back" "$(seconds_between "$started" "$(now)")"
  no_probe_warnings "$new"
}

SELECTED_LABEL=genericdp.example.com/e2e-selected
SERVICE_ACCOUNT=system:serviceaccount:$NAMESPACE:genericdp

# resource_registered_since T RESOURCE: the kubelet logged a registration of RESOURCE after T.
resource_registered_since() {
  kubelet_log_since "$1" | grep -F "Got registration request from device plugin" |
    grep -F "\"$2\"" >/dev/null
}

# can_i VERB RESOURCE: what `kubectl auth can-i` says for genericdp's service account.
can_i() {
  k auth can-i "$1" "$2" --as="$SERVICE_ACCOUNT" 2>/dev/null || true
}

check_node_selector() {
  log "check: genericdp's service account reads nodes and may not write them or read pods (RBAC)"
  expect "kubectl auth can-i list nodes (as $SERVICE_ACCOUNT)" yes "$(can_i list nodes)"
  expect "kubectl auth can-i patch nodes (as $SERVICE_ACCOUNT)" no "$(can_i patch nodes)"
  expect "kubectl auth can-i get pods (as $SERVICE_ACCOUNT)" no "$(can_i get pods)"

  log "check: a resource whose nodeSelector this node does not match is not served"
  local pod edited started
  pod=$(daemon_pod)
  node_exec mknod -m 0666 /dev/gdp-e2e-sel0 c 1 3
  edited=$(mktemp)
  cat "$E2E_ROOT/overlay/e2e.yaml" - >"$edited" <<EOM

  - name: example.com/e2e-selected
    match:
      - glob: /dev/gdp-e2e-sel*
    nodeSelector:
      matchLabels: {$SELECTED_LABEL: "true"}
    hooks:
      cleanup:
        exec: [/bin/sh, -c, 'echo "e2e selected cleaned"']
        timeout: 5s
EOM
  apply_e2e_config "$edited"
  rm -f "$edited"
  wait_for 180 "the ConfigMap with example.com/e2e-selected to reach pod $pod" \
    pod_config_has "$pod" example.com/e2e-selected
  wait_for 30 "genericdp ($pod) to log that it does not serve example.com/e2e-selected on this node" \
    daemon_log_has "$pod" "not serving on this node: example.com/e2e-selected (nodeSelector needs"
  log "  $(k -n "$NAMESPACE" logs "$pod" --tail=-1 | grep -F 'not serving on this node' | tail -1 | cut -c1-240)"
  hold_for 3 "example.com/e2e-selected not in the node's capacity" \
    quantity_is capacity example.com/e2e-selected 0

  log "check: labelling the node starts it; a pod gets it"
  started=$(now)
  k label node "$NODE" "$SELECTED_LABEL=true"
  wait_for 15 "example.com/e2e-selected to register with the kubelet after the label" \
    resource_registered_since "$started" example.com/e2e-selected
  timing "nodeSelector: node labelled -> resource registered (kubelet)" "$(seconds_between "$started" "$(now)")"
  wait_quantity allocatable example.com/e2e-selected 1 45
  timing "nodeSelector: node labelled -> allocatable 1 in the Node" "$(seconds_between "$started" "$(now)")"
  device_pod_manifest e2e-selected example.com/e2e-selected | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-selected --timeout=120s ||
    fail "pod e2e-selected (example.com/e2e-selected: 1) did not become Ready within 120s"
  k -n "$NAMESPACE" exec e2e-selected -- test -c /dev/gdp-e2e-sel0 ||
    fail "pod e2e-selected has no /dev/gdp-e2e-sel0"

  log "check: the label removed, the resource is no longer advertised; the pod keeps its unit, cleaned once at its release"
  started=$(now)
  k label node "$NODE" "$SELECTED_LABEL-"
  wait_quantity allocatable example.com/e2e-selected 0 45
  timing "nodeSelector: label removed -> allocatable 0" "$(seconds_between "$started" "$(now)")"
  pod_ready e2e-selected || fail "pod e2e-selected is not Ready after the label was removed"
  k -n "$NAMESPACE" exec e2e-selected -- test -c /dev/gdp-e2e-sel0 ||
    fail "pod e2e-selected lost /dev/gdp-e2e-sel0 when the label was removed"
  if daemon_log_has "$pod" "e2e selected cleaned"; then
    fail "genericdp ran example.com/e2e-selected's cleanup hook while pod e2e-selected held the unit"
  fi
  started=$(now)
  k -n "$NAMESPACE" delete pod e2e-selected --wait=true
  wait_for 60 "genericdp ($pod) to run example.com/e2e-selected's cleanup hook at the pod's release" \
    daemon_log_has "$pod" "e2e selected cleaned"
  timing "nodeSelector: pod deleted after the label -> cleanup hook ran" "$(seconds_between "$started" "$(now)")"
  local cleaned
  cleaned=$(k -n "$NAMESPACE" logs "$pod" --tail=-1 | grep -c -F "e2e selected cleaned" || true)
  [[ $cleaned == 1 ]] || fail "example.com/e2e-selected's unit was cleaned $cleaned times, not once"
  node_exec rm -f /dev/gdp-e2e-sel0
  k apply -k "$OVERLAY"
  wait_for 180 "the deployed ConfigMap to reach pod $pod again" pod_config_lacks "$pod" e2e-selected
}

NODE_FEATURE_CRD=$REPO_ROOT/tests/data/nfd-nodefeature-crd.yaml
NODE_FEATURE=genericdp-$NODE # nodefeature.object_name
LABELLED=example.com/e2e-labels

# node_features_overlay DIR: a kustomization in DIR of the way's overlay with
# the component users add to publish labels (deploy/kustomize/components/
# node-features), and one more config file: LABELLED with a label of its own.
node_features_overlay() {
  local dir=$1
  rm -rf "$dir"
  mkdir -p "$dir"
  cat >"$dir/labels.yaml" <<EOM
version: v1
resources:
  - name: $LABELLED
    match:
      - glob: /dev/gdp-e2e-lab*
    labels:
      $LABELLED.count: "{{ units | length }}"
EOM
  cat >"$dir/kustomization.yaml" <<EOM
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
# The component's RoleBinding subject too.
namespace: $NAMESPACE
resources:
  - $(realpath --relative-to="$dir" "$OVERLAY")
components:
  - $(realpath --relative-to="$dir" "$REPO_ROOT/deploy/kustomize/components/node-features")
configMapGenerator:
  - name: genericdp-config
    behavior: merge
    files: [labels.yaml]
    options: {disableNameSuffixHash: true}
EOM
}

# node_feature_field JSONPATH: a field of the node's NodeFeature object.
node_feature_field() {
  k -n "$NAMESPACE" get nodefeature "$NODE_FEATURE" -o "jsonpath=$1"
}

# labelled_labels_are JSON: the NodeFeature's spec.labels under LABELLED's
# name are exactly JSON (sorted keys); LAST_SEEN says what they are.
labelled_labels_are() {
  local json
  json=$(k -n "$NAMESPACE" get nodefeature "$NODE_FEATURE" -o json 2>&1) || {
    LAST_SEEN=$json
    return 1
  }
  LAST_SEEN=$(python3 -c 'import json, sys
labels = json.load(sys.stdin)["spec"].get("labels") or {}
print(json.dumps({k: v for k, v in labels.items() if k.startswith(sys.argv[1] + ".")}, sort_keys=True))' \
    "$LABELLED" <<<"$json") || return 1
  [[ $LAST_SEEN == "$1" ]]
}

# node_feature_without_e2e_dev NODE: NODE's NodeFeature names it and does not
# say example.com/e2e-dev is present (e2e/deploy.sh made those devices on
# NODE of the checks only).
node_feature_without_e2e_dev() {
  local name present
  LAST_SEEN=$(k -n "$NAMESPACE" get nodefeature "genericdp-$1" -o \
    'jsonpath={.metadata.labels.nfd\.node\.kubernetes\.io/node-name} {.spec.labels.example\.com/e2e-dev\.present}' 2>&1) ||
    return 1
  read -r name present <<<"$LAST_SEEN"
  [[ $name == "$1" && $present != true ]]
}

node_feature_version_is() {
  LAST_SEEN=$(node_feature_field '{.metadata.resourceVersion}') || return 1
  [[ $LAST_SEEN == "$1" ]]
}

check_node_feature() {
  log "check: node labels from discovery as a NodeFeature (the node-features component, NFD's CRD)"
  local dir=$ARTIFACTS/node-features pod new started written seconds version uid owner said
  local one="{\"$LABELLED.count\": \"1\", \"$LABELLED.present\": \"true\"}"
  local two="{\"$LABELLED.count\": \"2\", \"$LABELLED.present\": \"true\"}"
  k apply -f "$NODE_FEATURE_CRD"
  k wait --for=condition=Established crd/nodefeatures.nfd.k8s-sigs.io --timeout=60s ||
    fail "NFD's NodeFeature CRD ($NODE_FEATURE_CRD) was not Established within 60s"
  node_exec mknod -m 0600 /dev/gdp-e2e-lab0 c 1 3
  node_features_overlay "$dir"
  pod=$(daemon_pod)
  started=$(now)
  k apply -k "$dir" || fail "the API server refused the e2e overlay with the node-features component ($dir)"
  k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
    fail "the genericdp DaemonSet publishing node labels did not become ready within 180s"
  wait_for 60 "a genericdp pod (not $pod) publishing node labels to be Ready" new_daemon_pod_ready "$pod"
  pod=$LAST_SEEN
  LAST_SEEN=""
  wait_for 60 "NodeFeature $NAMESPACE/$NODE_FEATURE with the labels of one unit of $LABELLED" \
    labelled_labels_are "$one"
  timing "node labels: component applied -> NodeFeature written (rollout included)" \
    "$(seconds_between "$started" "$(now)")"
  expect "label nfd.node.kubernetes.io/node-name of NodeFeature $NODE_FEATURE" "$NODE" \
    "$(node_feature_field '{.metadata.labels.nfd\.node\.kubernetes\.io/node-name}')"
  uid=$(k -n "$NAMESPACE" get daemonset genericdp -o 'jsonpath={.metadata.uid}')
  owner=$(node_feature_field '{range .metadata.ownerReferences[*]}{.apiVersion} {.kind} {.name} {.uid};{end}')
  expect "the ownerReferences of NodeFeature $NODE_FEATURE" "apps/v1 DaemonSet genericdp $uid;" "$owner"
  said=$(node_feature_field '{.spec.labels.example\.com/e2e-dev\.present}')
  expect "the default label example.com/e2e-dev.present (a resource without labels:)" true "$said"
  # Other hardware, other labels: every other node of the cluster (kind) has
  # its own NodeFeature, without the e2e devices made on this one.
  local other
  for other in $(k get nodes -o 'jsonpath={.items[*].metadata.name}'); do
    [[ $other != "$NODE" ]] || continue
    LAST_SEEN=""
    wait_for 60 "NodeFeature genericdp-$other for node $other, without example.com/e2e-dev.present=true" \
      node_feature_without_e2e_dev "$other"
  done
  log "  spec.labels: $(node_feature_field '{.spec.labels}' | cut -c1-400)"

  log "check: a hotplug changes the labels within 2 s"
  started=$(now)
  node_exec mknod -m 0600 /dev/gdp-e2e-lab1 c 1 3
  LAST_SEEN=""
  wait_for 30 "NodeFeature $NODE_FEATURE with $LABELLED.count 2" labelled_labels_are "$two"
  timing "node labels: hotplug -> NodeFeature's count label follows (polled)" \
    "$(seconds_between "$started" "$(now)")"
  # genericdp's own figure, without the poll's kubectl and python3: from the
  # node made to its log line saying the write went through (one clock on
  # the local node; the node's on kind).
  written=$(k -n "$NAMESPACE" logs --timestamps "$pod" | grep -F "node labels: NodeFeature" |
    grep -F " holds " | tail -1 | cut -d' ' -f1)
  [[ -n $written ]] || fail "genericdp ($pod) logged no write of NodeFeature $NODE_FEATURE"
  seconds=$(seconds_between "$started" "$(date -d "$written" +%s.%N)")
  timing "node labels: hotplug -> NodeFeature written (genericdp's log)" "$seconds"
  awk -v s="$seconds" 'BEGIN { exit !(s <= 2) }' ||
    fail "genericdp wrote the NodeFeature ${seconds}s after the hotplug, more than 2s"

  log "check: no write at idle (10 s) nor across a genericdp pod restart (the resourceVersion stays)"
  version=$(node_feature_field '{.metadata.resourceVersion}')
  hold_for 10 "NodeFeature $NODE_FEATURE at resourceVersion $version while idle" \
    node_feature_version_is "$version"
  started=$(now)
  k -n "$NAMESPACE" delete pod "$pod" --wait=false
  wait_for 120 "a new genericdp pod (not $pod) to be Ready" new_daemon_pod_ready "$pod"
  new=$LAST_SEEN
  timing "node labels: genericdp pod deleted -> new pod Ready" "$(seconds_between "$started" "$(now)")"
  # Ready: every resource scanned once; the labels are compared within a
  # second of that (their health probes' first round, every 2 s, included).
  hold_for 10 "NodeFeature $NODE_FEATURE at resourceVersion $version after the restart" \
    node_feature_version_is "$version"
  labelled_labels_are "$two" || fail "NodeFeature $NODE_FEATURE after the restart: $LAST_SEEN"
  ! daemon_log_has "$new" "node labels:" ||
    fail "genericdp ($new) wrote or failed to write the labels after its restart: $(k -n "$NAMESPACE" logs "$new" | grep -F 'node labels:' | head -3)"

  log "back to the deployment without node labels"
  node_exec rm -f /dev/gdp-e2e-lab0 /dev/gdp-e2e-lab1
  k apply -k "$OVERLAY"
  k -n "$NAMESPACE" delete role,rolebinding genericdp-nodefeatures --ignore-not-found
  k delete -f "$NODE_FEATURE_CRD" --wait=true
  k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
    fail "the genericdp DaemonSet did not become ready again within 180s"
  wait_for 60 "a genericdp pod without node labels (not $new) to be Ready" new_daemon_pod_ready "$new"
}

STATE_DIR=/var/lib/genericdp # in the pod (GENERICDP_STATE_DIR), a hostPath

# pod_mode POD PATH: the permission bits of PATH in POD, in octal (a
# hostPath's are the node's).
pod_mode() {
  k -n "$NAMESPACE" exec "$1" -- python3 -c \
    'import os, stat, sys; print(format(stat.S_IMODE(os.lstat(sys.argv[1]).st_mode), "o"))' "$2" 2>&1 |
    tr -d '\r'
}

# readyz POD: "STATUS BODY" of GET /readyz in POD (kubectl's error for a
# non-2xx answer through the pods proxy names the status, not the body).
readyz() {
  k -n "$NAMESPACE" exec "$1" -- python3 -c 'import urllib.error, urllib.request
try:
    answer = urllib.request.urlopen("http://127.0.0.1:9090/readyz", timeout=5)
    print(answer.status, answer.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())' | tr -d '\r'
}

# proxied_readyz POD: what the API server's pods proxy relays of POD's /readyz.
proxied_readyz() {
  k get --raw "/api/v1/namespaces/$NAMESPACE/pods/$1:9090/proxy/readyz" 2>&1 || true
}

# pod_metric POD SERIES: the value of one series of POD's /metrics (pods proxy), as a
# number ("1", not prometheus_client's "1.0").
pod_metric() {
  k get --raw "/api/v1/namespaces/$NAMESPACE/pods/$1:9090/proxy/metrics" |
    awk -v s="$2" '$1 == s { print $2 + 0 }'
}

new_daemon_pod_running() {
  local pod
  pod=$(daemon_pod) || return 1
  LAST_SEEN=$pod
  [[ -n $pod && $pod != "$1" ]] &&
    [[ -n $(k -n "$NAMESPACE" get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.running.startedAt}') ]]
}

# serving_last_good POD: up (no restart), not Ready, the last good config's
# null served; LAST_SEEN says what was seen.
serving_last_good() {
  local restarts ready null
  restarts=$(k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.status.containerStatuses[0].restartCount}') || return 1
  ready=$(k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') || return 1
  null=$(node_quantity allocatable example.com/null) || return 1
  LAST_SEEN="restartCount $restarts, Ready $ready, allocatable example.com/null $null"
  [[ $restarts == 0 && $ready == False && $null == 4 ]]
}

readyz_serving_last_good() {
  LAST_SEEN=$(readyz "$1") || return 1
  [[ $LAST_SEEN == "503 "*"is invalid; serving the last good config, applied"* ]] || return 1
  LAST_SEEN="$LAST_SEEN; through the pods proxy: $(proxied_readyz "$1")"
  [[ $LAST_SEEN == *"(ServiceUnavailable)"* ]]
}

check_last_good() {
  log "check: an invalid ConfigMap (unquoted idVendor) reaches the pod; it keeps serving, Ready"
  local pod broken new uid started said
  pod=$(daemon_pod)
  pod_ready "$pod" || fail "genericdp pod $pod is not Ready before the check"
  broken=$(mktemp)
  cat "$E2E_ROOT/overlay/e2e.yaml" - >"$broken" <<'EOM'

  - name: example.com/e2e-unquoted
    match:
      - udev: {attributes: {idVendor: 259}}
EOM
  apply_e2e_config "$broken"
  rm -f "$broken"
  wait_for 180 "the broken ConfigMap to reach pod $pod" pod_config_has "$pod" "idVendor: 259"
  hold_for 5 "pod $pod Ready and serving (null 4) with the broken ConfigMap mounted" \
    old_config_ready "$pod"

  log "check: the last good config is kept on the node: $STATE_DIR/last-good-config.json, 0600 in a 0700 directory"
  expect "mode of $STATE_DIR (a hostPath) in $pod" 700 "$(pod_mode "$pod" "$STATE_DIR")"
  expect "mode of $STATE_DIR/last-good-config.json in $pod" 600 \
    "$(pod_mode "$pod" "$STATE_DIR/last-good-config.json")"

  log "check: the pod deleted, the new one starts with the broken ConfigMap: up, not Ready, serving the last good config"
  started=$(now)
  k -n "$NAMESPACE" delete pod "$pod" --wait=false
  wait_for 120 "a new genericdp pod (not $pod) running" new_daemon_pod_running "$pod"
  new=$LAST_SEEN
  wait_for 60 "genericdp ($new) to log that it serves the last good config" \
    daemon_log_has "$new" "config refused at start, serving the last good config"
  wait_quantity allocatable example.com/null 4 60
  timing "last good: pod deleted -> new pod serves the last good config (null 4)" \
    "$(seconds_between "$started" "$(now)")"
  LAST_SEEN=""
  wait_for 30 "/readyz of $new to refuse, saying it serves the last good config" \
    readyz_serving_last_good "$new"
  log "  /readyz: $(cut -c1-300 <<<"$LAST_SEEN")"
  expect "genericdp_config_source{source=\"last_good\"} of $new" 1 \
    "$(pod_metric "$new" 'genericdp_config_source{source="last_good"}')"
  hold_for 60 "pod $new up and not Ready, serving the last good config" serving_last_good "$new"
  readyz_serving_last_good "$new" || fail "/readyz of $new changed: $LAST_SEEN"

  log "check: a consumer pod still gets its device"
  consumer_manifest e2e-last-good 1 | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-last-good --timeout=120s ||
    fail "pod e2e-last-good (example.com/e2e-dev: 1) did not become Ready while genericdp serves the last good config"
  said=$(k -n "$NAMESPACE" exec e2e-last-good -- env | tr -d '\r' | sed -n 's/^E2E_DEV_PATHS=//p')
  [[ $said == /dev/gdp-e2e-dev[01] ]] || fail "E2E_DEV_PATHS in pod e2e-last-good is '$said'"
  k -n "$NAMESPACE" delete pod e2e-last-good --wait=false

  log "check: the good ConfigMap applied again, the same pod becomes Ready"
  uid=$(pod_identity "$new")
  started=$(now)
  k apply -k "$OVERLAY"
  wait_for 180 "genericdp pod $new to become Ready with the good ConfigMap" pod_ready "$new"
  timing "last good: good ConfigMap applied -> the same pod Ready" "$(seconds_between "$started" "$(now)")"
  expect "genericdp pod $new once Ready (uid, restarts)" "$uid" "$(pod_identity "$new")"
  expect "genericdp_config_source{source=\"config\"} of $new" 1 \
    "$(pod_metric "$new" 'genericdp_config_source{source="config"}')"
}

# daemon_open POD PATH: what opening PATH read-write inside genericdp says ("" = opened).
daemon_open() {
  k -n "$NAMESPACE" exec "$1" -- python3 -c "import os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDWR))
except OSError as e:
    print(e.strerror)" "$2" 2>&1 | tr -d '\r'
}

check_privileged() {
  log "check: the privileged variant (deploy/kustomize/components/privileged) is accepted and works"
  local pod said started
  pod=$(daemon_pod)
  said=$(daemon_open "$pod" /dev/gdp-e2e-dev0)
  [[ $said == *"Operation not permitted"* ]] ||
    fail "the unprivileged genericdp pod $pod should not open /dev/gdp-e2e-dev0; it said: '${said:-opened}'"
  started=$(now)
  k apply -k "$OVERLAY-privileged" || fail "the API server refused the privileged variant"
  k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
    fail "the privileged genericdp DaemonSet did not become ready within 180s"
  wait_for 60 "a privileged genericdp pod (not $pod) to be Ready" new_daemon_pod_ready "$pod"
  timing "privileged variant applied -> pod Ready" "$(seconds_between "$started" "$(now)")"
  pod=$(daemon_pod)
  expect "securityContext.privileged of $pod" true \
    "$(k -n "$NAMESPACE" get pod "$pod" -o 'jsonpath={.spec.containers[0].securityContext.privileged}')"
  said=$(daemon_open "$pod" /dev/gdp-e2e-dev0)
  [[ $said != *"Operation not permitted"* ]] ||
    fail "the privileged genericdp pod $pod may not open /dev/gdp-e2e-dev0: $said"
  wait_quantity allocatable example.com/e2e-dev 2 30

  log "back to the unprivileged deployment"
  k apply -k "$OVERLAY"
  k -n "$NAMESPACE" rollout status daemonset/genericdp --timeout=180s ||
    fail "the genericdp DaemonSet did not become ready again within 180s"
  wait_for 60 "an unprivileged genericdp pod (not $pod) to be Ready" new_daemon_pod_ready "$pod"
}

# docs_output_has FILE TEXT...: FILE shows each TEXT, runs of blanks squeezed to one.
docs_output_has() {
  local text want
  text=$(tr -s ' \t' '  ' <"$1")
  shift
  for want; do
    [[ $text == *"$want"* ]] || return 1
  done
}

# docs_command_prints COMMAND FILE TEXT...: COMMAND, run again, prints each TEXT.
docs_command_prints() {
  local command=$1 out=$2
  shift 2
  eval "$command" </dev/null >"$out" 2>&1 && docs_output_has "$out" "$@"
}

# The kubectl commands of the docs' sh blocks that need a node, but the quick
# start's (troubleshooting, deploy.md; the quick start's run on the kind
# cluster installed as it says, e2e/kind/install.sh use), as
# tests/docs_commands.py extracts them from the pages with the placeholders
# swapped for this node's names: each exits 0 and prints what its page shows.
check_docs_commands() {
  log "check: the docs' kubectl commands run on the node and print what the docs show"
  local dir=$ARTIFACTS/docs-commands where command out status
  local -a fields
  rm -rf "$dir"
  mkdir -p "$dir"
  k apply -f "$REPO_ROOT/tests/data/nfd-nodefeature-crd.yaml" >/dev/null
  k wait --for=condition=Established crd/nodefeatures.nfd.k8s-sigs.io --timeout=60s >/dev/null ||
    fail "the NodeFeature CRD (tests/data/nfd-nodefeature-crd.yaml) was not established within 60s"
  python3 "$REPO_ROOT/tests/docs_commands.py" node "$dir" "$CONSUMER_IMAGE" >"$dir/commands.tsv" ||
    fail "tests/docs_commands.py could not list the docs' node commands"
  while IFS=$'\t' read -r -a fields; do
    where=${fields[0]} command=${fields[1]} out=$dir/out.txt
    status=0
    eval "$command" </dev/null >"$out" 2>&1 || status=$?
    ((status == 0)) || fail "$where: '$command' exited $status: $(cat "$out")"
    if ((${#fields[@]} > 2)) && ! docs_output_has "$out" "${fields[@]:2}"; then
      wait_for 30 "$where: '$command' to print: ${fields[*]:2}" \
        docs_command_prints "$command" "$out" "${fields[@]:2}"
    fi
    log "ok: $where: $command"
  done <"$dir/commands.tsv"
}

ALL_CHECKS=(
  startup_probes server_dry_run capacity consumer_pod allocate_devices over_request hotplug health hot_reload cleanup_hook
  node_selector last_good unbounded unplug_in_use kubelet_restarts daemon_pod_recreated privileged
  docs_commands node_feature
)
# What each way runs by default: kind (a worker of the kind e2e's cluster,
# e2e/kind/run.sh) every check; the local node only what kind does not show
# (docs/contributing/testing.md, "kind"): a kubelet with another --root-dir
# (the kubelet-root-dir component), whose PodResources List a consumer pod's
# cleanup hook depends on.
KIND_CHECKS=("${ALL_CHECKS[@]}")
LOCAL_CHECKS=(capacity consumer_pod cleanup_hook)

main() {
  local check
  if ((!$#)); then
    if [[ $E2E_WAY == kind ]]; then set -- "${KIND_CHECKS[@]}"; else set -- "${LOCAL_CHECKS[@]}"; fi
  fi
  for check in "$@"; do
    [[ " ${ALL_CHECKS[*]} " == *" $check "* ]] ||
      { echo "error: no check '$check'; the checks: ${ALL_CHECKS[*]}" >&2; exit 2; }
  done
  k -n "$NAMESPACE" delete pod "$CONSUMER" e2e-too-many e2e-not-admitted e2e-after-restarts e2e-second-unit \
    e2e-unplug e2e-selected e2e-last-good --ignore-not-found --wait=true
  k -n "$NAMESPACE" delete pod -l genericdp-e2e=shared --ignore-not-found --wait=true
  k label node "$NODE" "$SELECTED_LABEL-" >/dev/null
  node_exec rm -f "$FLAG" /dev/gdp-e2e-hp0 /dev/gdp-e2e-hp1 /dev/gdp-e2e-unplug0 /dev/gdp-e2e-sel0 \
    /dev/gdp-e2e-lab0 /dev/gdp-e2e-lab1
  log "node $NODE, daemon pod $(daemon_pod), image $IMAGE"
  for check in "$@"; do
    "check_$check"
  done
  log "all e2e checks passed: $*"
}

# Run when executed; sourcing only defines the checks (tests/test_packaging.py).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  shift
  main "$@"
fi
