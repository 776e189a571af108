#!/usr/bin/env bash
# Stops the test world and removes every process, namespace, address and file it made
# (the built binaries stay, as a cache).
set -euo pipefail
KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
if [ -x "$KWORLD_DIR/bin/kworld" ]; then
  exec "$KWORLD_DIR/bin/kworld" down
fi
