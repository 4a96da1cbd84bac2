#!/usr/bin/env bash
# Build a kind node image offline, from Debian packages and the Kubernetes
# binaries of ../shared/k8s (KIND.md there says what a node image holds), into
# the run's Docker engine (engine.sh) as NODE_IMAGE:
# - a Debian 12 root with systemd, runc, the CNI plugins, iptables and
#   conntrack (mmdebstrap, cached in KIND_CACHE), with Debian 13's
#   containerd 1.7 (CDI; e2e/local/containerd-cdi.sh), kind's base files,
#   kubelet, kubeadm, kubectl, crictl and ctr (Debian 12's, for kind load);
# - the images kubeadm needs, preloaded into containerd's k8s.io namespace
#   under the tags `kubeadm config images list` prints: the static binaries
#   with a passwd file and CA bundle (etcd, the control plane, CoreDNS), a
#   Debian minbase with iptables for kube-proxy, a pause compiled here.
# The preload is made by a containerd of the node's own started here on a
# unix socket (no CRI, no network), `ctr images import --no-unpack` as
# `kind build node-image` does. Root.
#   e2e/kind/node-image.sh BIN_DIR        BIN_DIR: the unpacked ../shared/k8s binaries
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"
bin=${1:?usage: e2e/kind/node-image.sh BIN_DIR}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
KUBE_VERSION=v$("$bin/kubeadm" version -o short | sed 's/^v//')
started=$(now)
work=$ENGINE_STATE/node-image
rm -rf "$work"
mkdir -p "$work/root" "$KIND_CACHE"

# cached_rootfs NAME PACKAGES: a Debian 12 minbase with PACKAGES, as a tarball
# kept in KIND_CACHE under a key of everything that makes it. The cache is
# the machine's, shared by concurrent runs (their own NETNS, CLUSTER...): one
# at a time makes or reads it (flock).
cached_rootfs() {
  local name=$1 packages=$2 key tarball cache_lock
  exec {cache_lock}>"$KIND_CACHE/.lock"
  flock -w 1800 "$cache_lock" || fail "$KIND_CACHE/.lock still held after 1800 s"
  local mirrors=("deb $DEBIAN_MIRROR bookworm main" "deb $DEBIAN_MIRROR bookworm-updates main"
    "deb $DEBIAN_SECURITY_MIRROR bookworm-security main")
  key=$({
    mmdebstrap --version
    printf '%s\n' "$packages" "${mirrors[@]}"
  } | sha256sum | cut -c1-16)
  tarball=$KIND_CACHE/$name-$key.tar
  if ! [[ -s $tarball ]]; then
    log "mmdebstrap $name (Debian 12 minbase + $packages)"
    mmdebstrap --quiet --variant=minbase --format=tar \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --include="$packages" bookworm "$tarball.partial" "${mirrors[@]}" >"$work/$name.log" 2>&1 || {
      cat "$work/$name.log" >&2
      rm -f "$tarball.partial"
      fail "mmdebstrap $name failed"
    }
    find "$KIND_CACHE" -maxdepth 1 -name "$name-*.tar" -delete
    mv -f "$tarball.partial" "$tarball"
  fi
  exec {cache_lock}>&-
  printf '%s\n' "$tarball"
}

node_tar=$(cached_rootfs node systemd,systemd-sysv,dbus,iptables,nftables,iproute2,conntrack,ethtool,socat,util-linux,mount,kmod,libseccomp2,ca-certificates,procps,runc,containernetworking-plugins,bash,findutils,ebtables)
proxy_tar=$(cached_rootfs kube-proxy iptables,nftables,conntrack,iproute2,kmod,ca-certificates)
"$E2E_ROOT/local/containerd-cdi.sh" "$work/containerd" >/dev/null
timing "node image: Debian roots and containerd 1.7 ready" "$(seconds_between "$started" "$(now)")"

# --- the component images (docker import of a directory) -------------------
# image_from_dir DIR NAME ENTRYPOINT-JSON
image_from_dir() {
  tar -C "$1" -c . | docker import --change "ENTRYPOINT $3" - "$2" >/dev/null
}
static_image() {
  local name=$1 binary=$2 as=$3 dir=$work/img-$1
  mkdir -p "$dir/usr/local/bin" "$dir/etc/ssl/certs" "$dir/tmp" "$dir/var/lib"
  chmod 1777 "$dir/tmp"
  install -m 0755 "$binary" "$dir/usr/local/bin/$as"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
  cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/"
  image_from_dir "$dir" "$name" "[\"/usr/local/bin/$as\"]"
}
images=()
while read -r ref; do
  images+=("$ref")
  case $ref in
    */kube-apiserver:* | */kube-controller-manager:* | */kube-scheduler:*)
      component=${ref##*/}
      component=${component%%:*}
      static_image "$component" "$bin/$component" "$component"
      docker tag "$component" "$ref"
      docker rmi "$component" >/dev/null
      ;;
    */etcd:*)
      static_image etcd "$bin/etcd" etcd
      docker tag etcd "$ref" && docker rmi etcd >/dev/null
      ;;
    */coredns:*)
      # kubeadm's Deployment runs `/coredns -conf ...`.
      static_image coredns "$bin/coredns" coredns
      docker rmi coredns >/dev/null
      dir=$work/img-coredns
      ln -sf usr/local/bin/coredns "$dir/coredns"
      image_from_dir "$dir" "$ref" '["/coredns"]'
      ;;
    */kube-proxy:*)
      mkdir -p "$work/img-kube-proxy"
      tar -xf "$proxy_tar" -C "$work/img-kube-proxy"
      install -m 0755 "$bin/kube-proxy" "$work/img-kube-proxy/usr/local/bin/kube-proxy"
      image_from_dir "$work/img-kube-proxy" "$ref" '["/usr/local/bin/kube-proxy"]'
      ;;
    */pause:*)
      mkdir -p "$work/img-pause"
      gcc -static -Os -o "$work/img-pause/pause" "$E2E_ROOT/local/pause/pause.c"
      strip "$work/img-pause/pause"
      image_from_dir "$work/img-pause" "$ref" '["/pause"]'
      PAUSE_REF=$ref
      ;;
    *) fail "no recipe for the image $ref (kubeadm config images list)" ;;
  esac
