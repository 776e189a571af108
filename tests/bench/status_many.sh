#!/usr/bin/env bash
# Benchmark (not a test): `kubectl raft status -A` over many 3-member etcd clusters, in one
# run on one world, beside its floor (`kubectl get pods -A -o json`: one LIST, no probes) and
# the same facts gathered by a sequential loop of `kubectl get` / `get --raw` calls. Also
# counts the requests the API server refused for load (HTTP 429, from its own metrics).
# Prints a Markdown table for docs/benchmarks.md.
# Usage: bash tests/bench/status_many.sh [CLUSTERS=50] [ROUNDS=7] [LOOP=1]
#   LOOP=0 skips the (slow) sequential kubectl loop.
set -euo pipefail
clusters=${1:-50}
rounds=${2:-7}
loop=${3:-1}
NODES=4 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for i in $(seq -w 1 "$clusters"); do
  "$k" create namespace "bench-$i" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
  "$k" apply -n "bench-$i" -f tests/manifests/etcd-3.yaml >/dev/null
done
echo "waiting for $clusters clusters ($((clusters * 3)) members) to be Ready" >&2
for i in $(seq -w 1 "$clusters"); do
  until [ "$("$k" get sts etcd -n "bench-$i" -o jsonpath='{.status.readyReplicas}')" = 3 ]; do sleep 1; done
done

ms() { echo $(( ($2 - $1) / 1000000 )); }
body=$(mktemp); echo '{}' > "$body"
refused() { "$k" get --raw /metrics | awk '/^apiserver_request_total\{/ && /code="429"/ {n += $NF} END {print n + 0}'; }

# The same facts, one kubectl call at a time: objects per namespace, then each member's
# health and Raft status through pods/proxy.
kubectl_loop() {
  "$k" get nodes -o json >/dev/null
  for i in $(seq -w 1 "$clusters"); do
    ns="bench-$i"
    for r in statefulsets pods services endpointslices poddisruptionbudgets; do
      "$k" get "$r" -n "$ns" -o json >/dev/null
    done
    for p in etcd-0 etcd-1 etcd-2; do
      "$k" get --raw "/api/v1/namespaces/$ns/pods/$p:2379/proxy/health" >/dev/null
      "$k" create --raw "/api/v1/namespaces/$ns/pods/$p:2379/proxy/v3/maintenance/status" -f "$body" >/dev/null
    done
  done
}

# All replicas read ok: (clusters, replicas, replicas whose health is ok)
seen() {
  python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
b = [c for c in d["clusters"] if c["namespace"].startswith("bench-")]
r = [x for c in b for x in c["replicas"]]
print(len(b), "/", len(r), "/", sum(x["raft"]["health"]["state"] == "ok" for x in r))' "$1"
}

refused_before=$(refused)
raft_times=(); wide_times=(); floor_times=(); loop_times=()
for r in $(seq 1 "$rounds"); do
  t0=$(now); "$k" get pods -A -o json > /dev/null; t1=$(now)
  floor_times+=("$(ms "$t0" "$t1")")
  t0=$(now); "$raft" status -A -o json > /tmp/bench-status.json; t1=$(now)
  raft_times+=("$(ms "$t0" "$t1")")
  t0=$(now); "$raft" status -A -o json --max-inflight 1000 > /tmp/bench-status-wide.json; t1=$(now)
  wide_times+=("$(ms "$t0" "$t1")")
  if [ "$loop" = 1 ] && [ "$r" -le 3 ]; then
    t0=$(now); kubectl_loop; t1=$(now)
    loop_times+=("$(ms "$t0" "$t1")")
  fi
done
refused_after=$(refused)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
rm -f "$body"
fm=$(median "${floor_times[@]}"); rm_ms=$(median "${raft_times[@]}"); wm=$(median "${wide_times[@]}")
echo "| what | clusters / replicas / replicas read ok | median (ms) | all runs (ms) |"
echo "|---|---|---|---|"
echo "| floor: \`kubectl get pods -A -o json\` | - | $fm | ${floor_times[*]} |"
echo "| \`kubectl raft status -A -o json\` (default \`--max-inflight 32\`) | $(seen /tmp/bench-status.json) | $rm_ms | ${raft_times[*]} |"
echo "| \`kubectl raft status -A -o json --max-inflight 1000\` (unbounded) | $(seen /tmp/bench-status-wide.json) | $wm | ${wide_times[*]} |"
if [ "$loop" = 1 ]; then
  lm=$(median "${loop_times[@]}")
  echo "| sequential \`kubectl get\` / \`get --raw\` loop | $clusters / $((clusters * 3)) | $lm | ${loop_times[*]} |"
fi
echo
echo "status / floor: $(python3 -c "print(round($rm_ms / max($fm, 1), 2))")x; unbounded / floor: $(python3 -c "print(round($wm / max($fm, 1), 2))")x"
echo "requests the API server refused with 429 during the run: $((refused_after - refused_before))"
if [ "${KEEP:-0}" != 1 ]; then
  for i in $(seq -w 1 "$clusters"); do "$k" delete namespace "bench-$i" --wait=false >/dev/null; done
fi
