#!/usr/bin/env bash
# Benchmark (not a test): `kubectl drain` against `kubectl raft drain`, side by side in one run
# on one world, each under the same sequential write load (tests/load/writeload.rs, following
# members to their new addresses: failed write attempts, writes lost for good, longest stall,
# p99, changes of the agreed leader, Raft terms advanced, longest time without an agreed
# leader that answers as leader).
#   healthy   every node drained one after another (uncordoned after each), 3- and 5-member etcd
#   broken    a follower frozen (SIGSTOP) while its pod stays Ready (an etcd variant with a TCP
#             readiness probe, as ZooKeeper has), then another follower's node drained
#   twonodes  the leader's node and a follower's node at once, 5-member etcd
# Prints Markdown tables for docs/benchmarks.md.
# Usage: bash tests/bench/drain.sh [ROUNDS=3]   (SCENARIOS="healthy broken twonodes" by default;
#        SIZES="3 5", the healthy scenario's etcd sizes; KIND=kubelet: on real-kubelet nodes, lib.sh)
set -euo pipefail
rounds=${1:-3}
scenarios=" ${SCENARIOS:-healthy broken twonodes} "
want() { [[ $scenarios == *" $1 "* ]]; }
NODES=${NODES:-7} . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
results=$(mktemp)
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; for n in $("$k" get nodes -o name); do "$k" uncordon "${n#node/}" >/dev/null 2>&1 || true; done; rm -rf "$tmp"' EXIT

record() { # scenario method members seconds [raft-report-file]
  python3 - "$@" >> "$results" <<PY
import json, sys
d = json.load(open("$tmp/load.json"))
r = {}
if len(sys.argv) > 5 and sys.argv[5]:
    try:
        rep = json.load(open(sys.argv[5]))
        r = {"transfers": sum(c["transfers"] for c in rep["clusters"]), "elections": sum(c["elections"] for c in rep["clusters"]),
             "refused": not rep["succeeded"]}
    except Exception:
        pass
print(json.dumps(dict(scenario=sys.argv[1], method=sys.argv[2], members=int(sys.argv[3]), seconds=float(sys.argv[4]),
  failed=d["failed"], lost=d["lost"], stall=d["longestStallMs"], p99=d["p99Ms"], leaderless=d["longestLeaderlessMs"],
  changes=d["leaderChanges"], terms=d["termsAdvanced"], writes=d["writes"], **r)))
PY
}
drain_with() { # method nodes...
  local m=$1; shift
  case $m in
    kubectl) "$k" drain "$@" --ignore-daemonsets --delete-emptydir-data >/dev/null 2>&1 ;;
    raft) "$raft" drain "$@" --ignore-daemonsets --delete-emptydir-data -o json > "$tmp/raft.json" 2>/dev/null ;;
  esac
}

# --- healthy: every node in turn ------------------------------------------------------------
want healthy && for members in ${SIZES:-3 5}; do
  ns=bench-drain-$members
  for method in kubectl raft; do
    deploy "$ns" "tests/manifests/etcd-$members.yaml" "$members"
    start_load "$ns"
    t0=$(now)
    for node in $(kind_nodes); do
      rm -f "$tmp/raft.json"
      drain_with "$method" "$node" || { echo "$method drain of $node failed" >&2; cat "$tmp/raft.json" >&2 || true; }
      "$k" uncordon "$node" >/dev/null
      wait_healthy etcd "$ns" "$members"
    done
    t1=$(now)
    stop_load
    record healthy "$method" "$members" "$(( (t1 - t0) / 1000000 ))e-3"
  done
  "$k" delete namespace "$ns" --wait=false >/dev/null
done

