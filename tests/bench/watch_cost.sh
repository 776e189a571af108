#!/usr/bin/env bash
# Benchmark (not a test): what `kubectl raft status --watch` costs the API server, for one
# 3-member etcd, at the default interval (2s) and at 500ms. The API server's own counters
# (apiserver_request_total) are read before and after a minute of watching and a minute of not
# watching; the requests of the world's controllers and agents (the minute without a watch) are
# subtracted. Replicas are asked through pods/proxy (the default), so every replica request is
# an API request too.
# Usage: bash tests/bench/watch_cost.sh [SECONDS=60]
set -euo pipefail
secs=${1:-60}
NODES=4 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
ns=bench-watch
deploy "$ns" tests/manifests/etcd-3.yaml 3
total() { "$k" get --raw /metrics | python3 -c "import sys
n = 0
for l in sys.stdin:
    if l.startswith('apiserver_request_total{'):
        n += float(l.rsplit(' ', 1)[1])
print(int(n))"; }
minute() { # what to run in the background, or nothing
  a=$(total)
  if [ -n "$1" ]; then "$raft" status etcd -n "$ns" --watch --interval "$1" -o json > /dev/null 2>&1 & pid=$!; fi
  sleep "$secs"
  if [ -n "$1" ]; then kill -INT "$pid"; wait "$pid" || true; fi
  b=$(total)
  echo $(( b - a ))
}
base=$(minute "")
w2=$(minute 2s)
w05=$(minute 500ms)
per_min() { python3 -c "print(round(($1 - $base) * 60 / $secs))"; }
echo "| interval | API requests per minute (watch only) |"
echo "|---|---|"
echo "| 2s (default) | $(per_min "$w2") |"
echo "| 500ms | $(per_min "$w05") |"
echo
echo "(baseline: the world's own $(python3 -c "print(round($base * 60 / $secs))") requests per minute, subtracted)"
"$k" delete namespace "$ns" --wait=false >/dev/null
