#!/usr/bin/env bash
# The kind run's own Docker engine and registry, on machines where the e2e
# may not use the host's network (e2e/kind/run.sh starts it unless
# KIND_SOURCE=release): Debian's dockerd in a network namespace made for the
# run, its data, exec root and socket its own, every address in
# 198.18.0.0/15 (RFC 2544's benchmarking range), the Docker network `kind`
# made beforehand in that range, and Debian's docker-registry serving
# REGISTRY (localhost:5001) inside the namespace. Root.
#   e2e/kind/engine.sh up | down
#   e2e/kind/engine.sh registry     the network and registry only (GitHub Actions)
# `down` stops everything `up` started, by PID, unmounts and removes the
# state and deletes the namespace; it is safe to repeat.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

up() {
  ((EUID == 0)) || fail "e2e/kind/engine.sh needs root"
  local cmd
  for cmd in dockerd containerd runc docker-registry ip nsenter; do
    command -v "$cmd" >/dev/null || fail "$cmd not found (e2e/kind/run.sh installs the Debian packages)"
  done
  mkdir -p "$ENGINE_STATE" "$ENGINE_RUN"
  # Every node runs systemd, containerd and a kubelet, each with inotify
  # instances, counted against root on the host: at the default 128 a second
  # cluster (or a local node beside one) runs out, and the kubelet or systemd
  # of a new node fails with "too many open files". kind's own advice, 512;
  # raised only, never lowered (another run may need it), so nothing to undo.
  local instances
  instances=$(</proc/sys/fs/inotify/max_user_instances)
  if ((instances < 512)); then
    log "fs.inotify.max_user_instances $instances -> 512 (kind's nodes)"
    echo 512 >/proc/sys/fs/inotify/max_user_instances
  fi
  if ! [[ -e /run/netns/$NETNS ]]; then
    # The first `ip netns add` on a machine makes /run/netns a shared bind
    # mount; down undoes that when this run made it and nothing else uses it.
    if ! mountpoint -q /run/netns; then
      touch "$ENGINE_RUN/made-run-netns"
    fi
    ip netns add "$NETNS"
  fi
  inns ip link set lo up
  # kind bind-mounts /lib/modules into every node; it must exist.
  if ! [[ -e /lib/modules ]]; then
    mkdir /lib/modules
    touch "$ENGINE_RUN/made-lib-modules"
  fi
  cat >"$ENGINE_RUN/daemon.json" <<JSON
{
  "bip": "198.18.0.1/24",
  "default-address-pools": [{"base": "198.18.16.0/20", "size": 24}],
  "dns": ["$KIND_GATEWAY"],
  "ipv6": false,
  "runtimes": {"bounded-caps": {"path": "$E2E_DIR/runc-bounded-caps"}},
  "default-runtime": "bounded-caps",
  "storage-driver": "overlay2",
  "log-driver": "json-file",
  "userland-proxy": false,
  "features": {"buildkit": false}
}
JSON
  log "dockerd in network namespace $NETNS ($ENGINE_STATE)"
  inns setsid dockerd --config-file "$ENGINE_RUN/daemon.json" \
    --host "unix://$ENGINE_RUN/docker.sock" --data-root "$ENGINE_STATE/docker" \
    --exec-root "$ENGINE_RUN/exec" --pidfile "$ENGINE_RUN/dockerd.pid" \
    >"$ARTIFACTS/dockerd.log" 2>&1 </dev/null &
  wait_for 60 "dockerd to answer on $ENGINE_RUN/docker.sock" docker info
  registry
  log "engine up: dockerd $(docker version -f '{{.Server.Version}}'), registry $REGISTRY (nodes: $KIND_GATEWAY:$REGISTRY_PORT)"
}

# registry: the Docker network `kind` in the run's range, and the registry
# (alone on GitHub Actions, where the machine's Docker serves).
registry() {
  mkdir -p "$ENGINE_STATE" "$ENGINE_RUN"
  if ! docker network inspect kind >/dev/null 2>&1; then
    docker network create kind --driver bridge --subnet "$KIND_SUBNET" \
      --gateway "$KIND_GATEWAY" -o com.docker.network.bridge.enable_ip_masquerade=true >/dev/null
  fi
  # The registry: the namespace's localhost:5001 for docker and helm, the
  # kind network's gateway for the nodes (hosts.toml, create-cluster.sh).
  mkdir -p "$ENGINE_STATE/registry"
  cat >"$ENGINE_RUN/registry.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $ENGINE_STATE/registry}
  delete: {enabled: true}
http: {addr: ":$REGISTRY_PORT"}
YAML
  inns setsid docker-registry serve "$ENGINE_RUN/registry.yml" \
    >"$ARTIFACTS/registry.log" 2>&1 </dev/null &
  echo $! >"$ENGINE_RUN/registry.pid"
  wait_for 30 "the registry on localhost:$REGISTRY_PORT" \
    inns bash -c "exec 3<>/dev/tcp/127.0.0.1/$REGISTRY_PORT"
}

# stop_pid FILE: TERM the process FILE names and wait for it, KILL after 30 s.
stop_pid() {
  local pid
  [[ -s $1 ]] || return 0
  pid=$(<"$1")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 120); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

down() {
  if [[ -S $ENGINE_RUN/docker.sock ]] && docker info >/dev/null 2>&1; then
    local ids
    ids=$(docker ps -aq)
    if [[ -n $ids ]]; then
      # shellcheck disable=SC2086 # one ID a word
      docker rm -f -v $ids >/dev/null 2>&1 || true
    fi
  fi
  stop_pid "$ENGINE_RUN/registry.pid"
  stop_pid "$ENGINE_RUN/dockerd.pid"
  # dockerd's containerd and shims, should any outlive it.
  local pid
  while read -r pid; do
    kill -9 "$pid" 2>/dev/null || true
  done < <(grep -lsF "$ENGINE_RUN/" /proc/[0-9]*/cmdline | sed 's|/proc/\([0-9]*\)/cmdline|\1|')
  local dir mnt
  for dir in "$ENGINE_STATE" "$ENGINE_RUN"; do
    while read -r mnt; do
      umount -l "$mnt" 2>/dev/null || true
    done < <(findmnt -rn -o TARGET | awk -v d="$dir/" 'index($0 "/", d) == 1' | sort -r)
  done
  # The cgroups dockerd made for its containers (cgroup v1: one per hierarchy).
  find /sys/fs/cgroup/*/docker /sys/fs/cgroup/docker -depth -type d -exec rmdir {} \; 2>/dev/null || true
  if [[ -e $ENGINE_RUN/made-lib-modules ]]; then
    rmdir /lib/modules 2>/dev/null || true
  fi
  local made_run_netns=""
  [[ -e $ENGINE_RUN/made-run-netns ]] && made_run_netns=1
  rm -rf "$ENGINE_STATE" "$ENGINE_RUN"
  if [[ -e /run/netns/$NETNS ]]; then
    ip netns delete "$NETNS"
  fi
  if [[ -n $made_run_netns ]] && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
    umount /run/netns 2>/dev/null || true
  fi
}

case ${1:-} in
  up) up ;;
  registry) registry ;;
  down) down ;;
  *)
    echo "usage: e2e/kind/engine.sh up | down" >&2
    exit 2
    ;;
esac
