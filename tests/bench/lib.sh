# Shared by the benchmarks in tests/bench (sourced, not run): the world with NODES nodes, the
# release build of the plugin and the write-load client, and small helpers.
# KIND=kubelet runs the workloads on the world's real-kubelet nodes (kreal-1..KUBELETS,
# Kubernetes' kubelet over containerd and runc; KUBELETS defaults to NODES) instead of the
# agent's (KIND=agent, the default; KUBELETS defaults to 0 then, and a world with both kinds,
# KUBELETS=N, is the same world for either KIND, so both run side by side on it).
# After sourcing: $root (cwd), $k (kubectl), $raft, $load, KUBECONFIG exported.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
export KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
KIND=${KIND:-agent}
case $KIND in
  agent) kubelets=${KUBELETS:-0} ;;
  kubelet) kubelets=${KUBELETS:-${NODES:-4}} ;;
  *) echo "KIND is agent or kubelet, not $KIND" >&2; exit 2 ;;
esac
export KUBECONFIG=$(bash tests/world/up.sh --nodes "${NODES:-4}" --kubelets "$kubelets")
k="$KWORLD_DIR/bin/kubectl"
kworld="$KWORLD_DIR/bin/kworld"
# place FILE: the manifest with its pods on $KIND's nodes (kworld place), on stdout.
place() { "$kworld" place --kind "$KIND" "$1"; }
# apply_placed NS FILE: kubectl apply of the placed manifest.
apply_placed() { place "$2" | "$k" apply -n "$1" -f - >/dev/null; }
# kind_nodes: the names of $KIND's nodes.
kind_nodes() { "$k" get nodes -l "kworld.local/node-kind=$KIND" -o jsonpath='{.items[*].metadata.name}'; }
# pod_pid NS POD: the host pid of the pod's first container, on either kind of node.
pod_pid() { "$kworld" pid "$("$k" get pod "$2" -n "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')"; }
cargo build --release -q --bin kubectl-raft --example writeload
raft="$root/target/release/kubectl-raft"
load="$root/target/release/examples/writeload"

# A field of the JSON on stdin: field '["clusters"][0]["summary"]["leader"]'.
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
now() { date +%s%N; }
# Whether StatefulSet $1 in namespace $2 has $3 Ready replicas, a leader and $3 healthy voters.
healthy() {
  [ "$("$k" get sts "$1" -n "$2" -o jsonpath='{.status.readyReplicas}')" = "$3" ] &&
    "$raft" status "$1" -n "$2" -o json 2>/dev/null | python3 -c "import json,sys
s = json.load(sys.stdin)['clusters'][0]['summary']
sys.exit(0 if s['leader'] and s['healthyVoters'] == $3 else 1)"
}
wait_healthy() { for _ in $(seq 1 240); do healthy "$@" && return 0; sleep 0.5; done; echo "$1 in $2 not healthy" >&2; exit 1; }
# One round of a handover benchmark as a JSON line: method, command ms, yield's window (or
# ""), then the write-load client's summary in file $4.
record_round() {
  python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[4]))
print(json.dumps({"method": sys.argv[1], "cmdMs": int(sys.argv[2]), "yieldWindowMs": sys.argv[3] or None,
                  "failed": d["failed"], "lost": d["lost"], "stall": d["longestStallMs"], "leaderless": d["longestLeaderlessMs"],
                  "p99": d["p99Ms"], "writes": d["writes"]}))
PY
}
# The Markdown table of a handover benchmark from record_round's lines in file $1: $2 rounds,
# $3 what is written ("write", "publish"), $4 whose leader ("leader", "stream leader"), $5 the
# methods' names as JSON {"yield": "...", "bare": ..., "delete": ..., "kill": ...}. Then
# yield's own leaderless window, and the stall and command-time comparison with the floor.
handover_table() {
  python3 - "$@" <<'PY'
import json, statistics, sys
path, rounds, what, whose, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
rows = [json.loads(l) for l in open(path)]
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "-"
whats = what + ("es" if what.endswith("sh") else "s")
print(f"| method ({rounds} rounds each) | failed {what} attempts (total) | lost {whats} (total) | longest {what} stall, median (range) ms | no agreed {whose}, median (range) ms | command time, median (range) ms | p99 {what} ms, median |")
print("|---|---|---|---|---|---|---|")
med_by = {}
for m in ["yield", "bare", "delete", "kill"]:
    rs = [r for r in rows if r["method"] == m]
    st, ll, cm = [r["stall"] for r in rs], [r["leaderless"] for r in rs], [r["cmdMs"] for r in rs]
    med_by[m] = (med(st), med(cm))
    print(f"| {names[m]} | {sum(r['failed'] for r in rs)} | {sum(r['lost'] for r in rs)} | {med(st):.0f} ({rng(st)}) | {med(ll):.0f} ({rng(ll)}) | {med(cm):.0f} ({rng(cm)}) | {med([r['p99'] for r in rs]):.1f} |")
ys = [float(r["yieldWindowMs"]) for r in rows if r["method"] == "yield" and r["yieldWindowMs"] not in (None, "None")]
print()
print(f"yield's own report of the leaderless window: median {med(ys):.0f} ms over {len(ys)} rounds that saw one")
(ys_st, ys_cm), (b_st, b_cm) = med_by["yield"], med_by["bare"]
print(f"stall ratio yield / bare: {ys_st / b_st:.2f}; command time yield − bare: {ys_cm - b_cm:.0f} ms")
PY
}

# The etcd benchmarks' helpers (after sourcing, with $tmp set to a scratch directory):
# leader_of NS [STS], deploy NS MANIFEST MEMBERS [STS] (the StatefulSet, etcd by default, in a
# fresh namespace, healthy), start_load NS / stop_load (the write load, following live
# members, never the one named in $tmp/exclude).
leader_of() { "$raft" status "${2:-etcd}" -n "$1" -o json | field '["clusters"][0]["summary"]["leader"]'; }
deploy() { # ns manifest-file members [sts]
  "$k" delete namespace "$1" --wait=true >/dev/null 2>&1 || true
  "$k" create namespace "$1" >/dev/null
  until "$k" get sa default -n "$1" >/dev/null 2>&1; do sleep 0.2; done
  apply_placed "$1" "$2"
  wait_healthy "${4:-etcd}" "$1" "$3"
}
# The write load, following live members (and never the one named in $tmp/exclude). The
# client starts on the first member of its list and, when a write fails, goes on to the next:
# its list is in name order (ORDER=asc, the default) or reversed (ORDER=desc). Which members a
# method restarts while the client is on them depends on that order (docs/benchmarks.md).
start_load() { # ns
  : > "$tmp/exclude"
  (while true; do
     "$k" get pods -n "$1" -l app=etcd -o json | python3 -c "import json,sys
ex = open('$tmp/exclude').read().strip()
pods = sorted(json.load(sys.stdin)['items'], key=lambda p: p['metadata']['name'], reverse='${ORDER:-asc}' == 'desc')
print(','.join('http://%s:2379' % p['status']['podIP'] for p in pods
  if p['status'].get('podIP') and not p['metadata'].get('deletionTimestamp') and p['metadata']['name'] != ex))" > "$tmp/eps.new" && mv "$tmp/eps.new" "$tmp/eps"
     sleep 0.3
   done) &
  refresher=$!
  sleep 1
  "$load" --endpoints-file "$tmp/eps" --duration 600s > "$tmp/load.json" &
  loader=$!
  sleep 1.5
}
stop_load() {
  kill -TERM "$loader"; wait "$loader" || true
  kill "$refresher"; wait "$refresher" 2>/dev/null || true
}
