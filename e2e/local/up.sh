#!/usr/bin/env bash
# Bring up a one-node Kubernetes cluster on this machine, every component
# inside the network namespace gdp-e2e (e2e/local/node-lib.sh says what is where):
# containerd (CNI bridge), etcd, kube-apiserver (certificates made here, per
# run), kube-controller-manager, kube-scheduler and the kubelet. Tears down
# what a previous run left first (down.sh). Needs root, cgroup v1 or v2.
#   KUBE_BIN_DIR=DIR e2e/local/up.sh IMAGES_DIR
# IMAGES_DIR holds OCI archives (*.tar) imported into the node's containerd;
# one must be localhost/pause:e2e (the sandbox image).
# Environment:
#   CONTAINERD_BIN_DIR=DIR   containerd and its shim from DIR (e2e/local/cdi.sh:
#                            Debian 13's 1.7), runc still Debian 12's
#   CDI=1                    enable_cdi in the CRI plugin (containerd 1.7+),
#                            specs from /var/run/cdi
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"

images=${1:?usage: KUBE_BIN_DIR=DIR e2e/local/up.sh IMAGES_DIR}
[[ $(id -u) == 0 ]] || { echo "error: the local node needs root" >&2; exit 2; }
require containerd containerd-shim-runc-v2 runc ctr etcd openssl nsenter ip
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  kube_bin "$b" >/dev/null
done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || {
  echo "error: CNI plugins not found in /usr/lib/cni (apt-get install containernetworking-plugins)" >&2
  exit 2
}
if [[ -S $PLUGIN_DIR/kubelet.sock ]] && ! [[ -d $NODE_STATE ]]; then
  echo "error: $PLUGIN_DIR/kubelet.sock exists: another kubelet runs here" >&2
  exit 2
fi

