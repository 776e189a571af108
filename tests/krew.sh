#!/usr/bin/env bash
# The krew check CI runs (tests/run.sh): render the manifest with krew/release.sh, validate it
# with krew's own validate-krew-manifest (which installs every platform in it through
# `kubectl krew install`, downloading the archive from a local HTTP server), validate the full
# five-platform template's structure, then install the plugin with krew into a throwaway
# KREW_ROOT and run it through kubectl.
#
#   bash tests/krew.sh [BINARY]     (default: target/debug/kubectl-raft)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$root/tests/world/env.sh"
bin=${1:-$root/target/debug/kubectl-raft}
krew_version=v0.4.3
tools="$KWORLD_DIR/krew-$krew_version"

if [ ! -x "$tools/kubectl-krew" ] || [ ! -x "$tools/validate-krew-manifest" ]; then
  echo "krew.sh: building krew $krew_version and its manifest validator (sigs.k8s.io/krew)" >&2
  mkdir -p "$tools"
  GOBIN="$tools" go install "sigs.k8s.io/krew/cmd/krew@$krew_version" \
    "sigs.k8s.io/krew/cmd/validate-krew-manifest@$krew_version"
  mv "$tools/krew" "$tools/kubectl-krew"
fi
kubectl=$(command -v kubectl || true)
[ -n "$kubectl" ] || kubectl="$KWORLD_DIR/bin/kubectl"
[ -x "$kubectl" ] || { echo "krew.sh: no kubectl (tests/world/build.sh builds one)" >&2; exit 1; }

work=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/path"
ln -s "$kubectl" "$work/path/kubectl"
ln -s "$tools/kubectl-krew" "$work/path/kubectl-krew"
export PATH="$work/path:$PATH"

# A local "release" server for the archives, on a free port.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
bash "$root/krew/release.sh" --bin "$bin" --dist "$work/dist" --base-url "http://127.0.0.1:$port"
(cd "$work/dist" && exec python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1) &
server=$!
for _ in $(seq 50); do
  curl -fsS -o /dev/null "http://127.0.0.1:$port/raft.yaml" 2>/dev/null && break
  sleep 0.1
done

echo "== validate-krew-manifest (structure, and installation of each platform in it)" >&2
validate-krew-manifest() { "$tools/validate-krew-manifest" -manifest "$1" "${@:2}"; }
validate-krew-manifest "$work/dist/raft.yaml"

echo "== validate-krew-manifest -skip-install on the five-platform template" >&2
mkdir -p "$work/full"
sed -e 's/\${VERSION}/0.0.0/' -e 's#\${BASE_URL}#https://example.invalid#' \
    -e 's/\${SHA256_[A-Z0-9_]*}/'"$(printf '0%.0s' $(seq 64))"'/' \
    "$root/krew/raft.yaml" > "$work/full/raft.yaml"
validate-krew-manifest "$work/full/raft.yaml" -skip-install

echo "== kubectl krew install --manifest --archive, then kubectl raft through kubectl" >&2
export KREW_ROOT="$work/krew-root"
archive=$(ls "$work"/dist/kubectl-raft-*.tar.gz)
kubectl krew install --manifest="$work/dist/raft.yaml" --archive="$archive" </dev/null
export PATH="$KREW_ROOT/bin:$PATH"
# Read the whole listing first: `kubectl plugin list` exits non-zero when it warns (another
# kubectl-raft further along PATH is "overshadowed"), and `| grep -q` under pipefail can fail
# on SIGPIPE once grep has its match.
plugins=$(kubectl plugin list 2>&1) || true
grep -qF "$KREW_ROOT/bin/kubectl-raft" <<<"$plugins" \
  || { printf 'krew.sh: kubectl plugin list does not show the krew-installed kubectl-raft; it printed:\n%s\n' "$plugins" >&2; exit 1; }
kubectl raft --help | grep -q "Safe maintenance of Raft clusters" \
  || { echo "krew.sh: kubectl raft --help did not print the plugin's help" >&2; exit 1; }
kubectl raft version

# (docs/rbac.yaml itself is applied by the end-to-end tests, tests/e2e/rbac.rs.)
echo "== the caveat's rbac.yaml: served beside the archives, and the same as docs/rbac.yaml" >&2
rbac_url=$(sed -n 's#^ *kubectl apply -f \(http[^ ]*/rbac.yaml\)$#\1#p' "$work/dist/raft.yaml")
[ -n "$rbac_url" ] || { echo "krew.sh: the manifest's caveats name no rbac.yaml to apply" >&2; exit 1; }
curl -fsS "$rbac_url" | cmp - "$root/docs/rbac.yaml" \
  || { echo "krew.sh: $rbac_url is not docs/rbac.yaml" >&2; exit 1; }
echo "krew.sh: the manifest validates and kubectl raft installs through krew" >&2
