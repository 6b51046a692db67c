#!/usr/bin/env bash
# Installs the MCP conformance suite (@modelcontextprotocol/conformance, exactly as the
# lock file pins it) into a cache outside the repository, as typescript/install.sh does
# for the TypeScript SDK, with the shim that lets it run on Node 20 (node20.mjs), reused
# while Node's version, package.json, the lock file and the shim are unchanged.
#
# Prints the directory that holds its node_modules on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache/conformance
key=$({ node --version; cd "$here" && sha256sum package.json package-lock.json ./*.mjs; } | sha256sum | cut -c1-16)
out="$cache_root/$key"

if [ -f "$out/.complete" ]; then
  echo "conformance suite: reusing $out" >&2
  echo "$out"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$here"/*.mjs "$tmp/"
(cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
