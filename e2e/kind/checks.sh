#!/usr/bin/env bash
# The checks against the real kubelet of the kind node, in order. Each has a
# timeout and says what did not happen; a failure dumps the DaemonSet, pods,
# logs, node and kubelet log (lib.sh, dump_diagnostics) and exits 1. Every
# latency is printed as a TIMING line. Run after deploy.sh:
#   e2e/kind/checks.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require docker kubectl

CONSUMER=e2e-consumer
FLAG=/var/lib/genericdp-e2e/unhealthy
# Every resource of the e2e config (deploy/kustomize/base/config.yaml and
# overlay/e2e.yaml): each must register again after a kubelet restart.
RESOURCES=(
  example.com/null example.com/zero example.com/loop example.com/fuse
  example.com/e2e-dev example.com/e2e-hotplug example.com/e2e-health
)

in_pod() {
  k -n "$NAMESPACE" exec "$CONSUMER" -- "$@"
}

# expect WHAT EXPECTED ACTUAL
expect() {
  [[ $3 == "$2" ]] || fail "$1: expected '$2', got '$3'"
}

consumer_manifest() {
  local name=$1 dev=$2
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {app.kubernetes.io/name: genericdp-e2e-consumer}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: consumer
      image: $IMAGE
      imagePullPolicy: Never
      command: [sleep, infinity]
      resources:
        limits:
          example.com/e2e-dev: $dev
          example.com/null: 1
EOF
}

