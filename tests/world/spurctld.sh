#!/usr/bin/env bash
# Builds Spur's spurctld (openraft) from source for the test world and installs it as
# /usr/local/bin/spurctld, where tests/manifests/spurctld-3.yaml runs it from. Cached: rebuilt
# only when its source or this script changes. Called by build.sh, or by tests/run.sh in the
# background beside the tests (KRAFT_SPURCTLD=background, #41); one run at a time, under
# $KWORLD_DIR/spurctld.lock, which the spurctld tests wait on before they look for the binary.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/env.sh"
bin="$KWORLD_DIR/bin"
mkdir -p "$bin"
if [ -z "${KRAFT_SPURCTLD_LOCK_HELD:-}" ]; then
  # -o: the lock is flock's own, not inherited by the build's processes (one that outlived
  # the script would hold it).
  exec env KRAFT_SPURCTLD_LOCK_HELD=1 flock -o "$KWORLD_DIR/spurctld.lock" bash "$0" "$@"
fi
stamp() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# Spur's spurctld (openraft), built from source: SPUR_SRC (a source directory or a .tar.gz of
# one), else the snapshot in the workplace's shared/third_party (ROCm/spur at 4cc3da8), else a
# clone of the upstream repository at that commit where the machine reaches GitHub. Where none
# can be had the reason is left in $bin/.spurctld.missing and the spurctld tests say it.
spur_commit=4cc3da8
spur_src=${SPUR_SRC:-}
if [ -z "$spur_src" ]; then
  for dir in "$here/../../../shared/third_party" /work/shared/third_party; do
    [ -f "$dir/spur-$spur_commit.tar.gz" ] && { spur_src=$(cd "$dir" && pwd)/spur-$spur_commit.tar.gz; break; }
  done
fi
rm -f "$bin/.spurctld.missing"
if [ -z "$spur_src" ]; then
  clone="$KWORLD_DIR/src/spur-git"
  if [ -d "$clone/.git" ] || timeout 120 git clone -q https://github.com/ROCm/spur "$clone" 2>/dev/null; then
    git -C "$clone" checkout -q "$spur_commit" 2>/dev/null && spur_src=$clone
  fi
fi
if [ -z "$spur_src" ]; then
  echo "no Spur source: SPUR_SRC is unset, no spur-$spur_commit.tar.gz in shared/third_party, and github.com/ROCm/spur could not be cloned" > "$bin/.spurctld.missing"
  echo "spurctld.sh: $(cat "$bin/.spurctld.missing"); the spurctld tests will be skipped" >&2
else
  if [ -f "$spur_src" ]; then spur_stamp=$(sha256sum "$spur_src" | cut -c1-16); else spur_stamp=$(git -C "$spur_src" rev-parse HEAD 2>/dev/null || echo "$spur_src"); fi
  spur_stamp="$spur_stamp $(stamp "$here/spurctld.sh")"
  if [ "$(cat "$bin/.spurctld.stamp" 2>/dev/null)" != "$spur_stamp" ] || [ ! -x "$bin/spurctld" ]; then
    if ! command -v protoc >/dev/null; then
      echo "spurctld.sh: installing protobuf-compiler (Spur's build generates its gRPC code)" >&2
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 protobuf-compiler >/dev/null
    fi
    work=$spur_src
    if [ -f "$spur_src" ]; then
      work="$KWORLD_DIR/src/spur-$spur_commit"
      rm -rf "$work" && mkdir -p "$work"
      # -m: the files dated now, so that cargo rebuilds what a changed archive changed (their
      # dates in the archive may be older than the last build in spur-target).
      tar -xzmf "$spur_src" -C "$work" --strip-components=1
    fi
    # No stamp until the new binary is in place: a build cut off is built again next time.
    rm -f "$bin/.spurctld.stamp"
    echo "spurctld.sh: building spurctld from $spur_src (cold: ~4 min on 2 cores)" >&2
    t0=$(date +%s)
    # Its rust-toolchain.toml pins 1.95.0 and asks for components the build does not use
    # (rustup would try to download them): built with the toolchain this machine has.
    toolchain=$(cd / && rustup show active-toolchain | cut -d' ' -f1)
    (cd "$work" && RUSTUP_TOOLCHAIN=$toolchain CARGO_TARGET_DIR="$KWORLD_DIR/spur-target" \
      cargo build -q -p spurctld --locked 8>&-)
    # Into place by a rename: a copy cut off never passes for the binary.
    install -m 0755 "$KWORLD_DIR/spur-target/debug/spurctld" "$bin/spurctld.new"
    mv -f "$bin/spurctld.new" "$bin/spurctld"
    echo "$spur_stamp" > "$bin/.spurctld.stamp"
    echo "spurctld.sh: spurctld built in $(( $(date +%s) - t0 ))s" >&2
  fi
  if ! cmp -s "$bin/spurctld" /usr/local/bin/spurctld 2>/dev/null; then
    install -m 0755 "$bin/spurctld" /usr/local/bin/spurctld.new
    mv -f /usr/local/bin/spurctld.new /usr/local/bin/spurctld
  fi
fi

