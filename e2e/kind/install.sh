#!/usr/bin/env bash
# Run on the kind cluster what the docs tell users to run, verbatim: the
# commands come from the docs' sh blocks (`python3 tests/docs_commands.py
# kind REGISTRY DIR IMAGE`, REGISTRY swapped for the run's registry, NODE for
# a worker), so a changed page changes what runs here.
#   e2e/kind/install.sh push                 the documented `docker push`
#   e2e/kind/install.sh install kustomize|helm
#   e2e/kind/install.sh uninstall kustomize|helm
#   e2e/kind/install.sh use                  the quick start's first hour on
#     the installed cluster: its node, genericdp's view of it, demo-consumer.yaml
#     (the run's image for busybox) holding a device, the config reload in the
#     log; one shell, so `POD=$(...)` carries, each printing what its page shows
#   e2e/kind/install.sh load                 the quick start's `kind load`
# `helm` is Helm 3 (HELM, default helm3 from e2e/local/npm-tools.sh): Helm 4
# refuses a plain-HTTP registry without --plain-http, which the docs'
# commands do not say. Commands run from the checkout's root where the
# cluster is (inns), with the kind cluster's kubeconfig.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
action=${1:?usage: e2e/kind/install.sh push | install WAY | uninstall WAY | use | load}
way=${2:-image}
case $action in
  push) action=install ;;
  use) way=quickstart ;;
  load) way=image ;;
esac
VERSION=$(awk -F'"' '/^appVersion:/ { print $2 }' "$REPO_ROOT/deploy/helm/genericdp/Chart.yaml")
work=$ARTIFACTS/first-hour
rm -rf "$work"
mkdir -p "$work"
steps=$(python3 "$REPO_ROOT/tests/docs_commands.py" kind "$REGISTRY" "$work" "$REGISTRY/genericdp:$VERSION")

# The quick start's commands run in this shell (a variable one sets is the
# next one's), kubectl where the cluster is; `kind` finds the cluster by name.
kubectl() {
  inns kubectl "$@"
}
export KIND_CLUSTER_NAME=$CLUSTER
NODE=$CLUSTER-worker

# prints FILE TEXT...: FILE has every TEXT, blanks squeezed as the docs show them.
prints() {
  local file=$1 text want
  shift
  text=$(tr -s ' \t' '  ' <"$file")
  for want; do
    [[ $text == *"$want"* ]] || return 1
  done
}
# again COMMAND FILE TEXT...: COMMAND, run again, prints each TEXT.
again() {
  local command=$1 out=$2
  shift 2
  eval "$command" </dev/null >"$out" 2>&1 && prints "$out" "$@"
}

ran=0
while IFS=$'\t' read -r -a fields; do
  where=${fields[0]} text=${fields[3]}
  [[ ${fields[1]} == "$way" && ${fields[2]} == "$action" ]] || continue
  log "docs ($where): $text"
  started=$(now)
  if [[ $action == use ]]; then
    out=$work/out.txt status=0
    cd "$work"
    eval "$text" </dev/null >"$out" 2>&1 || status=$?
    ((status == 0)) || fail "the documented command failed on kind ($where): $text: $(cat "$out")"
    if ((${#fields[@]} > 4)) && ! prints "$out" "${fields[@]:4}"; then
      wait_for 30 "$where: '$text' to print: ${fields[*]:4}" again "$text" "$out" "${fields[@]:4}"
    fi
  else
    (cd "$REPO_ROOT" && inns bash -euo pipefail -c "$text") ||
      fail "the documented command failed on kind ($where): $text"
  fi
  timing "docs: ${text:0:55}" "$(seconds_between "$started" "$(now)")"
  ran=$((ran + 1))
done <<<"$steps"
# `helm package` writes the chart's archive where it runs: not left in the checkout.
if [[ $way == helm && $action == install ]]; then
  rm -f "$REPO_ROOT"/genericdp-*.tgz
fi
((ran > 0)) || fail "the docs have no $way $action command (tests/docs_commands.py kind)"
case $action in
  use)
    # What the page says the log shows: the device and the rendered environment.
    grep -qx 'DEMO_NULL=/dev/null ids=null::[0-9]*' <(kubectl logs demo-consumer) ||
      fail "demo-consumer does not see the device its limit asks for: $(kubectl logs demo-consumer | xargs)"
    log "ok: the quick start's demo-consumer holds example.com/null on $(kubectl get pod demo-consumer -o jsonpath='{.spec.nodeName}')"
    kubectl delete pod demo-consumer --wait=true >/dev/null
    ;;
  load)
    for node in $(kind get nodes --name "$CLUSTER"); do
      docker exec "$node" crictl --timeout 60s inspecti "$REGISTRY/genericdp:$VERSION" >/dev/null ||
        fail "the quick start's load left no $REGISTRY/genericdp:$VERSION on $node"
    done
    log "ok: the quick start's load put $REGISTRY/genericdp:$VERSION on every node"
    ;;
esac
