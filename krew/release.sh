#!/usr/bin/env bash
# Builds the release archive for this machine's platform, renders the krew manifest and, with
# --image, the container image: all from one binary.
#
#   krew/release.sh [--bin PATH] [--dist DIR] [--base-url URL] [--all] [--image]
#
#   --bin PATH      package this binary instead of building it (on Linux: a static musl build,
#                   `cargo build --release --target <arch>-unknown-linux-musl`)
#   --dist DIR      where archives and the rendered raft.yaml go (default: dist/)
#   --base-url URL  where the archives will be downloaded from
#                   (default: the GitHub release of this version)
#   --all           a release: every platform of the template must have its archive in DIR
#                   (built on its own machine and copied there); without it, the manifest
#                   keeps only the platforms whose archives are present, e.g. this machine's.
#   --image         Linux only: also build krew/Containerfile with buildah (daemonless) into
#                   DIR/kubectl-raft-image-linux-<arch>.tar (an OCI archive tagged v<version>)
#                   and check it: unpacked with umoci, it holds the binary and nothing else,
#                   which runs and is the archive's binary. Needs the static binary.
#
# Archives are kubectl-raft-<os>-<arch>.tar.gz with the binary and LICENSE at the top.
# Prerequisites on Debian: musl-tools, and `rustup target add <arch>-unknown-linux-musl`;
# for --image: buildah, umoci.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="" dist="$root/dist" base_url="" all=0 image=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --dist) dist=$2; shift 2 ;;
    --base-url) base_url=$2; shift 2 ;;
    --all) all=1; shift ;;
    --image) image=1; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "release.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
[ -n "$version" ] || { echo "release.sh: no version in Cargo.toml" >&2; exit 1; }
base_url=${base_url:-https://github.com/kubectl-raft/kubectl-raft/releases/download/v$version}
base_url=${base_url%/}

case "$(uname -s)" in
  Linux) os=linux ;; Darwin) os=darwin ;; MINGW*|MSYS*|CYGWIN*) os=windows ;;
  *) echo "release.sh: unsupported OS $(uname -s)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64|amd64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;;
  *) echo "release.sh: unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac
exe=kubectl-raft; [ "$os" = windows ] && exe=kubectl-raft.exe

[ "$image" = 0 ] || [ "$os" = linux ] || { echo "release.sh: --image needs Linux" >&2; exit 1; }
target_dir=${CARGO_TARGET_DIR:-$root/target}
if [ -z "$bin" ]; then
  if [ "$os" = linux ]; then
    # Static (musl): the same binary runs on any Linux and alone in the image.
    triple="$(uname -m)-unknown-linux-musl"
    rustup target list --installed 2>/dev/null | grep -qx "$triple" \
      || { echo "release.sh: the Rust target $triple is missing: rustup target add $triple" >&2; exit 1; }
    command -v musl-gcc >/dev/null \
      || { echo "release.sh: musl-gcc is missing (it compiles ring's C): apt-get install musl-tools" >&2; exit 1; }
    (cd "$root" && KUBECTL_RAFT_GIT_COMMIT=${KUBECTL_RAFT_GIT_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)} \
      cargo build --release --locked --target "$triple" --bin kubectl-raft)
    bin="$target_dir/$triple/release/$exe"
  else
    (cd "$root" && cargo build --release --locked --bin kubectl-raft)
    bin="$target_dir/release/$exe"
  fi
fi
[ -x "$bin" ] || { echo "release.sh: $bin is not an executable" >&2; exit 1; }

mkdir -p "$dist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/$exe"
cp "$root/LICENSE" "$stage/LICENSE"
archive="$dist/kubectl-raft-$os-$arch.tar.gz"
# Reproducible: fixed owner, order and mtime, so the same binary gives the same sha256.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - "$exe" LICENSE \
  | gzip -n > "$archive"
echo "release.sh: $archive" >&2
# The roles each verb needs, an asset of the release beside the archives: a user who installs
# from a release applies it from there (`kubectl apply -f BASE_URL/rbac.yaml`, the manifest's
# caveat), with no clone of the source.
cp "$root/docs/rbac.yaml" "$dist/rbac.yaml"
echo "release.sh: $dist/rbac.yaml" >&2

# Render: substitute only our placeholders (the caveats hold shell ${...} of their own), and
# drop a platform block whose archive is absent (unless --all, where that is an error).
sums=""
for p in linux-amd64 linux-arm64 darwin-amd64 darwin-arm64 windows-amd64; do
  f="$dist/kubectl-raft-$p.tar.gz"
  if [ -f "$f" ]; then
    sums+="$(echo "$p" | tr a-z- A-Z_)=$(sha256sum "$f" | cut -d' ' -f1) "
  elif [ "$all" = 1 ]; then
    echo "release.sh: --all: $f is missing (build it on a $p machine with this script)" >&2
    exit 1
  fi
