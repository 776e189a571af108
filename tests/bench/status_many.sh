#!/usr/bin/env bash
# Benchmark (not a test): `kubectl raft status -A` over many 3-member etcd clusters, beside
# the same facts gathered by a sequential loop of `kubectl get` / `kubectl get --raw`, in
# one run on one world. Prints a Markdown table for docs/benchmarks.md.
# Usage: bash tests/bench/status_many.sh [CLUSTERS=20] [ROUNDS=5]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
clusters=${1:-20}
rounds=${2:-5}
export KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
export KUBECONFIG=$(bash tests/world/up.sh --nodes 4)
k="$KWORLD_DIR/bin/kubectl"
cargo build --release -q
raft="$root/target/release/kubectl-raft"

for i in $(seq -w 1 "$clusters"); do
  "$k" create namespace "bench-$i" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
  "$k" apply -n "bench-$i" -f tests/manifests/etcd-3.yaml >/dev/null
done
echo "waiting for $clusters clusters ($((clusters * 3)) members) to be Ready" >&2
for i in $(seq -w 1 "$clusters"); do
  until [ "$("$k" get sts etcd -n "bench-$i" -o jsonpath='{.status.readyReplicas}')" = 3 ]; do sleep 1; done
done

now() { date +%s%N; }
ms() { echo $(( ($2 - $1) / 1000000 )); }
body=$(mktemp); echo '{}' > "$body"

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

raft_times=(); loop_times=()
for r in $(seq 1 "$rounds"); do
  t0=$(now); "$raft" status -A -o json > /tmp/bench-status.json; t1=$(now)
  raft_times+=("$(ms "$t0" "$t1")")
  t0=$(now); kubectl_loop; t1=$(now)
  loop_times+=("$(ms "$t0" "$t1")")
done
found=$(python3 -c 'import json;d=json.load(open("/tmp/bench-status.json"));b=[c for c in d["clusters"] if c["namespace"].startswith("bench-")];print(len(b),"/",sum(len(c["replicas"]) for c in b))')
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
rm -f "$body"
rm_ms=$(median "${raft_times[@]}"); lm_ms=$(median "${loop_times[@]}")
echo "| what | clusters / replicas seen | median of $rounds (ms) | all runs (ms) |"
echo "|---|---|---|---|"
echo "| \`kubectl raft status -A -o json\` | $found | $rm_ms | ${raft_times[*]} |"
echo "| sequential \`kubectl get\` / \`get --raw\` loop | $clusters / $((clusters * 3)) | $lm_ms | ${loop_times[*]} |"
echo
echo "speed-up: $(python3 -c "print(round($lm_ms / max($rm_ms, 1), 1))")x"
if [ "${KEEP:-0}" != 1 ]; then
  for i in $(seq -w 1 "$clusters"); do "$k" delete namespace "bench-$i" --wait=false >/dev/null; done
fi
