#!/usr/bin/env bash
# Benchmark (not a test): what `kubectl raft status --watch` costs the API server, for one
# 3-member etcd, at the default interval (2s) and at 500ms, side by side: as a user who may
# `watch` (the Kubernetes objects are kept by watches) and as one whose role lacks `watch`
# (the plugin then lists them every round). The API server's own counters
# (apiserver_request_total) are read before and after each minute, and a minute of not
# watching; the requests of the world's controllers and agents (that minute) are subtracted.
# Replicas are asked through pods/proxy (the default), so every replica request is an API
# request too.
# Usage: bash tests/bench/watch_cost.sh [SECONDS=60]
set -euo pipefail
secs=${1:-60}
NODES=4 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
ns=bench-watch
deploy "$ns" tests/manifests/etcd-3.yaml 3
# The requests a survey can make: replicas through pods/proxy (CONNECT), lists and watches of
# the six kinds it reads, the namespace check and access reviews. The world's kubelets and
# controllers mostly GET, PUT and PATCH (pod status, leases), which are left out: they vary
# minute to minute more than a watch costs.
total() { "$k" get --raw /metrics | python3 -c "import sys, re
kinds = {'pods', 'services', 'statefulsets', 'endpointslices', 'poddisruptionbudgets', 'nodes'}
n = 0
for l in sys.stdin:
    if not l.startswith('apiserver_request_total{'):
        continue
    labels, value = l.rsplit(' ', 1)
    m = dict(re.findall(r'(\w+)=\"([^\"]*)\"', labels))
    verb, res, sub = m.get('verb'), m.get('resource'), m.get('subresource', '')
    if (verb == 'CONNECT' and sub == 'proxy') or (verb in ('LIST', 'WATCH') and res in kinds and not sub) \\
            or (verb == 'GET' and res == 'namespaces') or res == 'selfsubjectaccessreviews':
        n += float(value)
print(int(n))"; }
# A user bound to the status role without its `watch` rules.
"$k" -n "$ns" create serviceaccount lister >/dev/null
"$k" create --dry-run=client -o json -f docs/rbac.yaml | python3 -c '
import json, sys
text, dec, at = sys.stdin.read(), json.JSONDecoder(), 0
while at < len(text.rstrip()):
    obj, end = dec.raw_decode(text, at)
    at = end + (len(text[end:]) - len(text[end:].lstrip()))
    if obj["metadata"]["name"] == "kubectl-raft-status":
        obj["metadata"] = {"name": "bench-status-without-watch"}
        obj["rules"] = [r for r in obj["rules"] if r["verbs"] != ["watch"]]
        print(json.dumps(obj))
' | "$k" apply -f - >/dev/null
"$k" create clusterrolebinding bench-status-without-watch --clusterrole=bench-status-without-watch \
  --serviceaccount="$ns:lister" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
lister=$("$KWORLD_DIR/bin/kworld" kubeconfig-for "$ns" lister)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"; "$k" delete clusterrolebinding,clusterrole bench-status-without-watch >/dev/null 2>&1 || true' EXIT
minute() { # interval, or nothing; the kubeconfig to watch with (default: the admin's)
  a=$(total)
  if [ -n "$1" ]; then KUBECONFIG=${2:-$KUBECONFIG} "$raft" status etcd -n "$ns" --watch --interval "$1" -o json > /dev/null 2>&1 & pid=$!; fi
  sleep "$secs"
  if [ -n "$1" ]; then kill -INT "$pid"; wait "$pid" || true; fi
  b=$(total)
  echo $(( b - a ))
}
base=$(minute "")
w2=$(minute 2s)
l2=$(minute 2s "$lister")
w05=$(minute 500ms)
l05=$(minute 500ms "$lister")
per_min() { python3 -c "print(round(($1 - $base) * 60 / $secs))"; }
echo "| interval | API requests per minute: objects watched | objects listed every round (no \`watch\` right) |"
echo "|---|---|---|"
echo "| 2s (default) | $(per_min "$w2") | $(per_min "$l2") |"
echo "| 500ms | $(per_min "$w05") | $(per_min "$l05") |"
echo
echo "(baseline: the world's own $(python3 -c "print(round($base * 60 / $secs))") such requests per minute, subtracted)"
"$k" delete namespace "$ns" --wait=false >/dev/null
