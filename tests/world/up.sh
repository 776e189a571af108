#!/usr/bin/env bash
# Brings the test world up (building what is missing) and prints the admin kubeconfig path.
# Usage: tests/world/up.sh [--nodes N]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
"$here/build.sh" >&2
kubeconfig=$("$KWORLD_DIR/bin/kworld" up "$@")
# What an admin sets up once per Kubernetes cluster (docs/rbac.yaml): the plugin's roles and
# the namespace its drain and restart locks live in.
KUBECONFIG=$kubeconfig "$KWORLD_DIR/bin/kubectl" apply -f "$here/../../docs/rbac.yaml" >&2
# And the gate's own namespace, as docs/gate.yaml declares it (its first document), where
# the tests that run the gate in the cluster keep its Secret and records.
awk '/^---$/{exit} {print}' "$here/../../docs/gate.yaml" \
  | KUBECONFIG=$kubeconfig "$KWORLD_DIR/bin/kubectl" apply -f - >&2
echo "$kubeconfig"