done < <("$bin/kubeadm" config images list --kubernetes-version "$KUBE_VERSION")
docker save "${images[@]}" >"$work/images.tar"
timing "node image: the ${#images[@]} images kubeadm needs" "$(seconds_between "$started" "$(now)")"

# --- the node's root ---------------------------------------------------------
root=$work/root
tar -xf "$node_tar" -C "$root"
tar -xJf "$KUBE_XZ_DIR/kind-base-files.tar.xz" -C "$work"
cp -a "$work/kind-base-files/." "$root/"
rm -f "$root/LICENSE" && cp "$work/kind-base-files/LICENSE" "$root/kind/LICENSE"
install -m 0755 "$bin/kubelet" "$bin/kubeadm" "$bin/kubectl" "$root/usr/bin/"
install -m 0755 "$bin/crictl" "$work/containerd/containerd" "$work/containerd/containerd-shim-runc-v2" "$root/usr/local/bin/"
echo "$KUBE_VERSION" >"$root/kind/version"
mkdir -p "$root/opt/cni" "$root/kind/manifests" "$root/etc/containerd/certs.d"
ln -sfn /usr/lib/cni "$root/opt/cni/bin"
# What kind's base image does to systemd (images/base/Dockerfile).
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
  "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
  "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/* \
  "$root"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
ln -sf /lib/systemd/systemd "$root/sbin/init"
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
for unit in kubelet containerd undo-mount-hacks; do
  ln -sf "/etc/systemd/system/$unit.service" "$root/etc/systemd/system/multi-user.target.wants/$unit.service"
done
# kind's containerd config, for containerd 1.7 on this machine: no base
# spec file (its product_uuid hook), the pause image kubeadm lists, CDI on,
# and oom_score_adj restricted (root here may lack CAP_SYS_RESOURCE).
sed -i -e '/base_runtime_spec/d' \
  -e "s|sandbox_image = .*|sandbox_image = \"$PAUSE_REF\"|" \
  -e 's|restrict_oom_score_adj = false|restrict_oom_score_adj = true\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]|' \
  "$root/etc/containerd/config.toml"
grep -q 'enable_cdi = true' "$root/etc/containerd/config.toml" || fail "kind's containerd config changed shape"

# --- the preload: the node's containerd, here, on a socket of its own --------
sock=$work/containerd.sock
cat >"$work/preload.toml" <<TOML
version = 2
root = "$root/var/lib/containerd"
state = "$work/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$sock"
TOML
"$work/containerd/containerd" --config "$work/preload.toml" >"$work/preload.log" 2>&1 &
preload_pid=$!
trap 'kill "$preload_pid" 2>/dev/null || true' EXIT
wait_for 30 "the preload containerd" test -S "$sock"
# ctr is containerd's client; Debian 12's (1.6) speaks to 1.7 for import.
ctr_bin=$(command -v ctr) || fail "ctr not found (Debian's containerd package)"
# The node needs it too: `kind load docker-image` (the quick start's) runs
# `ctr images import` in every node, as kindest/node ships it.
install -m 0755 "$ctr_bin" "$root/usr/local/bin/ctr"
"$ctr_bin" --address "$sock" -n k8s.io images import --no-unpack --all-platforms --digests "$work/images.tar" >/dev/null
"$ctr_bin" --address "$sock" -n k8s.io images ls -q | sort >"$work/preloaded.txt"
kill "$preload_pid"
wait "$preload_pid" 2>/dev/null || true
trap - EXIT
for ref in "${images[@]}"; do
  grep -qxF "$ref" "$work/preloaded.txt" || fail "$ref missing from the preload: $(xargs <"$work/preloaded.txt")"
done
umount -l "$work/containerd-state" 2>/dev/null || true
rm -rf "$work/containerd-state"
# The component images only served the preload.
docker rmi "${images[@]}" >/dev/null

tar -C "$root" -c . | docker import \
  --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  - "$NODE_IMAGE_LOCAL" >/dev/null
rm -rf "$work"
timing "node image $NODE_IMAGE_LOCAL built (Kubernetes $KUBE_VERSION)" "$(seconds_between "$started" "$(now)")"
