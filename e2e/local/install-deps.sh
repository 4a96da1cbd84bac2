#!/usr/bin/env bash
# The Debian 12 packages the local-node e2e needs (the node and its images),
# installed on a fresh machine; a no-op when they are all there already.
#   e2e/local/install-deps.sh [EXTRA-PACKAGE...]
# or, from another script:
#   source e2e/local/install-deps.sh && install_deps [EXTRA-PACKAGE...]
# Root. Debian's containerd and etcd packages start their own services when
# installed; /usr/sbin/policy-rc.d answers 101 ("action forbidden") for the
# length of the install so nothing starts, and is removed afterwards (an
# existing one is put back as it was).

# shellcheck disable=SC2034 # read by the scripts that source this file
E2E_PACKAGES=(
  # the node
  containerd runc etcd-server containernetworking-plugins
  iptables conntrack socat xz-utils openssl
  # the images (e2e/local/images.sh): pause compiled statically, busybox,
  # the genericdp image and its mmdebstrap base, the helper scripts
  gcc libc6-dev busybox-static buildah podman mmdebstrap python3 git
)

install_deps() {
  local wanted=("${E2E_PACKAGES[@]}" "$@") missing=() pkg
  for pkg in "${wanted[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null) == "ii "* ]] ||
      missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  if ((EUID != 0)); then
    echo "error: installing ${missing[*]} needs root" >&2
    return 1
  fi
  echo "installing: ${missing[*]}" >&2
  local policy=${POLICY_RC_D:-/usr/sbin/policy-rc.d} saved="" marker="# e2e/local/install-deps.sh"
  # One left by an interrupted install of ours is not put back afterwards.
  if [[ -f $policy ]] && grep -qF "$marker" "$policy"; then
    rm -f "$policy"
  elif [[ -e $policy || -L $policy ]]; then
    saved=$(mktemp "$policy.saved.XXXXXX")
    mv -f "$policy" "$saved"
  fi
  printf '#!/bin/sh\n%s: no service starts during the install\nexit 101\n' "$marker" >"$policy"
  chmod 0755 "$policy"
  local status=0
  {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}" >/dev/null
  } || status=$?
  rm -f "$policy"
  if [[ -n $saved ]]; then
    mv -f "$saved" "$policy"
  fi
  if ((status != 0)); then
    echo "error: apt-get install ${missing[*]} failed ($status)" >&2
  fi
  return "$status"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  install_deps "$@"
fi