done
awk -v version="$version" -v base="$base_url" -v sums="$sums" '
  BEGIN { n = split(sums, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], a, "="); sha[a[1]] = a[2] } }
  function flush() { if (block != "" && keep) printf "%s", block; block = ""; keep = 1 }
  !started && /^#/ { next }
  /^apiVersion:/ { started = 1 }
  /^  - selector:/ { flush(); inblock = 1 }
  {
    line = $0
    gsub(/\$\{VERSION\}/, version, line)
    gsub(/\$\{BASE_URL\}/, base, line)
    if (match(line, /\$\{SHA256_[A-Z0-9_]+\}/)) {
      key = substr(line, RSTART + 9, RLENGTH - 10)
      if (key in sha) { sub(/\$\{SHA256_[A-Z0-9_]+\}/, sha[key], line) } else { keep = 0 }
    }
    if (inblock) block = block line "\n"; else print line
  }
  END { flush() }
' "$root/krew/raft.yaml" > "$dist/raft.yaml"
if grep -q '\${SHA256_\|\${VERSION}\|\${BASE_URL}' "$dist/raft.yaml"; then
  echo "release.sh: unrendered placeholder left in $dist/raft.yaml" >&2
  exit 1
fi
echo "release.sh: $dist/raft.yaml (v$version, platforms: $(grep -c '^  - selector:' "$dist/raft.yaml"))" >&2

[ "$image" = 1 ] || exit 0

# The image: krew/Containerfile over a context holding only the binary, built by buildah in a
# storage of its own (vfs, chroot isolation: no daemon, nothing left behind), pushed into an
# OCI archive, then unpacked with umoci and checked.
for t in buildah umoci; do
  command -v "$t" >/dev/null || { echo "release.sh: --image needs $t: apt-get install $t" >&2; exit 1; }
done
if LC_ALL=C readelf -l "$bin" 2>/dev/null | grep -q 'program interpreter'; then
  echo "release.sh: --image needs a static binary; $bin is dynamically linked (build without --bin)" >&2
  exit 1
fi
img="$dist/kubectl-raft-image-linux-$arch.tar"
tag="v$version"
ctx="$stage/context" store="$stage/storage"
mkdir -p "$ctx" "$store"
cp "$bin" "$ctx/kubectl-raft"
bah() { buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"; }
trap 'bah rm --all >/dev/null 2>&1 || true; chmod -R u+w "$stage" 2>/dev/null; rm -rf "$stage"' EXIT
bah build --quiet --isolation chroot --layers=false --timestamp 0 --build-arg "VERSION=$version" \
  -f "$root/krew/Containerfile" -t "localhost/kubectl-raft:$tag" "$ctx" >/dev/null
rm -f "$img"
bah push --quiet "localhost/kubectl-raft:$tag" "oci-archive:$img:$tag"
echo "release.sh: $img (OCI archive, tag $tag)" >&2

# Check what was built, as a user would take it: unpack the archive and run the binary.
check="$stage/check"
mkdir -p "$check/layout"
tar -xf "$img" -C "$check/layout"
umoci unpack --rootless --image "$check/layout:$tag" "$check/bundle" >/dev/null
files=$(cd "$check/bundle/rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')
[ "$files" = "./kubectl-raft " ] \
  || { echo "release.sh: the image must hold only /kubectl-raft; it holds: $files" >&2; exit 1; }
cmp -s "$bin" "$check/bundle/rootfs/kubectl-raft" \
  || { echo "release.sh: the image's binary is not the archive's" >&2; exit 1; }
got=$("$check/bundle/rootfs/kubectl-raft" version -o json | sed -n 's/.*"version": *"\([^"]*\)".*/\1/p')
[ "$got" = "$version" ] \
  || { echo "release.sh: the image's binary says version '$got', not $version" >&2; exit 1; }
entry=$(tr -d ' \t\n' < "$check/bundle/config.json" | grep -o '"args":\[[^]]*\]' | head -1)
[ "$entry" = '"args":["/kubectl-raft"]' ] \
  || { echo "release.sh: the image's entrypoint is $entry, not /kubectl-raft" >&2; exit 1; }
echo "release.sh: checked: unpacked, it holds only /kubectl-raft, which runs (version $got)" >&2
