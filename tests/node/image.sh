#!/usr/bin/env bash
# Builds the product image from the repository's Dockerfile with buildah (no daemon, no
# registry), and the two images the cluster tests add: the peers image (the product
# image plus the MCP SDK) and the pause image (tests/node/build.sh's static pause).
#
# The Dockerfile's FROM image is not pulled: a stand-in with the same name is made from
# Debian's own packages (mmdebstrap, the host's apt sources: python3, python3-venv,
# python-is-python3, ca-certificates) and kept in buildah's storage.
#
# Each image is saved as a docker-archive (what `ctr images import` reads) in a cache
# directory keyed by the image's inputs, and reused while they are unchanged.
#
# Usage: image.sh PAUSE_BINARY. Prints the cache directory on its last line, holding
# mcpcache.tar, peers.tar, pause.tar and names (the image names, one `file name` a line).
set -euo pipefail

pause_bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${MCPCACHE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpcache}/images
mkdir -p "$cache"
buildah=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver overlay)

hash_files() { (cd "$root" && sha256sum "$@") | sha256sum | cut -c1-16; }

base=$(awk 'toupper($1) == "FROM" { print $2; exit }' "$root/Dockerfile")
stand_in=(mmdebstrap --quiet --variant=essential --format=tar --skip=output/dev
  --include=python3,python3-venv,python-is-python3,ca-certificates
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/locale/*')
base_key=$({ buildah --version; echo "$base ${stand_in[*]}"; } | sha256sum | cut -c1-16)
app_key=$(
  cd "$root"
  { echo "$base_key"; git ls-files -co --exclude-standard Dockerfile .dockerignore requirements/image.txt \
      pyproject.toml README.md sidecar operator | grep -v __pycache__ | sort | xargs sha256sum; } \
    | sha256sum | cut -c1-16
)
peers_key=$({ echo "$app_key"; cd "$root" && sha256sum requirements/peers.txt tests/node/peers.Containerfile; } | sha256sum | cut -c1-16)
pause_key=$(sha256sum "$pause_bin" | cut -c1-16)
out="$cache/$app_key-$peers_key-$pause_key"
if [ -f "$out/names" ]; then
  touch "$out"
  echo "images: reusing $out" >&2
  echo "$out"
  exit 0
fi

start=$(date +%s)
tmp="$cache/.build-$$"
rm -rf "$tmp"
mkdir -p "$tmp"
# Only what this run made: another build may be using the same storage at once.
containers=()
cleanup() {
  for container in "${containers[@]}"; do
    "${buildah[@]}" rm "$container" >/dev/null 2>&1 || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# The stand-in for the Dockerfile's FROM, made once per recipe.
made=$("${buildah[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "mcpcache.stand-in"}}' "$base" 2>/dev/null || true)
if [ "$made" != "$base_key" ]; then
  sources=()
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$file" ] && sources+=("$file")
  done
  "${stand_in[@]}" bookworm "$tmp/rootfs.tar" "${sources[@]}"
  container=$("${buildah[@]}" from scratch)
  containers+=("$container")
  "${buildah[@]}" add "$container" "$tmp/rootfs.tar" / >/dev/null
  "${buildah[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 --label "mcpcache.stand-in=$base_key" "$container"
  "${buildah[@]}" commit --quiet --rm "$container" "$base" >/dev/null
  "${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
  rm -f "$tmp/rootfs.tar"
  echo "images: stand-in $base made in $(($(date +%s) - start))s" >&2
fi

app="localhost/mcpcache:$app_key"
peers="localhost/mcpcache-peers:$peers_key"
pause="localhost/pause:$pause_key"
bud=("${buildah[@]}" bud --quiet --pull=never --isolation=chroot --network=host --layers=false)
# pip in the RUN steps trusts what this machine's own tools trust (a TLS-inspecting proxy's
# CA, say): the host's CA bundle and a pip.conf naming it are mounted for the build only.
bundle=/etc/ssl/certs/ca-certificates.crt
if [ -s "$bundle" ]; then
  printf '[global]\ncert = /etc/mcpcache-build-ca.crt\n' > "$tmp/pip.conf"
  bud+=(-v "$bundle:/etc/mcpcache-build-ca.crt:ro" -v "$tmp/pip.conf:/etc/pip.conf:ro")
fi
"${bud[@]}" -f "$root/Dockerfile" -t "$app" "$root" >&2
"${bud[@]}" -f "$here/peers.Containerfile" --build-arg "BASE=$app" -t "$peers" "$root" >&2
cp "$pause_bin" "$tmp/pause"
container=$("${buildah[@]}" from scratch)
containers+=("$container")
"${buildah[@]}" copy "$container" "$tmp/pause" /pause >/dev/null
"${buildah[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$container"
"${buildah[@]}" commit --quiet --rm "$container" "$pause" >/dev/null

mkdir -p "$tmp/out"
for pair in "mcpcache.tar $app" "peers.tar $peers" "pause.tar $pause"; do
  set -- $pair
  "${buildah[@]}" push --quiet "$2" "docker-archive:$tmp/out/$1:$2" >&2
  echo "$1 $2" >> "$tmp/out/names"
done
# Only the stand-in stays in buildah's storage; the archives are the cache. Another
# build of the same inputs running at once may still be using an image: it stays then.
"${buildah[@]}" rmi "$app" "$peers" "$pause" >/dev/null 2>&1 || true
# Another build of the same inputs may have finished first: its result is as good.
if [ ! -f "$out/names" ]; then
  rm -rf "$out"
  mv -T "$tmp/out" "$out"
fi
# Older builds go, but the two most recent besides this one stay: another checkout's
# tests may be importing them right now.
touch "$out"
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name storage ! -name run ! -name '.build-*' \
  -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -rf
echo "images: built in $(($(date +%s) - start))s" >&2
echo "$out"
