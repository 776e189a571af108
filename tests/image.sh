#!/usr/bin/env bash
# The image check CI runs (tests/run.sh): the release step as a user's release would run it,
# `krew/release.sh --image` (a static musl build, the krew archive and the OCI image from that
# one binary), then the image as a user takes it: unpacked, its binary copies itself with
# `copy-to` (the init-container pattern of docs/yield.md) and the copy runs. Leaves the
# unpacked root filesystem in $KWORLD_DIR/image/rootfs, where the end-to-end test of the
# init-container pattern (tests/e2e/keeper.rs) takes the binary from.
#
#   bash tests/image.sh     (installs musl-tools, buildah and umoci from Debian's packages and
#                            the Rust musl target when missing; the build is cached in
#                            $KWORLD_DIR/image/target)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/tests/world/env.sh"
out="$KWORLD_DIR/image"
mkdir -p "$out"
# One image step at a time, into one directory: every run holds $KWORLD_DIR/image.lock from
# start to end; tests that use the image wait on it (tests/common: image_binary), so a test
# never takes a half-written root filesystem while tests/run.sh builds it in the background.
if [ -z "${KRAFT_IMAGE_LOCK_HELD:-}" ]; then
  exec env KRAFT_IMAGE_LOCK_HELD=1 flock "$KWORLD_DIR/image.lock" bash "$0" "$@"
fi

missing=()
command -v musl-gcc >/dev/null || missing+=(musl-tools)
command -v buildah >/dev/null || missing+=(buildah)
command -v umoci >/dev/null || missing+=(umoci)
if [ ${#missing[@]} -gt 0 ]; then
  echo "image.sh: installing ${missing[*]}" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi
triple="$(uname -m)-unknown-linux-musl"
rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"

t0=$(date +%s)
rm -rf "$out/dist"
CARGO_TARGET_DIR="$out/target" bash "$root/krew/release.sh" --image --dist "$out/dist" \
  --base-url "https://example.invalid/release"
echo "image.sh: release step (static build, krew archive, image) in $(( $(date +%s) - t0 ))s" >&2

arch=$(case "$(uname -m)" in x86_64|amd64) echo amd64 ;; aarch64|arm64) echo arm64 ;; esac)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# The krew archive and the image carry the same binary.
tar -xzf "$out/dist/kubectl-raft-linux-$arch.tar.gz" -C "$work" kubectl-raft
mkdir -p "$work/layout"
tar -xf "$out/dist/kubectl-raft-image-linux-$arch.tar" -C "$work/layout"
tag=$(sed -n 's/^version = "\(.*\)"/v\1/p' "$root/Cargo.toml" | head -1)
umoci unpack --rootless --image "$work/layout:$tag" "$work/bundle" >/dev/null
cmp "$work/kubectl-raft" "$work/bundle/rootfs/kubectl-raft" \
  || { echo "image.sh: the krew archive's binary is not the image's" >&2; exit 1; }

# The init container's step: the image's binary copies itself onto a shared volume; the copy
# is executable and runs.
mkdir -p "$work/raft"
"$work/bundle/rootfs/kubectl-raft" copy-to "$work/raft"
"$work/raft/kubectl-raft" version >/dev/null \
  || { echo "image.sh: the copy made by copy-to does not run" >&2; exit 1; }

rm -rf "$out/rootfs"
cp -a "$work/bundle/rootfs" "$out/rootfs"
echo "image.sh: ok: $(ls -l "$out/dist/kubectl-raft-image-linux-$arch.tar" | awk '{print $5}') bytes; rootfs in $out/rootfs" >&2

# Reproducible: the same binary gives the same image, digest for digest.
again=$(mktemp -d)
bash "$root/krew/release.sh" --bin "$out/rootfs/kubectl-raft" --image --dist "$again" \
  --base-url "https://example.invalid/release" 2>/dev/null
a=$(tar -xOf "$out/dist/kubectl-raft-image-linux-$arch.tar" index.json | sha256sum)
b=$(tar -xOf "$again/kubectl-raft-image-linux-$arch.tar" index.json | sha256sum)
rm -rf "$again"
[ "$a" = "$b" ] || { echo "image.sh: two builds of one binary gave different images" >&2; exit 1; }
echo "image.sh: reproducible: a second build of the same binary gave the same manifest" >&2
