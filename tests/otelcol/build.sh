#!/usr/bin/env bash
# Builds the tests' OpenTelemetry Collector (main.go: the OTLP receiver and the file
# exporter) from the pinned Go modules in go.mod, into a cache outside the repository. A
# build is reused while the Go version and every input file (go.mod, go.sum, main.go, this
# script) are unchanged.
#
# Prints the directory that holds the `otelcol` binary on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${MCPCACHE_OTELCOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache/otelcol}

key=$(
  {
    go version
    cd "$here" && sha256sum go.mod go.sum main.go build.sh
  } | sha256sum | cut -c1-16
)
out="$cache_root/$key"

if [ -x "$out/bin/otelcol" ]; then
  echo "otelcol: reusing $out/bin" >&2
  echo "$out/bin"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
export GOFLAGS="${GOFLAGS:-} -trimpath"
(cd "$here" && go build -ldflags="-s -w" -o "$tmp/bin/otelcol" .)
echo "otelcol: built in $(($(date +%s) - start))s" >&2

rm -rf "$out"
mv "$tmp" "$out"
# Older builds are of no further use once their inputs changed.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "$out/bin"
