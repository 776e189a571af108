#!/usr/bin/env bash
# Builds the release archive for this machine's platform and renders the krew manifest.
#
#   krew/release.sh [--bin PATH] [--dist DIR] [--base-url URL] [--all]
#
#   --bin PATH      package this binary instead of building `cargo build --release`
#   --dist DIR      where archives and the rendered raft.yaml go (default: dist/)
#   --base-url URL  where the archives will be downloaded from
#                   (default: the GitHub release of this version)
#   --all           a release: every platform of the template must have its archive in DIR
#                   (built on its own machine and copied there); without it, the manifest
#                   keeps only the platforms whose archives are present, e.g. this machine's.
#
# Archives are kubectl-raft-<os>-<arch>.tar.gz with the binary and LICENSE at the top.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="" dist="$root/dist" base_url="" all=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --dist) dist=$2; shift 2 ;;
    --base-url) base_url=$2; shift 2 ;;
    --all) all=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release --locked)
  bin="$root/target/release/$exe"
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
