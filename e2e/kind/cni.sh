#!/usr/bin/env bash
# The pod network of the locally built node image, standing in for kindnetd
# (not built here): on every node a bridge + host-local + portmap conflist
# for the node's podCIDR (Debian's CNI plugins), forwarding on, and a route
# to every other node's podCIDR through that node's address. No
# NetworkPolicy, no masquerade (nothing outside the run is reachable anyway).
#   e2e/kind/cni.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=kind-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kind-lib.sh"

mapfile -t nodes < <(k get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
for line in "${nodes[@]}"; do
  read -r name cidr ip <<<"$line"
  [[ -n $cidr && -n $ip ]] || fail "node $name has no podCIDR or address yet ($line)"
  docker exec -i "$name" sh -c 'mkdir -p /etc/cni/net.d && cat >/etc/cni/net.d/10-e2e-bridge.conflist && sysctl -qw net.ipv4.ip_forward=1' <<JSON
{
  "cniVersion": "0.4.0",
  "name": "e2e",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  for other in "${nodes[@]}"; do
    read -r oname ocidr oip <<<"$other"
    [[ $oname == "$name" ]] || docker exec "$name" ip route replace "$ocidr" via "$oip"
  done
  log "pod network on $name: $cidr (routes to the other nodes' podCIDRs)"
done
