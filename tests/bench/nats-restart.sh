#!/usr/bin/env bash
# Benchmark (not a test): `kubectl rollout restart` against `kubectl raft restart` on a 3-server
# NATS JetStream cluster (tests/manifests/nats-3.yaml), side by side in one run, each under the
# same publish load on an R3 stream BENCH (tests/load/writeload.rs --nats: each publish waits
# for the stream leader's acknowledgement; the client reconnects as a NATS client does, the
# stream's leader is watched on the servers' monitor ports, followed to their new addresses).
# Before each round the meta leader and BENCH's leader are both put on nats-2, the server a
# RollingUpdate restarts first. nats-server hands its leaderships over by itself when it is
# stopped with SIGTERM (lame duck mode), so the rollout is NATS's own best case, not a crash.
# Counted: failed publish attempts, publishes lost for good, longest stall, changes of BENCH's
# agreed leader, longest time without one, total time, and kubectl raft's own transfers and
# elections of the meta leader.
# Prints a Markdown table for docs/benchmarks.md.
# Usage: bash tests/bench/nats-restart.sh [ROUNDS=3]
set -euo pipefail
rounds=${1:-3}
NODES=4 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ns=bench-nats-restart
export NATS_USER=sys NATS_PASSWORD=sys-secret NATS_APP_USER=app NATS_APP_PASSWORD=app
results=$(mktemp)
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

deploy "$ns" tests/manifests/nats-3.yaml 3 nats
nreq() { python3 tests/load/nats_request.py "$1" app app "$2" "$3"; }
ip_of() { "$k" get pod "$1" -n "$ns" -o jsonpath='{.status.podIP}'; }
ips() { "$k" get pods -n "$ns" -l app=nats -o jsonpath="{range .items[*]}$1{.status.podIP}$2,{end}" | sed 's/,$//'; }
stream_leader() {
  curl -s --max-time 1 "http://$(ip_of "$1"):8222/jsz?accounts=true&streams=true" | python3 -c 'import json,sys
d = json.load(sys.stdin)
print(next((s["cluster"].get("leader", "") for a in d.get("account_details", []) for s in a.get("stream_detail", []) if s["name"] == "BENCH"), ""))' 2>/dev/null || true
}
until nreq "$(ip_of nats-0)" '$JS.API.STREAM.CREATE.BENCH' '{"name":"BENCH","subjects":["BENCH.>"],"num_replicas":3}' 2>/dev/null | grep -q '"config"'; do sleep 1; done

# The meta leader and BENCH's leader on $1, every server agreeing.
place() {
  [ "$(leader_of "$ns" nats)" = "$1" ] || "$raft" yield nats -n "$ns" --to "$1" >/dev/null 2>&1 || true
  for _ in $(seq 1 60); do
    agreed=1
    for s in nats-0 nats-1 nats-2; do [ "$(stream_leader $s)" = "$1" ] || agreed=0; done
    [ "$agreed" = 1 ] && [ "$(leader_of "$ns" nats)" = "$1" ] && return 0
    nreq "$(ip_of "$1")" '$JS.API.STREAM.LEADER.STEPDOWN.BENCH' "{\"placement\":{\"preferred\":\"$1\"}}" >/dev/null 2>&1 || true
    sleep 1
  done
  echo "could not put the leaders on $1" >&2
  return 1
}
# The monitor ports, rewritten as servers are replaced at new addresses.
follow_monitors() {
  (while true; do ips http:// :8222 > "$tmp/mon.new" && [ -s "$tmp/mon.new" ] && mv "$tmp/mon.new" "$tmp/mon"; sleep 0.3; done) &
  follower=$!
}

for method in rollout raft; do
  for r in $(seq 1 "$rounds"); do
    wait_healthy nats "$ns" 3
    place nats-2
    ips http:// :8222 > "$tmp/mon"
    follow_monitors
    "$load" --nats "$(ips nats:// :4222)" --monitors-file "$tmp/mon" --stream BENCH --user app --password app --duration 600s > "$tmp/load.json" &
    loader=$!
    sleep 1.5
    rm -f "$tmp/raft.json"
    t0=$(now)
    case $method in
      rollout) "$k" rollout restart sts/nats -n "$ns" >/dev/null
               "$k" rollout status sts/nats -n "$ns" --timeout 300s >/dev/null ;;
      raft) "$raft" restart nats -n "$ns" --timeout 120s -o json > "$tmp/raft.json" 2>/dev/null \
              || echo "kubectl raft restart of $ns stopped" >&2 ;;
    esac
    t1=$(now)
    wait_healthy nats "$ns" 3
    sleep 2
    kill -TERM "$loader"; wait "$loader" || true
    kill "$follower"; wait "$follower" 2>/dev/null || true
    python3 - "$method" "$(( (t1 - t0) / 1000000 ))e-3" "$tmp/raft.json" >> "$results" <<PY
import json, sys
d = json.load(open("$tmp/load.json"))
r = {}
try:
    c = json.load(open(sys.argv[3]))["cluster"]
    r = {"transfers": c["transfers"], "elections": c["elections"], "restarts": c["evictions"]}
except Exception:
    pass
print(json.dumps(dict(method=sys.argv[1], seconds=float(sys.argv[2]), failed=d["failed"], lost=d["lost"],
  stall=d["longestStallMs"], leaderless=d["longestLeaderlessMs"], changes=d["leaderChanges"], writes=d["writes"], **r)))
PY
  done
done
"$k" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true

python3 - "$results" "$rounds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = {"rollout": "`kubectl rollout restart`", "raft": "`kubectl raft restart`"}
def med(xs): return statistics.median(xs) if xs else float("nan")
def rng(xs): return f"{min(xs):.0f}–{max(xs):.0f}" if xs else "-"
print(f"\n**3-server NATS JetStream, the meta leader and the R3 stream's leader on nats-2 ({sys.argv[2]} runs each)**\n")
print("| method | runs | publishes | failed publish attempts (total) | lost publishes (total) | longest publish stall, median (range) ms | stream leader changes per rollout, median (range) | no agreed stream leader, longest ms | time, median s | kubectl raft's restarts / meta transfers / elections |")
print("|---|---|---|---|---|---|---|---|---|---|")
for m in ["rollout", "raft"]:
    xs = [r for r in rows if r["method"] == m]
    if not xs: continue
    st = [r["stall"] for r in xs]
    ch = [r["changes"] for r in xs]
    extra = "-" if m == "rollout" else ", ".join(f"{r.get('restarts', '-')}/{r.get('transfers', '-')}/{r.get('elections', '-')}" for r in xs)
    print(f"| {names[m]} | {len(xs)} | {sum(r['writes'] for r in xs)} | {sum(r['failed'] for r in xs)} | {sum(r['lost'] for r in xs)} | {med(st):.0f} ({rng(st)}) | {med(ch):.0f} ({rng(ch)}) | {max(r['leaderless'] for r in xs):.0f} | {med([r['seconds'] for r in xs]):.1f} | {extra} |")
PY
rm -f "$results"