"$LOCAL_DIR/down.sh"
started=$(now)
mkdir -p "$NODE_STATE" "$PKI" "$PIDS" "$LOG_DIR"
rm -f "$LOG_DIR"/*.log
# What existed before, so down.sh removes only what the node created.
for d in /var/lib/kubelet /run/containerd /var/run/cdi /var/lib/cni /run/netns; do
  [[ -e $d ]] || echo "$d" >>"$NODE_STATE/created-dirs"
done
# The first `ip netns add` makes /run/netns a shared bind mount (the directory
# may be there without it); down.sh undoes the mount this node made.
mountpoint -q /run/netns || touch "$NODE_STATE/made-run-netns"

log "network namespace $NETNS: $VETH_NODE $NODE_IP/24 (host end $VETH_HOST, no address)"
ip netns add "$NETNS"
ip -n "$NETNS" link set lo up
ip link add "$VETH_HOST" type veth peer name "$VETH_NODE" netns "$NETNS"
ip link set "$VETH_HOST" up
ip -n "$NETNS" addr add "$NODE_IP/24" dev "$VETH_NODE"
ip -n "$NETNS" link set "$VETH_NODE" up

log "cgroup $CGROUP_ROOT in every hierarchy"
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  [[ -e $h/cgroup.procs ]] || continue
  mkdir -p "$h${CGROUP_ROOT#/}"
  if [[ -e $h/cpuset.cpus && ! -e /sys/fs/cgroup/cgroup.controllers ]]; then
    cat "$h/cpuset.cpus" >"$h${CGROUP_ROOT#/}/cpuset.cpus"
    cat "$h/cpuset.mems" >"$h${CGROUP_ROOT#/}/cpuset.mems"
  fi
done

log "certificates (openssl, per run)"
cd "$PKI"
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet ecparam -name prime256v1 -genkey -noout -out ca.key
openssl_quiet req -x509 -new -key ca.key -subj "/CN=genericdp-e2e-ca" -days 2 -out ca.crt
# cert NAME SUBJECT [SAN]: a key and a certificate signed by the CA.
cert() {
  local ext
  ext=$(mktemp)
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n ${3:-} ]]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$3"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl_quiet ecparam -name prime256v1 -genkey -noout -out "$1.key"
  openssl_quiet req -new -key "$1.key" -subj "$2" -out "$1.csr"
  openssl_quiet x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 2 -extfile "$ext" -out "$1.crt"
  rm -f "$ext" "$1.csr"
}
first_service_ip=${SERVICE_SUBNET%.0/24}.1
cert apiserver "/CN=kube-apiserver" \
  "IP:$NODE_IP,IP:127.0.0.1,IP:$first_service_ip,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
cert admin "/O=system:masters/CN=genericdp-e2e-admin"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kubelet "/O=system:nodes/CN=system:node:$NODE"
openssl_quiet ecparam -name prime256v1 -genkey -noout -out sa.key
openssl_quiet ec -in sa.key -pubout -out sa.pub
# kubeconfig NAME: for the client certificate NAME.
kubeconfig() {
  cat >"$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster: {server: "https://$NODE_IP:6443", certificate-authority: "$PKI/ca.crt"}
users:
  - name: $1
    user: {client-certificate: "$PKI/$1.crt", client-key: "$PKI/$1.key"}
contexts:
  - name: e2e
    context: {cluster: e2e, user: $1}
current-context: e2e
EOF
}
kubeconfig admin
kubeconfig kubelet
cd - >/dev/null

log "containerd (its own root, state, socket; CNI bridge $POD_SUBNET)"
mkdir -p "$NODE_STATE/cni/net.d" "$NODE_STATE/containerd"
cat >"$NODE_STATE/cni/net.d/10-gdp-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gdp-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "gdp-e2e-br",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$NODE_STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
# Without CAP_SYS_RESOURCE no process may lower its oom_score_adj, which runc
# does for every container the kubelet starts (runc-clamp-oom says more).
runc_binary=runc
cap_eff=0x$(awk '/^CapEff/ { print $2 }' /proc/self/status)
if ((cap_eff >> 24 & 1)); then :; else
  log "  no CAP_SYS_RESOURCE here: runc through runc-clamp-oom (no negative oom_score_adj)"
  runc_binary=$LOCAL_DIR/runc-clamp-oom
fi
cri_cdi=""
if [[ ${CDI:-} == 1 ]]; then
  cri_cdi=$'\n  enable_cdi = true\n  cdi_spec_dirs = ["/var/run/cdi"]'
fi
cat >"$NODE_STATE/containerd/config.toml" <<EOF
version = 2
root = "$NODE_STATE/containerd/root"
state = "$NODE_STATE/containerd/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:e2e"${cri_cdi}
  # Pod network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$NODE_STATE/containerd/runc"
        BinaryName = "$runc_binary"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_STATE/cni/net.d"
EOF
start_component containerd env PATH="${CONTAINERD_BIN_DIR:+$CONTAINERD_BIN_DIR:}$PATH" \
  "${CONTAINERD_BIN_DIR:-/usr/bin}/containerd" --config "$NODE_STATE/containerd/config.toml"
wait_for 30 "containerd to answer on $CONTAINERD_SOCK" ctr_k8s version

log "importing the images of $images"
shopt -s nullglob
archives=("$images"/*.tar)
((${#archives[@]})) || fail "no OCI archives (*.tar) in $images"
for archive in "${archives[@]}"; do
  ctr_k8s images import --no-unpack=false --snapshotter overlayfs "$archive" >/dev/null ||
    fail "ctr images import $archive failed"
done
ctr_k8s images list -q | grep -x localhost/pause:e2e >/dev/null ||
  fail "localhost/pause:e2e is not among the imported images: $(ctr_k8s images list -q | tr '\n' ' ')"

log "etcd, kube-apiserver"
start_component etcd etcd --name gdp-e2e --data-dir "$NODE_STATE/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster gdp-e2e=http://127.0.0.1:2380 --log-level warn
start_component kube-apiserver "$(kube_bin kube-apiserver)" \
  --etcd-servers=http://127.0.0.1:2379 \
  --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
  --service-cluster-ip-range="$SERVICE_SUBNET" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --service-account-key-file="$PKI/sa.pub" \
  --service-account-signing-key-file="$PKI/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --kubelet-preferred-address-types=InternalIP \
  --allow-privileged=true --profiling=false
api_ready() { [[ $(k get --raw /readyz 2>/dev/null) == ok ]]; }
wait_for 60 "kube-apiserver to be ready (https://$NODE_IP:6443/readyz)" api_ready

log "kube-controller-manager, kube-scheduler"
start_component kube-controller-manager "$(kube_bin kube-controller-manager)" \
  --kubeconfig="$ADMIN_KUBECONFIG" --leader-elect=false \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --use-service-account-credentials=false --controllers='*' \
  --bind-address=127.0.0.1 --secure-port=10257
start_component kube-scheduler "$(kube_bin kube-scheduler)" \
  --kubeconfig="$ADMIN_KUBECONFIG" --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port=10259

log "kubelet (root dir $KUBELET_ROOT, cgroupRoot $CGROUP_ROOT)"
mkdir -p "$KUBELET_ROOT" "$PLUGIN_DIR"
cat >"$NODE_STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
resolvConf: /etc/resolv.conf
# Node status every second instead of every 10 s, so the latencies measured
# are genericdp's, not the status loop's.
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 1s
# Pods synced (and mounted ConfigMaps refreshed) every ~10 s instead of
# ~1 min: the hot reload check waits less (docs/contributing/testing.md).
syncFrequency: 10s
# The node's images were imported, never pulled: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%}
logging: {format: json}
EOF
start_kubelet
node_ready() {
  [[ $(k get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
wait_for 90 "node $NODE to be Ready" node_ready
timing "local node: up.sh -> node Ready" "$(seconds_between "$started" "$(now)")"
