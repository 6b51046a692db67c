#!/usr/bin/env bash
# Builds the test control plane (etcd + kube-apiserver in one binary), kubectl and helm
# from their pinned Go modules, into a cache outside the repository. A build is reused
# while the Go version and every input file (go.mod, go.sum, sources) are unchanged.
#
# Prints the directory that holds the binaries on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# MCPCACHE_TOOLS_CACHE names the folder of all the built tools (as in tests/node), never
# this build's own: the clean-up below empties the folder it builds into.
cache_root=${MCPCACHE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache}/controlplane

key=$(
  {
    go version
    cd "$here" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' -o -name 'build.sh' \) -print0 \
      | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
out="$cache_root/$key"

if [ -x "$out/bin/controlplane" ] && [ -x "$out/bin/kubectl" ] && [ -x "$out/bin/helm" ]; then
  echo "controlplane: reusing $out/bin" >&2
  echo "$out/bin"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
export GOFLAGS="${GOFLAGS:-} -trimpath"
# Stamp the versions the binaries would carry from their own release builds.
kube=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
helm=$(cd "$here/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
minor=$(echo "$kube" | cut -d. -f2)
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/component-base/version.gitTreeState=clean"
(cd "$here" && go build -ldflags="$kube_ldflags" -o "$tmp/bin/controlplane" .)
(cd "$here" && go build -ldflags="$kube_ldflags" -o "$tmp/bin/kubectl" k8s.io/kubernetes/cmd/kubectl)
# As helm's own Makefile does: the default Kubernetes version follows its client-go.
client_minor=$(cd "$here/helm" && go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags="$helm_ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_minor"
done
(cd "$here/helm" && go build -ldflags="$helm_ldflags" -o "$tmp/bin/helm" helm.sh/helm/v3/cmd/helm)
echo "controlplane: built in $(($(date +%s) - start))s" >&2

rm -rf "$out"
mv "$tmp" "$out"
# Older builds are of no further use once their inputs changed.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "$out/bin"