check_capacity() {
  log "check: node capacity and allocatable show the demo and e2e resources"
  local started spec
  started=$(now)
  for spec in example.com/null=4 example.com/zero=1 example.com/e2e-dev=1 example.com/e2e-health=2; do
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

check_consumer_pod() {
  log "check: a pod requesting example.com/e2e-dev gets the device node, env and mount"
  local started
  started=$(now)
  consumer_manifest "$CONSUMER" 1 | k -n "$NAMESPACE" apply -f -
  k -n "$NAMESPACE" wait --for=condition=Ready "pod/$CONSUMER" --timeout=120s ||
    fail "pod $CONSUMER (example.com/e2e-dev: 1) did not become Ready within 120s"
  timing "pod with example.com/e2e-dev created -> Ready" "$(seconds_between "$started" "$(now)")"

  in_pod test -c /dev/gdp-e2e-dev0 ||
    fail "/dev/gdp-e2e-dev0 is not a character device inside pod $CONSUMER"
  expect "major:minor of /dev/gdp-e2e-dev0 in the pod" "1:3" \
    "$(in_pod stat -c '%t:%T' /dev/gdp-e2e-dev0)"
  in_pod sh -c 'echo ok > /dev/gdp-e2e-dev0' ||
    fail "pod $CONSUMER cannot write /dev/gdp-e2e-dev0: the device cgroup did not allow it"
  expect "E2E_DEV_PATHS in the pod" /dev/gdp-e2e-dev0 "$(in_pod printenv E2E_DEV_PATHS)"
  expect "E2E_NODE in the pod" "$NODE" "$(in_pod printenv E2E_NODE)"
  expect "DEMO_NULL in the pod (example.com/null)" /dev/null "$(in_pod printenv DEMO_NULL)"
  [[ -n $(in_pod printenv E2E_DEVICE_IDS) ]] || fail "E2E_DEVICE_IDS is empty in the pod"
  expect "/e2e-share/hello.txt in the pod" "hello from $NODE" \
    "$(in_pod cat /e2e-share/hello.txt)"
  if in_pod touch /e2e-share/written-by-pod 2>/dev/null; then
    fail "/e2e-share is writable in the pod; the allocate mount says readOnly: true"
  fi

  log "check: a second pod wanting the only e2e-dev unit stays Pending"
  consumer_manifest e2e-pending 1 | k -n "$NAMESPACE" apply -f -
  wait_for 60 "pod e2e-pending to be Unschedulable (Insufficient example.com/e2e-dev)" \
    pod_unschedulable e2e-pending
  k -n "$NAMESPACE" delete pod e2e-pending --wait=false
}

pod_unschedulable() {
  [[ $(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].reason}') == Unschedulable ]]
}

check_hotplug() {
  log "check: device nodes created and removed in the kind node change capacity"
  local started
  started=$(now)
  node_exec sh -c 'mknod -m 0666 /dev/gdp-e2e-hp0 c 1 3 && mknod -m 0666 /dev/gdp-e2e-hp1 c 1 3'
  wait_quantity capacity example.com/e2e-hotplug 2 30
  timing "hotplug: 2 nodes created -> capacity 2" "$(seconds_between "$started" "$(now)")"
  wait_quantity allocatable example.com/e2e-hotplug 2 10

  started=$(now)
  node_exec rm /dev/gdp-e2e-hp1
  wait_quantity capacity example.com/e2e-hotplug 1 30
  timing "hotplug: 1 node removed -> capacity 1" "$(seconds_between "$started" "$(now)")"
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

# kubelet_socket_since T: the kubelet created kubelet.sock after T; sets SOCKET_AT.
SOCKET_AT=""
kubelet_socket_since() {
  SOCKET_AT=$(node_exec stat -c %.9Y /var/lib/kubelet/device-plugins/kubelet.sock) || return 1
  awk -v s="$SOCKET_AT" -v t="$1" 'BEGIN { exit !(s + 0 > t + 0) }'
}

# all_registered_since T: the kubelet logged a registration of every resource
# after T; sets REGISTERED_AT to the last of them (journal time, microseconds).
REGISTERED_AT=""
all_registered_since() {
  local since=$1 journal resource at
  journal=$(node_exec journalctl -u kubelet --no-pager -o short-unix --since "@${since%.*}") ||
    return 1
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

check_kubelet_restart() {
  log "check: after a kubelet restart every resource registers again, without a pod restart"
  local pod before issued took resource
  pod=$(daemon_pod)
  before=$(pod_identity "$pod")
  issued=$(now)
  node_exec systemctl restart kubelet
  LAST_SEEN=""
  wait_for 60 "the restarted kubelet to create kubelet.sock again" kubelet_socket_since "$issued"
  LAST_SEEN=""
  wait_for 30 "every genericdp resource to register with the restarted kubelet" \
    all_registered_since "$SOCKET_AT"
  took=$(seconds_between "$SOCKET_AT" "$REGISTERED_AT")
  timing "kubelet restart: kubelet.sock created -> all ${#RESOURCES[@]} resources registered" "$took"
  if awk -v t="$took" 'BEGIN { exit !(t > 1.0) }' && [[ -n ${GITHUB_ACTIONS:-} ]]; then
    echo "::warning title=slow re-registration::${took}s after the kubelet restart (target: under 1 s)"
  fi
  for resource in example.com/null example.com/e2e-dev example.com/e2e-health; do
    wait_quantity allocatable "$resource" "$(expected_after_restart "$resource")" 60
  done
  timing "kubelet restart: restart issued -> allocatable back in node status" \
    "$(seconds_between "$issued" "$(now)")"
  expect "genericdp pod $pod across the kubelet restart (uid, restarts)" "$before" \
    "$(pod_identity "$pod")"
  pod_ready "$CONSUMER" || fail "pod $CONSUMER is no longer Ready after the kubelet restart"
}

expected_after_restart() {
  case $1 in
    example.com/null) echo 4 ;;
    example.com/e2e-dev) echo 1 ;;
    example.com/e2e-health) echo 2 ;;
  esac
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
  cat "$E2E_DIR/overlay/e2e.yaml" - >"$edited" <<'EOF'

  - name: example.com/e2e-reload
    match:
      - glob: /dev/random
    count: 2
EOF
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
  expect "genericdp pod $pod across the reload (uid, restarts)" "$before" "$(pod_identity "$pod")"

  log "check: an invalid edit is refused and the running config keeps serving"
  cat "$edited" - >"$invalid" <<'EOF'

  - name: not a resource name
    match:
      - glob: /dev/urandom
EOF
  apply_e2e_config "$invalid"
  wait_for 180 "the invalid ConfigMap to reach pod $pod" pod_config_has "$pod" "not a resource name"
  hold_for 10 "the old config serving (e2e-reload 2, null 4, pod Ready) after an invalid edit" \
    old_config_serving "$pod"
  expect "genericdp pod $pod after the invalid edit (uid, restarts)" "$before" \
    "$(pod_identity "$pod")"
  log "  genericdp's last log lines:"
  k -n "$NAMESPACE" logs "$pod" --tail=5 >&2 || true

  log "check: restoring the deployed config removes example.com/e2e-reload"
  k apply -k "$E2E_DIR/overlay"
  started=$(now)
  wait_for 180 "the restored ConfigMap to reach pod $pod" pod_config_lacks "$pod" e2e-reload
  wait_quantity allocatable example.com/e2e-reload 0 30
  timing "hot reload: resource removed -> allocatable 0 (from ConfigMap apply)" \
    "$(seconds_between "$started" "$(now)")"
  expect "genericdp pod $pod after the restore (uid, restarts)" "$before" "$(pod_identity "$pod")"
  rm -f "$edited" "$invalid"
}

main() {
  k -n "$NAMESPACE" delete pod "$CONSUMER" e2e-pending --ignore-not-found --wait=true
  node_exec rm -f "$FLAG" /dev/gdp-e2e-hp0 /dev/gdp-e2e-hp1
  log "node $NODE, daemon pod $(daemon_pod), image $IMAGE"
  check_capacity
  check_consumer_pod
  check_hotplug
  check_health
  check_kubelet_restart
  check_hot_reload
  log "all e2e checks passed"
}

# Run when executed; sourcing only defines the checks (tests/test_packaging.py).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
