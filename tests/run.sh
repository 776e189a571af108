#!/usr/bin/env bash
# Runs every test: formatting, lints, unit tests, and the end-to-end tests against the real
# test world (built from source and started on demand by the tests themselves).
# Usage: bash tests/run.sh        (as root; CI runs exactly this through .ci/run)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
. "$root/tests/world/env.sh"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

step() { printf '\n== %s\n' "$*" >&2; }
cleanup() {
  rc=$?
  if [ -s "$KWORLD_DIR/timings.tsv" ]; then
    step "the 20 slowest tests (seconds from their namespace's creation to its drop; binary; test)"
    # sed reads all of sort's output (head would close the pipe early: sort's SIGPIPE, 141,
    # then ended a green run under pipefail).
    sort -rn "$KWORLD_DIR/timings.tsv" | sed -n '1,20s/^/  /p' >&2 || true
    awk -F'\t' '{t[$2]+=$1; n[$2]++} END {for (b in t) printf "  %8.1f s  %3d namespace(s)  %s\n", t[b], n[b], b}' \
      "$KWORLD_DIR/timings.tsv" | sort -rn >&2 || true
  fi
  if [ "$rc" -ne 0 ]; then
    step "the run failed ($rc): the machine and the world as they are now"
    [ -x "$KWORLD_DIR/bin/kworld" ] && "$KWORLD_DIR/bin/kworld" doctor >&2 || disk
  fi
  if [ -n "${world_pid:-}" ] && kill -0 "$world_pid" 2>/dev/null; then
    pkill -TERM -P "$world_pid" 2>/dev/null || true; kill "$world_pid" 2>/dev/null || true
  fi
  for pid in "${image_pid:-}" "${spur_pid:-}"; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      pkill -TERM -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true
    fi
  done
  tests/world/down.sh >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT

disk() { df -h "$root" "$KWORLD_DIR" 2>/dev/null | sed 's/^/  /' >&2 || true; }
step "disk before the run"; disk

step "toolchain"
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

# The world's build (Debian packages, Go modules, the control plane, spurctld from source: about
# 11 minutes on a new machine, seconds when cached) runs beside the Rust steps below (#41): its
# downloads and Go's parallel compile overlap clippy's and cargo's. Its log is shown when it is
# waited for, before anything needs the world.
step "build the test world (cached), in the background"
mkdir -p "$KWORLD_DIR"
# spurctld is built later, beside the tests (below); the world's build here and the one
# tests/world/up.sh runs for the tests leave it out.
export KRAFT_SPURCTLD=background
t_world=$(date +%s)
tests/world/build.sh > "$KWORLD_DIR/world-build.log" 2>&1 &
world_pid=$!
echo "started (pid $world_pid, log $KWORLD_DIR/world-build.log)" >&2

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy --locked --all-targets -- -D warnings"
cargo clippy --locked --all-targets -- -D warnings

step "cargo build --locked --bins --examples (the plugin, and the write-load client the end-to-end tests run)"
cargo build --locked --bins --examples

step "the test world's build"
world_rc=0
wait "$world_pid" || world_rc=$?
world_pid=
sed 's/^/  /' "$KWORLD_DIR/world-build.log" >&2 || true
if [ "$world_rc" -ne 0 ]; then
  echo "the world's build failed ($world_rc): its log is above" >&2
  exit "$world_rc"
fi
echo "world built or reused in $(( $(date +%s) - t_world ))s (beside the steps above)" >&2

step "image: the release step (a static build, the krew archive and the OCI image from one binary), in the background"
# Off the critical path (#41): the release build is CPU work, the end-to-end tests mostly wait
# on pods. It runs niced, under the image lock tests/image.sh takes; the tests that need the
# image (tests/common: image_binary) wait on that lock. Its outcome is checked after the tests.
mkdir -p "$KWORLD_DIR"
t_image=$(date +%s)
nice -n 19 bash tests/image.sh > "$KWORLD_DIR/image.log" 2>&1 &
image_pid=$!
echo "started (pid $image_pid, log $KWORLD_DIR/image.log)" >&2

step "spurctld: built from Spur's source (cached), in the background"
# Off the critical path (#41): about 3 minutes of CPU on a new machine, needed only by the
# spurctld tests, which wait on spurctld.lock (tests/e2e/spurctld.rs). The lock is taken here,
# before the build starts, and handed to it (fd 8), so no test can look before it is held.
# It starts when the image step has ended: the tests that need the image come earlier in the
# suite than the spurctld tests, and the two builds beside each other made the image 40 % slower
# on a cold run (a gate test waited 4.5 minutes for it).
t_spur=$(date +%s)
exec 8>"$KWORLD_DIR/spurctld.lock"
flock -w 900 8 || { echo "spurctld.lock is held by another process (an earlier run's build?) for 15 minutes: $(fuser "$KWORLD_DIR/spurctld.lock" 2>&1)" >&2; exit 1; }
{
  tail --pid="$image_pid" -f /dev/null
  KRAFT_SPURCTLD_LOCK_HELD=1 nice -n 19 bash tests/world/spurctld.sh
} > "$KWORLD_DIR/spurctld.log" 2>&1 &
spur_pid=$!
exec 8>&-
echo "started (pid $spur_pid, log $KWORLD_DIR/spurctld.log)" >&2

step "krew: render the manifest, validate it with krew's validator, install through krew"
bash tests/krew.sh target/debug/kubectl-raft

# The real-kubelet twins of the world's fidelity checks (world_fidelity::*_on_real_kubelets)
# check the world, not the plugin: they run when the world, their suite or the tests' common
# code changed since they last passed here (#41), or with KRAFT_FIDELITY=always. The verbs'
# own real-kubelet tests (status, yield, drain, restart, watch, NATS) always run.
fidelity_key=$(find tests/world tests/e2e/world_fidelity.rs tests/common -type f -print0 \
  | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
skip=()
if [ "${KRAFT_FIDELITY:-}" != always ] \
  && [ "$(cat "$KWORLD_DIR/fidelity-twins.passed" 2>/dev/null)" = "$fidelity_key" ]; then
  mapfile -t twins < <(cargo test --locked --test e2e -- --list 2>/dev/null \
    | sed -n 's/^\(world_fidelity::[a-z0-9_]*_on_real_kubelets\): test$/\1/p')
  for t in "${twins[@]}"; do skip+=(--skip "$t"); done
  step "world_fidelity's ${#twins[@]} real-kubelet twins: not run (the world, their suite and tests/common unchanged since they passed here, key $fidelity_key; KRAFT_FIDELITY=always runs them)"
fi

step "cargo test (unit tests, then end-to-end tests in the real world)"
: > "$KWORLD_DIR/timings.tsv"
tests_rc=0
# Two test threads on the 2 cores (#41). Three were faster (the restart suite side by side on
# one world: 174 s at two threads with the CPU 33 % idle, 142 s at three; a warm run 30 min 12 s,
# all passed), but the cold run at three, beside the image's and spurctld's niced builds, had two
# failures under load (a world pod's deletion that hung 180 s, and a test judge that read a
# start-up election): two until a cold run at three is green. RUST_TEST_THREADS set wins.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-2}"
cargo test --locked --lib --bins --tests --no-fail-fast -- "${skip[@]}" || tests_rc=$?
# Every test passed, the twins among them: their key is remembered.
if [ "$tests_rc" -eq 0 ] && [ ${#skip[@]} -eq 0 ]; then
  echo "$fidelity_key" > "$KWORLD_DIR/fidelity-twins.passed"
fi

step "spurctld: the background build's outcome"
spur_rc=0
wait "$spur_pid" || spur_rc=$?
spur_pid=
sed 's/^/  /' "$KWORLD_DIR/spurctld.log" >&2 || true
echo "spurctld's build ended $(( $(date +%s) - t_spur ))s after it started, status $spur_rc" >&2
if [ "$spur_rc" -ne 0 ]; then
  # The spurctld tests ran the script again when the background build had failed; where that
  # built it (a download that failed once), this is the cached check, and the run is judged by it.
  echo "spurctld's background build failed (its log is above); once more:" >&2
  spur_rc=0
  bash tests/world/spurctld.sh >&2 || spur_rc=$?
fi

step "image: the background release step's outcome"
image_rc=0
wait "$image_pid" || image_rc=$?
image_pid=
sed 's/^/  /' "$KWORLD_DIR/image.log" | grep -v '^  *Compiling ' >&2 || true
echo "image step ended $(( $(date +%s) - t_image ))s after it started, status $image_rc" >&2
[ "$image_rc" -eq 0 ] || echo "the image step failed: its log is above" >&2
[ "$tests_rc" -eq 0 ] || exit "$tests_rc"
[ "$spur_rc" -eq 0 ] || exit "$spur_rc"
exit "$image_rc"
