#!/usr/bin/env bash
# Installs the TypeScript test peers (the stock @modelcontextprotocol/sdk, exactly as the
# lock file pins it) into a cache outside the repository, reused while Node's version,
# package.json, the lock file and the scripts are unchanged.
#
# Prints the directory that holds the scripts and their node_modules on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache/typescript
key=$({ node --version; cd "$here" && sha256sum package.json package-lock.json server.mjs client.mjs; } | sha256sum | cut -c1-16)
out="$cache_root/$key"

if [ -f "$out/.complete" ]; then
  echo "typescript peers: reusing $out" >&2
  echo "$out"
  exit 0
fi

tmp="$cache_root/.build-$key-$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$here/server.mjs" "$here/client.mjs" "$tmp/"
(cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
echo "$out"
