#!/usr/bin/env bash
# Benchmark (not a test): four ways to take leadership away from an etcd leader, side by side
# in one run on one world, on the same 3-member cluster under the same sequential write load
# (tests/load/writeload.rs: failed write attempts, which it retries on the next member;
# writes lost for good; longest stall; longest time without an agreed leader that itself
# answers as leader, sampled every 20 ms):
#   yield   kubectl raft yield (picks the target, sends MoveLeader, waits until all agree)
#   bare    the transfer request by hand to the leader's pod IP (the floor)
#   delete  kubectl delete pod <leader> (etcd hands over by itself on SIGTERM)
#   kill    SIGKILL of the leader's process (a crash: an election)
# Prints a Markdown table for docs/benchmarks.md.
# Usage: bash tests/bench/yield.sh [ROUNDS=10]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
rounds=${1:-10}
export KWORLD_DIR=${KWORLD_DIR:-/var/tmp/kraft-world}
export KUBECONFIG=$(bash tests/world/up.sh --nodes 4)
k="$KWORLD_DIR/bin/kubectl"
cargo build --release -q --bin kubectl-raft --example writeload
raft="$root/target/release/kubectl-raft"
load="$root/target/release/examples/writeload"
ns=bench-yield
"$k" create namespace "$ns" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
"$k" apply -n "$ns" -f tests/manifests/etcd-3.yaml >/dev/null

healthy() {
  [ "$("$k" get sts etcd -n "$ns" -o jsonpath='{.status.readyReplicas}')" = 3 ] &&
    "$raft" status etcd -n "$ns" -o json 2>/dev/null | python3 -c 'import json,sys
s = json.load(sys.stdin)["clusters"][0]["summary"]
sys.exit(0 if s["leader"] and s["healthyVoters"] == 3 else 1)'
}
wait_healthy() { for _ in $(seq 1 240); do healthy && return 0; sleep 0.5; done; echo "cluster not healthy" >&2; exit 1; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
now() { date +%s%N; }

wait_healthy
results=$(mktemp)
for method in yield bare delete kill; do
  for r in $(seq 1 "$rounds"); do
    wait_healthy
    status=$("$raft" status etcd -n "$ns" -o json)
    leader=$(echo "$status" | field '["clusters"][0]["summary"]["leader"]')
    ip=$(echo "$status" | python3 -c 'import json,sys
c = json.load(sys.stdin)["clusters"][0]
print(next(x["podIp"] for x in c["replicas"] if x["pod"] == c["summary"]["leader"]))')
    target_id=$(echo "$status" | python3 -c 'import json,sys
c = json.load(sys.stdin)["clusters"][0]
print(sorted((x["raft"]["lag"] or 0, x["pod"], x["raft"]["memberId"]) for x in c["replicas"] if x["pod"] != c["summary"]["leader"])[0][2])')
    eps=$("$k" get pods -n "$ns" -l app=etcd -o jsonpath='{range .items[*]}http://{.status.podIP}:2379,{end}' | sed 's/,$//')
    "$load" --endpoints "$eps" --duration 7s > /tmp/bench-load.json &
    lp=$!
    sleep 1.5
    t0=$(now)
    window=""
    case $method in
      yield) window=$("$raft" yield etcd -n "$ns" -o json | field '["leaderlessWindowMs"]') ;;
      bare) curl -s -X POST "http://$ip:2379/v3/maintenance/transfer-leadership" -d "{\"targetID\": \"$target_id\"}" >/dev/null ;;
      delete) "$k" delete pod "$leader" -n "$ns" >/dev/null ;;
      kill) kill -KILL "$("$k" get pod "$leader" -n "$ns" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|kworld://||')" ;;
    esac
    t1=$(now)
    wait "$lp"
    python3 - "$method" "$(( (t1 - t0) / 1000000 ))" "${window:-}" >> "$results" <<'PY'
import json, sys
d = json.load(open("/tmp/bench-load.json"))
print(json.dumps({"method": sys.argv[1], "cmdMs": int(sys.argv[2]), "yieldWindowMs": sys.argv[3] or None,
                  "failed": d["failed"], "lost": d["lost"], "stall": d["longestStallMs"], "leaderless": d["longestLeaderlessMs"],
                  "p99": d["p99Ms"], "writes": d["writes"]}))
PY
  done
done
python3 - "$results" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "-"
print(f"| method ({sys.argv[2]} rounds each) | failed write attempts (total) | lost writes (total) | longest write stall, median (range) ms | no agreed leader, median (range) ms | command time, median (range) ms | p99 write ms, median |")
print("|---|---|---|---|---|---|---|")
names = {"yield": "`kubectl raft yield`", "bare": "bare MoveLeader request to the leader's pod IP", "delete": "`kubectl delete pod <leader>`", "kill": "SIGKILL of the leader's process"}
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
print(f"stall ratio yield / bare: {ys_st / b_st:.2f} (goal ≤ 2); command time yield − bare: {ys_cm - b_cm:.0f} ms (goal ≤ 300)")
PY
rm -f "$results"
[ "${KEEP:-0}" = 1 ] || "$k" delete namespace "$ns" --wait=false >/dev/null
