#!/usr/bin/env bash
# A worker lost, on the installed cluster: a pod holding one example.com/null
# of the second worker (tolerating the node's unreachability for 5 s, instead
# of the default 300), then that worker's container stopped (docker stop, as
# a machine going away). Checked: the node turns NotReady (Unknown), the
# consumer pod is evicted by the taint manager (deletion requested, stuck
# Terminating since no kubelet confirms it), genericdp's pod there stays (a
# DaemonSet tolerates unreachable nodes) and counts as unavailable, while the
# other nodes keep serving and take a new pod. The lost node's pods are
# then force-deleted, as an administrator does once the machine is gone.
#   e2e/kind/lost-worker.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
VERSION=$(awk -F'"' '/^appVersion:/ { print $2 }' "$REPO_ROOT/deploy/helm/genericdp/Chart.yaml")
LOST=$CLUSTER-worker2
ALIVE=$CLUSTER-worker

consumer() {
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: default}
spec:
  nodeSelector: {kubernetes.io/hostname: $2}
  terminationGracePeriodSeconds: 0
  tolerations:
    - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
    - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
  containers:
    - name: c
      image: $REGISTRY/genericdp:$VERSION
      command: [sleep, "3600"]
      resources: {limits: {example.com/null: "1"}}
YAML
  k wait --for=condition=Ready "pod/$1" --timeout=120s >/dev/null
}

node_unknown() {
  LAST_SEEN=$(k get node "$LOST" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
  [[ $LAST_SEEN == Unknown ]]
}
evicted() {
  LAST_SEEN=$(k get pod lost-consumer -o jsonpath='{.metadata.deletionTimestamp}' 2>&1) || return 0
  [[ -n $LAST_SEEN ]]
}
ds_unavailable_1() {
  LAST_SEEN=$(k -n kube-system get daemonset genericdp -o jsonpath='{.status.numberAvailable}/{.status.desiredNumberScheduled}')
  [[ $LAST_SEEN == 2/3 ]]
}

consumer lost-consumer "$LOST"
daemon=$(k -n kube-system get pods -l app.kubernetes.io/name=genericdp --field-selector "spec.nodeName=$LOST" -o name)
[[ -n $daemon ]] || fail "no genericdp pod on $LOST"
log "stopping $LOST (docker stop)"
started=$(now)
docker stop "$LOST" >/dev/null
wait_for 150 "$LOST NotReady (Ready=Unknown)" node_unknown
timing "lost worker: node Ready=Unknown after docker stop" "$(seconds_between "$started" "$(now)")"
wait_for 90 "the consumer on $LOST evicted (deletion requested)" evicted
timing "lost worker: its consumer pod evicted" "$(seconds_between "$started" "$(now)")"
wait_for 60 "the DaemonSet counting $LOST's pod unavailable" ds_unavailable_1
k -n kube-system get "$daemon" -o jsonpath='{.metadata.deletionTimestamp}' | grep -q . &&
  fail "genericdp's pod on the lost node was evicted; a DaemonSet's pods tolerate unreachable nodes"
consumer alive-consumer "$ALIVE"
log "ok: $LOST lost: NotReady, its consumer evicted, genericdp's pod kept (unavailable); $ALIVE still serves"
k delete pod alive-consumer --wait=true >/dev/null
k delete pod lost-consumer --force --grace-period=0 >/dev/null 2>&1 || true
