#!/usr/bin/env bash
# Benchmark (not a test): `kubectl rollout restart` against `kubectl raft restart`, side by side
# in one run on one world, each under the same sequential write load (tests/load/writeload.rs,
# following members to their new addresses): failed write attempts, writes lost for good,
# longest stall, changes of the agreed leader, Raft terms advanced (a transfer advances one),
# longest time without an agreed leader, total time.
#   healthy   3- and 5-member etcd, the leader moved to the highest ordinal first (the member
#             a RollingUpdate restarts first); etcd hands leadership over on SIGTERM by itself
#   hang      3-member etcd with a TCP readiness probe (as ZooKeeper's charts have), one
#             follower frozen (SIGSTOP) while its pod stays Ready, then the rollout
# Prints Markdown tables for docs/benchmarks.md.
# The healthy rounds run with the write client's member list in name order and reversed
# (ORDERS="asc desc"): a client fails over to the next member of its list, so the member it is
# on when a method restarts it depends on that order as much as on the method.
# Usage: bash tests/bench/restart.sh [ROUNDS=3]   (SIZES="3 5", the etcd sizes; ORDERS="asc desc";
#        HANG=0 skips the frozen-follower scenario; KIND=kubelet: on real-kubelet nodes, lib.sh)
set -euo pipefail
rounds=${1:-3}
NODES=${NODES:-7} . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
results=$(mktemp)
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

record() { # scenario method members seconds [raft-report-file]
  ORDER=${ORDER:-asc} python3 - "$@" >> "$results" <<PY
import json, os, sys
d = json.load(open("$tmp/load.json"))
r = {}
if len(sys.argv) > 5 and sys.argv[5]:
    try:
        c = json.load(open(sys.argv[5]))["cluster"]
        r = {"transfers": c["transfers"], "elections": c["elections"], "restarts": c["evictions"]}
    except Exception:
        pass
print(json.dumps(dict(scenario=sys.argv[1], method=sys.argv[2], members=int(sys.argv[3]), seconds=float(sys.argv[4]),
  failed=d["failed"], lost=d["lost"], stall=d["longestStallMs"], leaderless=d["longestLeaderlessMs"],
  changes=d["leaderChanges"], terms=d["termsAdvanced"], writes=d["writes"], order=os.environ["ORDER"],
  failures=d.get("failures", []), **r)))
PY
}
restart_with() { # method ns
  case $1 in
    rollout) "$k" rollout restart sts/etcd -n "$2" >/dev/null
             "$k" rollout status sts/etcd -n "$2" --timeout 300s >/dev/null ;;
    raft) "$raft" restart etcd -n "$2" --timeout 120s -o json > "$tmp/raft.json" 2>/dev/null ;;
  esac
}

# --- healthy: the leader on the highest ordinal ----------------------------------------------
for members in ${SIZES:-3 5}; do
  ns=bench-restart-$members
  deploy "$ns" "tests/manifests/etcd-$members.yaml" "$members"
  for order in ${ORDERS:-asc desc}; do
  export ORDER=$order
  for method in rollout raft; do
    for r in $(seq 1 "$rounds"); do
      wait_healthy etcd "$ns" "$members"
      last="etcd-$((members - 1))"
      [ "$(leader_of "$ns")" = "$last" ] || "$raft" yield etcd -n "$ns" --to "$last" >/dev/null 2>&1 || true
      start_load "$ns"
      rm -f "$tmp/raft.json"
      t0=$(now)
      restart_with "$method" "$ns" || echo "$method restart of $ns failed" >&2
      t1=$(now)
      wait_healthy etcd "$ns" "$members"
      sleep 1
      stop_load
      record healthy "$method" "$members" "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json"
    done
  done
  done
  "$k" delete namespace "$ns" --wait=false >/dev/null
done
export ORDER=asc

# --- hang: a frozen follower whose pod stays Ready, then the rollout ----------------------------
sed 's|httpGet: {path: /health, port: client}|tcpSocket: {port: client}|' tests/manifests/etcd-3.yaml > "$tmp/etcd-3-tcp.yaml"
ns=bench-restart-hang
[ "${HANG:-1}" = 0 ] || for method in rollout raft; do
  for r in $(seq 1 "$rounds"); do
    deploy "$ns" "$tmp/etcd-3-tcp.yaml" 3
    [ "$(leader_of "$ns")" = etcd-2 ] || "$raft" yield etcd -n "$ns" --to etcd-2 >/dev/null 2>&1 || true
    frozen=etcd-0
    start_load "$ns"
    echo "$frozen" > "$tmp/exclude"
    sleep 1
    pid=$(pod_pid "$ns" "$frozen")
    kill -STOP "$pid"
    sleep 3   # several readiness periods: the TCP probe keeps it Ready
    rm -f "$tmp/raft.json"
    t0=$(now)
    restart_with "$method" "$ns" || echo "$method restart of $ns stopped" >&2
    t1=$(now)
    kill -CONT "$pid" 2>/dev/null || true
    wait_healthy etcd "$ns" 3
    sleep 1
    stop_load
    record hang "$method" 3 "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json"
  done
done
"$k" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true

python3 - "$results" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {"rollout": "`kubectl rollout restart`", "raft": "`kubectl raft restart`"}
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "-"
def table(title, rs):
    if not rs: return
    print(f"\n**{title}**\n")
    print("| method | runs | failed write attempts (total) | lost writes (total) | longest write stall, median (range) ms | leader changes per rollout, median (range) | terms advanced per rollout, median (range) | no agreed leader, longest ms | time, median s | kubectl raft's transfers / elections |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in ["rollout", "raft"]:
        xs = [r for r in rs if r["method"] == m]
        if not xs: continue
        st = [r["stall"] for r in xs]
        ch = [r["changes"] for r in xs]
        te = [r["terms"] for r in xs]
        extra = "-" if m == "rollout" else ", ".join(f"{r.get('transfers', '-')}/{r.get('elections', '-')}" for r in xs)
        print(f"| {names[m]} | {len(xs)} | {sum(r['failed'] for r in xs)} | {sum(r['lost'] for r in xs)} | {med(st):.0f} ({rng(st)}) | {med(ch):.0f} ({rng(ch)}) | {med(te):.0f} ({rng(te)}) | {max(r['leaderless'] for r in xs):.0f} | {med([r['seconds'] for r in xs]):.1f} | {extra} |")
order_names = {"asc": "in name order", "desc": "reversed"}
for n in (3, 5):
    for o in ("asc", "desc"):
        rs = [r for r in rows if r["scenario"] == "healthy" and r["members"] == n and r.get("order", "asc") == o]
        if rs:
            table(f"Healthy {n}-member etcd, the leader on the highest ordinal, the client's member list {order_names[o]} ({sys.argv[2]} runs each)", rs)
    both = [r for r in rows if r["scenario"] == "healthy" and r["members"] == n]
    if len({r.get("order", "asc") for r in both}) > 1:
        table(f"Healthy {n}-member etcd, both orders together ({len(both) // 2} runs each)", both)
print("\nFailed attempts, as the client saw them (seconds into the round, the member's address, the error):\n")
for r in rows:
    for f in r.get("failures", []):
        print(f"- {r['scenario']} {r['members']} {r.get('order', 'asc')} {r['method']}: {f}")
table(f"3-member etcd with a follower frozen while its pod stays Ready (TCP probe), then the rollout ({sys.argv[2]} runs each)", [r for r in rows if r["scenario"] == "hang"])
PY
rm -f "$results"
