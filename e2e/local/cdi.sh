#!/usr/bin/env bash
# CDI end to end on the local node, with a containerd that supports it
# (Debian 13's 1.7, e2e/local/containerd-cdi.sh; Debian 12's 1.6 ignores CDI):
# up with enable_cdi, deploy, add the resources with `cdi: true` (cdi.yaml)
# through the ConfigMap, and check that
#   - genericdp wrote its CDI spec, naming the unit;
#   - a pod asking for the resource runs with the device node, and containerd
#     resolved the unit's CDI name from the spec for that container;
#   - a resource with allocate.deviceNodes (group 4242, 0660) gives a
#     non-root container in that group its node, and one not in it is
#     refused; a node without it keeps the host's mode and owner;
#   - with the spec file gone, containerd refuses a new such container
#     ("unresolvable CDI devices"): the runtime uses the spec, not only the
#     device nodes of the Allocate answer.
# Then down (also on failure). Root.
#   KUBE_BIN_DIR=DIR e2e/local/cdi.sh IMAGES_DIR
set -euo pipefail
images=${1:?usage: KUBE_BIN_DIR=DIR e2e/local/cdi.sh IMAGES_DIR}
# shellcheck source-path=SCRIPTDIR source=../checks.sh
source "$(dirname "${BASH_SOURCE[0]}")/../checks.sh" local

SPEC=/var/run/cdi/genericdp-example.com_e2e-cdi.json
CDI_CONTAINERD=${CDI_CONTAINERD:-$ARTIFACTS/containerd-cdi}

cdi_pod() {
  cat <<EOM
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
    - name: consumer
      image: $CONSUMER_IMAGE
      imagePullPolicy: Never
      command: [sleep, "1000000"]
      resources:
        limits:
          example.com/e2e-cdi: 1
EOM
}

# container_id POD: the containerd id of the pod's container.
container_id() {
  k -n "$NAMESPACE" get pod "$1" -o 'jsonpath={.status.containerStatuses[0].containerID}' |
    sed 's|^containerd://||'
}

# pod_waiting_reason POD -> why its container is not running (CreateContainerError...).
pod_waiting_message() {
  LAST_SEEN=$(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}')
  [[ $LAST_SEEN == *"$2"* ]]
}

finish() {
  local status=$?
  trap - EXIT
  "$LOCAL_DIR/down.sh" || status=1
  exit "$status"
}
trap finish EXIT

started=$(now)
"$LOCAL_DIR/containerd-cdi.sh" "$CDI_CONTAINERD"
CONTAINERD_BIN_DIR=$CDI_CONTAINERD CDI=1 "$LOCAL_DIR/up.sh" "$images"
"$E2E_ROOT/deploy.sh" local
node_exec mknod -m 0600 /dev/gdp-e2e-cdi0 c 10 229
node_exec mknod -m 0600 /dev/gdp-e2e-nr0 c 1 3

log "check: a resource with cdi: true gets a CDI spec"
combined=$(mktemp)
cat "$E2E_ROOT/overlay/e2e.yaml" >"$combined"
sed -n '/^resources:/,$p' "$LOCAL_DIR/cdi.yaml" | sed 1d >>"$combined"
apply_e2e_config "$combined"
rm -f "$combined"
wait_quantity allocatable example.com/e2e-cdi 1 120
spec_names_unit() { [[ -s $SPEC ]] && grep -q '"name"' "$SPEC"; }
wait_for 30 "genericdp to write $SPEC" spec_names_unit
log "  $SPEC: $(tr -d ' \n' <"$SPEC" | cut -c1-300)"
read -r kind name < <(python3 -c 'import json, sys
spec = json.load(open(sys.argv[1]))
print(spec.get("kind", "-"), (spec.get("devices") or [{}])[0].get("name", ""))' "$SPEC")
[[ $kind == example.com/e2e-cdi && -n $name ]] ||
  fail "the CDI spec $SPEC should have kind example.com/e2e-cdi and a device (kind '$kind', device '$name')"

log "check: a pod asking for example.com/e2e-cdi runs with the device, resolved by containerd from the spec"
cdi_pod e2e-cdi | k -n "$NAMESPACE" apply -f -
k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-cdi --timeout=120s ||
  fail "pod e2e-cdi (example.com/e2e-cdi: 1) did not become Ready"
k -n "$NAMESPACE" exec e2e-cdi -- test -c /dev/gdp-e2e-cdi0 ||
  fail "/dev/gdp-e2e-cdi0 is not a character device in pod e2e-cdi"
id=$(container_id e2e-cdi)
# containerd 1.7 logs the CDI names it injects for each container.
cdi_log=$(grep -F "Container $id: CDI devices from CRI Config.CDIDevices:" "$LOG_DIR/containerd.log" || true)
[[ $cdi_log == *"[$kind=$name]"* ]] ||
  fail "containerd did not log the CDI device $kind=$name for container $id (got: '${cdi_log:-nothing}')"
log "  containerd: ${cdi_log#*msg=}"
# No allocate.deviceNodes: the host node's mode and owner (0600, root's).
expect "stat -c '%A %u %g' /dev/gdp-e2e-cdi0 in pod e2e-cdi (the host's)" "crw------- 0 0" \
  "$(k -n "$NAMESPACE" exec e2e-cdi -- stat -c '%A %u %g' /dev/gdp-e2e-cdi0 | tr -d '\r')"

log "check: allocate.deviceNodes gives a non-root container its node (group 4242, 0660) through the CDI spec"
wait_quantity allocatable example.com/e2e-nonroot 2 60
device_pod_manifest e2e-cdi-nr-in example.com/e2e-nonroot nonroot \
  '{runAsUser: 1000, runAsGroup: 1000, supplementalGroups: [4242]}' | k -n "$NAMESPACE" apply -f -
device_pod_manifest e2e-cdi-nr-out example.com/e2e-nonroot nonroot '{runAsUser: 1000, runAsGroup: 1000}' |
  k -n "$NAMESPACE" apply -f -
k -n "$NAMESPACE" wait --for=condition=Ready pod/e2e-cdi-nr-in pod/e2e-cdi-nr-out --timeout=120s ||
  fail "the non-root pods of example.com/e2e-nonroot did not become Ready"
expect "/dev/gdp-e2e-nr0 on $NODE" "crw------- 0 0" "$(stat -c '%A %u %g' /dev/gdp-e2e-nr0)"
nonroot_pods_see e2e-cdi-nr-in e2e-cdi-nr-out /dev/gdp-e2e-nr0
k -n "$NAMESPACE" delete pod -l genericdp-e2e=nonroot --wait=false

log "check: without the spec, containerd refuses the device: the runtime reads it"
mv "$SPEC" "$ARTIFACTS/cdi-spec-moved.json"
k -n "$NAMESPACE" delete pod e2e-cdi --wait=true
cdi_pod e2e-cdi-nospec | k -n "$NAMESPACE" apply -f -
LAST_SEEN=""
wait_for 60 "pod e2e-cdi-nospec to fail with unresolvable CDI devices" \
  pod_waiting_message e2e-cdi-nospec "unresolvable CDI devices"
log "  kubelet: $LAST_SEEN"
k -n "$NAMESPACE" delete pod e2e-cdi-nospec --wait=false
timing "CDI run (containerd 1.7): everything" "$(seconds_between "$started" "$(now)")"
log "CDI end to end passed with $("$CDI_CONTAINERD/containerd" --version | awk '{ print $3 }')"
