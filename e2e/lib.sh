# shellcheck shell=bash
# Shared by the e2e scripts of both ways to get a node (e2e/kind, e2e/local):
# names, logging, timings, polling with deadlines, node quantities, and the
# diagnostics dumped when a check fails. Sourced, never run: the caller sets
# `set -euo pipefail`. Each way's own file (kind/kind-lib.sh, local/node-lib.sh)
# sources this one and defines the driver the checks use:
#   NODE  OVERLAY  IMAGE  CONSUMER_IMAGE   names
#   k ARGS...                 kubectl against the cluster
#   node_exec COMMAND...      run on the node (docker exec, or here)
#   kubelet_log_since T       the kubelet's log after T, "UNIXTIME message" lines
#   kill_kubelet              SIGKILL the kubelet (a crash)
#   restart_kubelet_hard      SIGKILL it and have it started again
#   node_diagnostics          what to add to a failure's dump

E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034 # used by the scripts that source this file
REPO_ROOT=$(cd "$E2E_ROOT/.." && pwd)
NAMESPACE=${NAMESPACE:-genericdp-e2e}
ARTIFACTS=${ARTIFACTS:-${TMPDIR:-/tmp}/genericdp-e2e-artifacts}
TIMINGS=${TIMINGS:-$ARTIFACTS/timings.txt}
POLL=${POLL:-0.25}
DS_SELECTOR=app.kubernetes.io/name=genericdp,app.kubernetes.io/component=device-plugin

log() {
  printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

now() {
  date +%s.%N
}

# seconds_between START END -> "1.23"
seconds_between() {
  awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'
}

# timing NAME SECONDS: print one measurement and keep it for the summary.
timing() {
  mkdir -p "$(dirname "$TIMINGS")"
  printf 'TIMING  %-62s %8s s\n' "$1" "$2" | tee -a "$TIMINGS" >&2
}

# node_quantity capacity|allocatable RESOURCE -> the node's value, "" if absent.
node_quantity() {
  local field=$1 resource=$2
  k get node "$NODE" -o "jsonpath={.status.$field.${resource//./\\.}}"
}

# quantity_is FIELD RESOURCE N: the node shows N (absent counts as 0).
# Remembers what it saw in LAST_SEEN for the failure message.
LAST_SEEN=""
quantity_is() {
  LAST_SEEN=$(node_quantity "$1" "$2" 2>&1) || return 1
  [[ ${LAST_SEEN:-0} == "$3" ]]
}

# wait_for TIMEOUT WHAT COMMAND...: poll COMMAND until it succeeds, or fail
# saying WHAT did not happen within TIMEOUT seconds.
wait_for() {
  local timeout=$1 what=$2
  shift 2
  local deadline
  deadline=$(awk -v n="$(now)" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
  until "$@" >/dev/null 2>&1; do
    if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
      fail "timed out after ${timeout}s waiting for: $what${LAST_SEEN:+ (last seen: $LAST_SEEN)}"
    fi
    sleep "$POLL"
  done
}

# wait_quantity FIELD RESOURCE N TIMEOUT: the node's FIELD shows N for RESOURCE.
wait_quantity() {
  LAST_SEEN=""
  wait_for "$4" "node $NODE $1 $2 = $3" quantity_is "$1" "$2" "$3"
}

# hold_for SECONDS WHAT COMMAND...: COMMAND keeps succeeding for the whole
# window (for "nothing changes" checks: an invalid config must not take effect).
hold_for() {
  local window=$1 what=$2
  shift 2
  local end
  end=$(awk -v n="$(now)" -v t="$window" 'BEGIN { printf "%.3f", n + t }')
  while awk -v n="$(now)" -v e="$end" 'BEGIN { exit !(n < e) }'; do
    "$@" >/dev/null 2>&1 || fail "no longer true within ${window}s: $what${LAST_SEEN:+ (saw: $LAST_SEEN)}"
    sleep "$POLL"
  done
}

# The genericdp pod on the node, and facts about it.
daemon_pod() {
  k -n "$NAMESPACE" get pods -l "$DS_SELECTOR" \
    --field-selector "spec.nodeName=$NODE" -o 'jsonpath={.items[0].metadata.name}'
}

pod_identity() {
  k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.metadata.uid} restarts={.status.containerStatuses[0].restartCount}'
}

pod_ready() {
  [[ $(k -n "$NAMESPACE" get pod "$1" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

dump_diagnostics() {
  mkdir -p "$ARTIFACTS"
  local out=$ARTIFACTS/diagnostics.txt
  {
    echo "===== pods"
    k get pods -A -o wide
    echo "===== daemonset"
    k -n "$NAMESPACE" describe daemonset
    echo "===== pods in $NAMESPACE"
    k -n "$NAMESPACE" describe pods
    echo "===== genericdp logs"
    k -n "$NAMESPACE" logs -l "$DS_SELECTOR" --tail=-1 --timestamps --prefix
    echo "===== genericdp logs (previous container, if it restarted)"
    k -n "$NAMESPACE" logs -l "$DS_SELECTOR" --tail=-1 --timestamps --prefix --previous
    echo "===== node"
    k describe node "$NODE"
    echo "===== events"
    k get events -A --sort-by=.lastTimestamp
    echo "===== kubelet device-plugin dir and e2e device nodes on $NODE"
    node_exec sh -c 'ls -la /var/lib/kubelet/device-plugins; ls -la /dev | grep gdp-e2e; ls -la /var/lib/genericdp-e2e'
    node_diagnostics
  } >"$out" 2>&1 || true
  cat "$out" >&2
}

fail() {
  printf '\nFAILED: %s\n\n' "$*" >&2
  if [[ -n ${GITHUB_ACTIONS:-} ]]; then
    printf '::error title=e2e failed::%s\n' "$*"
  fi
  dump_diagnostics
  exit 1
}

require() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || {
      echo "error: $tool not found on PATH (docs/contributing/testing.md says what each e2e needs)" >&2
      exit 2
    }
  done
}
