#!/usr/bin/env bash
# Install genericdp on the kind cluster as the docs say, verbatim: the
# commands come from the docs' sh blocks (`python3 tests/docs_commands.py
# kind REGISTRY`: every command of kind "install", REGISTRY swapped for the
# run's registry), so a changed page changes what runs here.
#   e2e/kind/install.sh push                 the documented `docker push`
#   e2e/kind/install.sh install kustomize|helm
#   e2e/kind/install.sh uninstall kustomize|helm
# `helm` is Helm 3 (HELM, default helm3 from e2e/local/npm-tools.sh): Helm 4
# refuses a plain-HTTP registry without --plain-http, which the docs'
# commands do not say. Commands run from the checkout's root where the
# cluster is (inns), with the kind cluster's kubeconfig.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
action=${1:?usage: e2e/kind/install.sh push | install WAY | uninstall WAY}
way=${2:-image}
[[ $action == push ]] && action=install

steps=$(python3 "$REPO_ROOT/tests/docs_commands.py" kind "$REGISTRY")
ran=0
while IFS=$'\t' read -r where step_way step text; do
  [[ $step_way == "$way" && $step == "$action" ]] || continue
  log "docs ($where): $text"
  started=$(now)
  (cd "$REPO_ROOT" && inns bash -euo pipefail -c "$text") ||
    fail "the documented command failed on kind ($where): $text"
  timing "docs: ${text:0:55}" "$(seconds_between "$started" "$(now)")"
  ran=$((ran + 1))
done <<<"$steps"
# `helm package` writes the chart's archive where it runs: not left in the checkout.
if [[ $way == helm && $action == install ]]; then
  rm -f "$REPO_ROOT"/genericdp-*.tgz
fi
((ran > 0)) || fail "the docs have no $way $action command (tests/docs_commands.py kind)"
