#!/usr/bin/env bash
# Brings the test world up (building what is missing) and prints the admin kubeconfig path.
# Usage: tests/world/up.sh [--nodes N]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
"$here/build.sh" >&2
exec "$KWORLD_DIR/bin/kworld" up "$@"
