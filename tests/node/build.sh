#!/usr/bin/env bash
# Builds the node's Kubernetes parts from pinned Go modules (the same module versions as
# tests/controlplane, so they share its Go build cache): kubelet, kube-controller-manager,
# kube-scheduler and kube-proxy, plus the pause program of kubernetes' build/pause,
# compiled statically. A build is reused while the Go and C compiler versions and every
# input file are unchanged.
#
# Prints the directory that holds the binaries on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${MCPCACHE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache}/node-bin

key=$(
  {
    go version
    cc --version | head -n 1
    cd "$here" && sha256sum go.mod go.sum build.sh
  } | sha256sum | cut -c1-16
)
out="$cache_root/$key"
tools=(kubelet kube-controller-manager kube-scheduler kube-proxy)

complete=1
for tool in "${tools[@]}" pause; do
  [ -x "$out/bin/$tool" ] || complete=0
done
if [ "$complete" = 1 ]; then
  echo "node: reusing $out/bin" >&2
  echo "$out/bin"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
export GOFLAGS="${GOFLAGS:-} -trimpath"
kube=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$kube" | cut -d. -f2)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
  -X k8s.io/component-base/version.gitTreeState=clean"
for tool in "${tools[@]}"; do
  (cd "$here" && go build -ldflags="$ldflags" -o "$tmp/bin/$tool" "k8s.io/kubernetes/cmd/$tool")
done
source=$(cd "$here" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
cc -Os -Wall -Werror -static -DVERSION="$kube" -o "$tmp/bin/pause" "$source"
strip "$tmp/bin/pause"
echo "node: built in $(($(date +%s) - start))s" >&2

# Another run may have built the same inputs meanwhile: its result is as good.
if [ "$(ls "$out/bin" 2>/dev/null | wc -l)" -lt 5 ]; then
  rm -rf "$out"
  mv -T "$tmp" "$out"
fi
# Older builds are of no further use; another run's build in progress is left alone.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build-*' -exec rm -rf {} +
echo "$out/bin"