# --- broken: a frozen follower whose pod stays Ready, then another follower's node -------------
sed 's|httpGet: {path: /health, port: client}|tcpSocket: {port: client}|' tests/manifests/etcd-3.yaml > "$tmp/etcd-3-tcp.yaml"
ns=bench-drain-broken
want broken && for method in kubectl raft; do
  for r in $(seq 1 "$rounds"); do
    deploy "$ns" "$tmp/etcd-3-tcp.yaml" 3
    leader=$(leader_of "$ns")
    others=($("$k" get pods -n "$ns" -l app=etcd -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | grep -v "^$leader$"))
    frozen=${others[0]} victim=${others[1]}
    node=$("$k" get pod "$victim" -n "$ns" -o jsonpath='{.spec.nodeName}')
    start_load "$ns"
    echo "$frozen" > "$tmp/exclude"
    sleep 1   # the writer has dropped it (the file is rewritten every 0.3 s, read every 0.2 s)
    pid=$(pod_pid "$ns" "$frozen")
    kill -STOP "$pid"
    sleep 1
    t0=$(now)
    rm -f "$tmp/raft.json"
    case $method in
      kubectl) "$k" drain "$node" --ignore-daemonsets --delete-emptydir-data >/dev/null 2>&1 || true ;;
      raft) "$raft" drain "$node" --timeout 10s -o json > "$tmp/raft.json" 2>/dev/null || true ;;
    esac
    t1=$(now)
    sleep 8   # what the writes see after the drain returns (the replacement rejoins, or not)
    kill -CONT "$pid"
    stop_load
    record broken "$method" 3 "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json"
    "$k" uncordon "$node" >/dev/null
  done
done
"$k" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true

# --- two nodes at once on the 5-member etcd -----------------------------------------------------
ns=bench-drain-two
want twonodes && for method in kubectl raft; do
  for r in $(seq 1 "$rounds"); do
    deploy "$ns" tests/manifests/etcd-5.yaml 5
    leader=$(leader_of "$ns")
    follower=$("$k" get pods -n "$ns" -l app=etcd -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | grep -v "^$leader$" | head -1)
    a=$("$k" get pod "$leader" -n "$ns" -o jsonpath='{.spec.nodeName}')
    b=$("$k" get pod "$follower" -n "$ns" -o jsonpath='{.spec.nodeName}')
    start_load "$ns"
    t0=$(now)
    rm -f "$tmp/raft.json"
    drain_with "$method" "$a" "$b" || echo "$method drain of $a $b failed" >&2
    t1=$(now)
    wait_healthy etcd "$ns" 5
    sleep 1
    stop_load
    record twonodes "$method" 5 "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json"
    "$k" uncordon "$a" "$b" >/dev/null
  done
done
"$k" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true

python3 - "$results" "$rounds" "$(kind_nodes | wc -w) $KIND" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {"kubectl": "`kubectl drain`", "raft": "`kubectl raft drain`"}
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "-"
def table(title, rs, extra=""):
    print(f"\n**{title}**\n")
    print("| method | runs | failed write attempts (total) | lost writes (total) | longest write stall, median (range) ms | p99 write ms, median | leader changes (total) | terms advanced (total) | no agreed leader, longest ms | time, median s" + extra + " |")
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if extra else ""))
    for m in ["kubectl", "raft"]:
        xs = [r for r in rs if r["method"] == m]
        if not xs: continue
        st = [r["stall"] for r in xs]
        tail = ""
        if extra:
            tail = " | " + ", ".join(
                ("refused" if r.get("refused") else f"{r.get('transfers', '-')} transfer(s), {r.get('elections', '-')} election(s)") if m == "raft" else "-"
                for r in xs)
        print(f"| {names[m]} | {len(xs)} | {sum(r['failed'] for r in xs)} | {sum(r['lost'] for r in xs)} | {med(st):.0f} ({rng(st)}) | {med([r['p99'] for r in xs]):.1f} | {sum(r['changes'] for r in xs)} | {sum(r['terms'] for r in xs)} | {max(r['leaderless'] for r in xs):.0f} | {med([r['seconds'] for r in xs]):.1f}{tail} |")
for n in (3, 5):
    table(f"Healthy {n}-member etcd: every node drained in turn ({sys.argv[3]} nodes, uncordoned after each)", [r for r in rows if r["scenario"] == "healthy" and r["members"] == n])
table(f"A follower frozen while its pod stays Ready, then another follower's node drained ({sys.argv[2]} runs each)", [r for r in rows if r["scenario"] == "broken"], " | kubectl raft's verdict")
table(f"Two nodes at once (the leader's and a follower's), 5-member etcd ({sys.argv[2]} runs each)", [r for r in rows if r["scenario"] == "twonodes"], " | kubectl raft's actions")
PY
rm -f "$results"
