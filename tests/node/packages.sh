#!/usr/bin/env bash
# The node's Debian packages: containerd and runc (the container runtime), the CNI
# plugins (bridge, host-local, loopback), iptables (kube-proxy), buildah and mmdebstrap
# (the images). Installed with apt-get when one is missing and we are root; nothing is
# started as a service (the tests run their own containerd).
set -euo pipefail
missing=()
for pair in containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
  iptables:iptables buildah:buildah mmdebstrap:mmdebstrap; do
  probe=${pair%%:*} package=${pair##*:}
  if ! command -v "$probe" >/dev/null 2>&1 && [ ! -e "$probe" ]; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} = 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "the cluster tests need: ${missing[*]} (Debian packages)" >&2
  exit 1
fi
echo "installing ${missing[*]}" >&2
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
