#!/usr/bin/env bash
# The chart on a real one-node Kubernetes cluster on this machine (root only): builds
# what it needs (cached), brings the node up, installs the chart, shows an agent's calls
# hitting the cache, and takes everything down again. README: "Try it in a real cluster
# on one machine". `--keep` waits for Ctrl-C before taking the node down.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../.ci/env.sh"
cd "$MCPCACHE_ROOT"
step() { printf '\n== %s\n' "$*" >&2; }
if [ "$(id -u)" != 0 ]; then
  echo "run as root: the node needs a network namespace, cgroups and its own containerd" >&2
  exit 1
fi
step "Debian packages: containerd, runc, CNI plugins, iptables, buildah, mmdebstrap"
bash tests/node/packages.sh
step "etcd, kube-apiserver, kubectl and helm from Go modules (first time: about 10 minutes)"
MCPCACHE_CONTROLPLANE_BIN=$(bash tests/controlplane/build.sh | tail -n 1)
step "kubelet, controller-manager, scheduler, kube-proxy and pause (first time: about 4 minutes)"
MCPCACHE_NODE_BIN=$(bash tests/node/build.sh | tail -n 1)
step "the image, from the Dockerfile with buildah (first time: about 4 minutes)"
MCPCACHE_IMAGES=$(bash tests/node/image.sh "$MCPCACHE_NODE_BIN/pause" | tail -n 1)
export MCPCACHE_CONTROLPLANE_BIN MCPCACHE_NODE_BIN MCPCACHE_IMAGES
exec python examples/cluster.py "$@"
