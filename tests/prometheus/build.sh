#!/usr/bin/env bash
# Builds prometheus and promtool from the pinned Go module in go.mod, into a cache outside
# the repository. A build is reused while the Go version and every input file (go.mod,
# go.sum, this script) are unchanged.
#
# The tests find their targets through files, which Prometheus always builds in; every
# optional service discovery (cloud APIs, Kubernetes, …) is left out (`remove_all_sd`).
# Without `builtinassets` the web UI is not compiled in: the HTTP API needs no assets.
#
# It also copies the Prometheus Operator's CRDs for the objects the chart renders
# (ServiceMonitor, PodMonitor, PrometheusRule) from that project's pinned Go module, which
# ships them under example/prometheus-operator-crd; `go mod download` checks the module
# against the Go checksum database.
#
# Prints the directory that holds the binaries on its last line; the CRDs are in ../crds.
set -euo pipefail

operator_module=github.com/prometheus-operator/prometheus-operator
operator_version=v0.85.0
crds=(servicemonitors podmonitors prometheusrules)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${MCPCACHE_PROMETHEUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache/prometheus}

key=$(
  {
    go version
    cd "$here" && sha256sum go.mod go.sum build.sh
  } | sha256sum | cut -c1-16
)
out="$cache_root/$key"

if [ -x "$out/bin/prometheus" ] && [ -x "$out/bin/promtool" ] && [ -d "$out/crds" ]; then
  echo "prometheus: reusing $out/bin" >&2
  echo "$out/bin"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
export GOFLAGS="${GOFLAGS:-} -trimpath"
module=github.com/prometheus/prometheus
version=$(cd "$here" && go list -m -f '{{.Version}}' "$module")
# The module's v0.3XX.Y is Prometheus 3.XX.Y; stamp it as its release build would.
release=$(echo "$version" | sed -E 's/^v0\.3([0-9]{2})\.([0-9]+).*/3.\1.\2/; s/^3\.0([0-9])/3.\1/')
ldflags="-s -w -X github.com/prometheus/common/version.Version=$release \
  -X github.com/prometheus/common/version.Branch=$version"
for tool in prometheus promtool; do
  (cd "$here" && go build -tags remove_all_sd -ldflags="$ldflags" -o "$tmp/bin/$tool" "$module/cmd/$tool")
done
operator_dir=$(cd "$here" && go mod download -json "$operator_module@$operator_version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
mkdir -p "$tmp/crds"
for crd in "${crds[@]}"; do
  cp "$operator_dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$tmp/crds/"
done
chmod -R u+w "$tmp/crds"
echo "prometheus: built in $(($(date +%s) - start))s" >&2

rm -rf "$out"
mv "$tmp" "$out"
# Older builds are of no further use once their inputs changed.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "$out/bin"
