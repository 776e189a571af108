#!/usr/bin/env bash
# Benchmark (not a test): a spurctld node drained by `kubectl drain` and by `kubectl raft drain`,
# side by side in one run on one world, on tests/manifests/spurctld-3.yaml (built from the Spur
# source by the world's build). spurctld's REST API accepts no job a load client could submit
# (4cc3da8 refuses REST submission), so the measure is leader-presence sampling
# (tests/load/leader_sampler.py, every 50 ms through each pod's IP): the longest time in which
# no replica, or more than one, said it leads; the longest time in which fewer than a majority
# answered at all; leader changes. spurctld installs no SIGTERM handler: a deleted pod's process
# ends as a crash would, without a handover (openraft 0.9 has none), so the crash row (SIGKILL of
# the leader's process, restarted in place) is the floor the others compare with.
#   leader   the leader's node drained (one member per node): kubectl drain, kubectl raft drain
#            (--assume-voters-are-pods: the server reports no membership), and the crash
#   broken   a follower frozen (SIGSTOP; the TCP probe keeps it Ready), then the other
#            follower's node drained
# Prints Markdown tables for docs/benchmarks.md.
# Usage: bash tests/bench/spurctld-drain.sh [ROUNDS=3]
set -euo pipefail
rounds=${1:-3}
NODES=7 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ -x /usr/local/bin/spurctld ] || { echo "spurctld was not built: $(cat "$KWORLD_DIR/bin/.spurctld.missing" 2>/dev/null)" >&2; exit 1; }
results=$(mktemp)
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; for n in $("$k" get nodes -o name); do "$k" uncordon "${n#node/}" >/dev/null 2>&1 || true; done; rm -rf "$tmp"' EXIT

start_sampler() { # ns
  (while true; do
     "$k" get pods -n "$1" -l app=spurctld -o json | python3 -c "import json,sys
for p in json.load(sys.stdin)['items']:
    if p['status'].get('podIP') and not p['metadata'].get('deletionTimestamp'):
        print(p['metadata']['name'], 'http://%s:6820' % p['status']['podIP'])" > "$tmp/eps.new" && mv "$tmp/eps.new" "$tmp/eps"
     sleep 0.3
   done) &
  refresher=$!
  sleep 1
  python3 tests/load/leader_sampler.py "$tmp/eps" 3 0.05 > "$tmp/sampler.json" &
  sampler=$!
  sleep 1
}
stop_sampler() {
  kill -TERM "$sampler"; wait "$sampler" || true
  kill "$refresher"; wait "$refresher" 2>/dev/null || true
}
record() { # scenario method seconds [raft-report-file]
  python3 - "$@" >> "$results" <<PY
import json, sys
d = json.load(open("$tmp/sampler.json"))
r = {}
if len(sys.argv) > 4 and sys.argv[4]:
    try:
        rep = json.load(open(sys.argv[4]))
        r = {"elections": sum(c["elections"] for c in rep["clusters"]), "refused": not rep["succeeded"],
             "window": max((c.get("longestLeaderlessMs") or 0) for c in rep["clusters"])}
    except Exception:
        pass
print(json.dumps(dict(scenario=sys.argv[1], method=sys.argv[2], seconds=float(sys.argv[3]), **d, **r)))
PY
}

# --- leader: the leader's node ----------------------------------------------------------------
ns=bench-spur
deploy "$ns" tests/manifests/spurctld-3.yaml 3 spurctld
for method in kubectl raft crash; do
  for r in $(seq 1 "$rounds"); do
    wait_healthy spurctld "$ns" 3
    leader=$(leader_of "$ns" spurctld)
    node=$("$k" get pod "$leader" -n "$ns" -o jsonpath='{.spec.nodeName}')
    start_sampler "$ns"
    rm -f "$tmp/raft.json"
    t0=$(now)
    case $method in
      kubectl) "$k" drain "$node" --ignore-daemonsets --delete-emptydir-data >/dev/null 2>&1 || echo "kubectl drain of $node failed" >&2 ;;
      raft) "$raft" drain "$node" --assume-voters-are-pods --assume-followers-current --timeout 120s -o json > "$tmp/raft.json" 2>/dev/null || echo "kubectl raft drain of $node failed" >&2 ;;
      crash) pid=$(pod_pid "$ns" "$leader")
             kill -KILL "$pid" ;;
    esac
    t1=$(now)
    wait_healthy spurctld "$ns" 3
    sleep 1
    stop_sampler
    record leader "$method" "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json"
    [ "$method" = crash ] || "$k" uncordon "$node" >/dev/null
  done
done

# --- broken: a frozen follower whose pod stays Ready, then the other follower's node -------------
for method in kubectl raft; do
  for r in $(seq 1 "$rounds"); do
    wait_healthy spurctld "$ns" 3
    leader=$(leader_of "$ns" spurctld)
    others=($("$k" get pods -n "$ns" -l app=spurctld -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | grep -v "^$leader$"))
    frozen=${others[0]} victim=${others[1]}
    node=$("$k" get pod "$victim" -n "$ns" -o jsonpath='{.spec.nodeName}')
    pid=$(pod_pid "$ns" "$frozen")
    start_sampler "$ns"
    kill -STOP "$pid"
    sleep 3   # several readiness periods: the pod stays Ready
    rm -f "$tmp/raft.json"
    t0=$(now)
    case $method in
      kubectl) "$k" drain "$node" --ignore-daemonsets --delete-emptydir-data >/dev/null 2>&1 || true ;;
      raft) "$raft" drain "$node" --assume-voters-are-pods --assume-followers-current --timeout 10s -o json > "$tmp/raft.json" 2>/dev/null || true ;;
    esac
    t1=$(now)
    sleep 8   # what the cluster does after the drain returns (the replacement rejoins, or not)
    kill -CONT "$pid"
    sleep 1
    stop_sampler
    record broken "$method" "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json"
    "$k" uncordon "$node" >/dev/null
  done
done
"$k" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true

python3 - "$results" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {"kubectl": "`kubectl drain`", "raft": "`kubectl raft drain`", "crash": "SIGKILL of the leader's process (a crash)"}
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "-"
def table(title, rs, methods):
    print(f"\n**{title}**\n")
    print("| method | runs | no single leader, longest, median (range) ms | fewer than a majority answering, longest, median (range) ms | leader changes (total) | command time, median s | kubectl raft's verdict |")
    print("|---|---|---|---|---|---|---|")
    for m in methods:
        xs = [r for r in rs if r["method"] == m]
        if not xs: continue
        verdict = "-" if m != "raft" else ", ".join(
            "refused" if r.get("refused") else f"{r.get('elections', '-')} election(s), window {r.get('window', 0):.0f} ms" for r in xs)
        print(f"| {names[m]} | {len(xs)} | {med([r['longestLeaderlessMs'] for r in xs]):.0f} ({rng([r['longestLeaderlessMs'] for r in xs])}) "
              f"| {med([r['longestWithoutQuorumMs'] for r in xs]):.0f} ({rng([r['longestWithoutQuorumMs'] for r in xs])}) "
              f"| {sum(r['leaderChanges'] for r in xs)} | {med([r['seconds'] for r in xs]):.1f} | {verdict} |")
table(f"spurctld, 3 replicas: the leader's node drained ({sys.argv[2]} runs each)", [r for r in rows if r["scenario"] == "leader"], ["kubectl", "raft", "crash"])
table(f"spurctld, 3 replicas: a follower frozen while its pod stays Ready, then the other follower's node drained ({sys.argv[2]} runs each)", [r for r in rows if r["scenario"] == "broken"], ["kubectl", "raft"])
PY
rm -f "$results"
