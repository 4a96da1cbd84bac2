#!/usr/bin/env bash
# Different hardware per node from one ConfigMap, on the installed cluster:
# the first worker gets two fake devices of example.com/fleet-a, the second
# one of example.com/fleet-b (character devices made in each node, as
# e2e/deploy.sh does), each node labelled for its resource; one config with a
# `nodeSelector` per resource replaces the running one (genericdp reloads
# it; the demo's example.com/null goes from 4 to 3, a change every node
# applies). Then each node advertises only its own resource, and the
# scheduler places a pod asking for fleet-a on the first worker and one asking
# for fleet-b on the second. Everything made here is removed afterwards, the
# original config back on every node (the quick start's reload check, run
# next, reads that in the log).
#   e2e/kind/fleet.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
VERSION=$(awk -F'"' '/^appVersion:/ { print $2 }' "$REPO_ROOT/deploy/helm/genericdp/Chart.yaml")
A=$CLUSTER-worker
B=$CLUSTER-worker2
work=$ARTIFACTS/fleet
mkdir -p "$work"

docker exec "$A" sh -c 'rm -f /dev/gdp-fleet-*; mknod -m 0666 /dev/gdp-fleet-a0 c 1 3; mknod -m 0666 /dev/gdp-fleet-a1 c 1 3'
docker exec "$B" sh -c 'rm -f /dev/gdp-fleet-*; mknod -m 0666 /dev/gdp-fleet-b0 c 1 3'
k label node "$A" example.com/fleet=a --overwrite >/dev/null
k label node "$B" example.com/fleet=b --overwrite >/dev/null
k -n kube-system get configmap genericdp-config -o jsonpath='{.data.config\.yaml}' >"$work/original.yaml"
cat >"$work/config.yaml" <<'YAML'
version: v1
resources:
  - name: example.com/null
    match: [{glob: /dev/null}]
    count: 3
  - name: example.com/fleet-a
    match: [{glob: /dev/gdp-fleet-a*}]
    nodeSelector:
      matchLabels: {example.com/fleet: a}
  - name: example.com/fleet-b
    match: [{glob: /dev/gdp-fleet-b*}]
    nodeSelector:
      matchLabels: {example.com/fleet: b}
YAML
k -n kube-system create configmap genericdp-config --from-file=config.yaml="$work/config.yaml" \
  --dry-run=client -o yaml | k apply -f - >/dev/null
started=$(now)

# has NODE RESOURCE N: the node's allocatable RESOURCE is N ("" counts as 0).
has() {
  LAST_SEEN=$(k get node "$1" -o "jsonpath={.status.allocatable.${2//./\\.}}")
  [[ ${LAST_SEEN:-0} == "$3" ]]
}
wait_for 150 "$A advertising 2 example.com/fleet-a" has "$A" example.com/fleet-a 2
wait_for 60 "$B advertising 1 example.com/fleet-b" has "$B" example.com/fleet-b 1
timing "fleet: one ConfigMap, each node its own hardware" "$(seconds_between "$started" "$(now)")"
for node in "$A" "$CLUSTER-control-plane"; do
  has "$node" example.com/fleet-b 0 || fail "$node advertises example.com/fleet-b ($LAST_SEEN): its nodeSelector does not match"
done
for node in "$B" "$CLUSTER-control-plane"; do
  has "$node" example.com/fleet-a 0 || fail "$node advertises example.com/fleet-a ($LAST_SEEN): its nodeSelector does not match"
done

for r in a b; do
  want=2
  [[ $r == b ]] && want=1
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: fleet-$r, namespace: default}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  containers:
    - name: c
      image: $REGISTRY/genericdp:$VERSION
      command: [sh, -c, 'ls /dev/gdp-fleet-*; sleep 3600']
      resources: {limits: {example.com/fleet-$r: "$want"}}
YAML
done
k wait --for=condition=Ready pod/fleet-a pod/fleet-b --timeout=120s >/dev/null
[[ $(k get pod fleet-a -o jsonpath='{.spec.nodeName}') == "$A" ]] || fail "fleet-a was not placed on $A"
[[ $(k get pod fleet-b -o jsonpath='{.spec.nodeName}') == "$B" ]] || fail "fleet-b was not placed on $B"
k logs fleet-a | grep -qx /dev/gdp-fleet-a1 || fail "fleet-a does not see its two devices: $(k logs fleet-a | xargs)"
k logs fleet-b | grep -qx /dev/gdp-fleet-b0 || fail "fleet-b does not see its device: $(k logs fleet-b | xargs)"
log "ok: the scheduler placed fleet-a on $A and fleet-b on $B, each with its node's devices"

k delete pod fleet-a fleet-b --wait=true >/dev/null
k -n kube-system create configmap genericdp-config --from-file=config.yaml="$work/original.yaml" \
  --dry-run=client -o yaml | k apply -f - >/dev/null
k label node "$A" "$B" example.com/fleet- >/dev/null
docker exec "$A" sh -c 'rm -f /dev/gdp-fleet-*'
docker exec "$B" sh -c 'rm -f /dev/gdp-fleet-*'
for node in $(k get nodes -o name); do
  wait_for 150 "${node#node/} back on the original config (example.com/null: 4)" has "${node#node/}" example.com/null 4
done
