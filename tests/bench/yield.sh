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
# Usage: bash tests/bench/yield.sh [ROUNDS=10]   (KIND=kubelet: on real-kubelet nodes, lib.sh)
set -euo pipefail
rounds=${1:-10}
NODES=${NODES:-4} . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ns=bench-yield
# A fresh namespace (the last run's may still be going away): deploy waits for it.
deploy "$ns" tests/manifests/etcd-3.yaml 3


wait_healthy etcd "$ns" 3
results=$(mktemp)
for method in yield bare delete kill; do
  for r in $(seq 1 "$rounds"); do
    wait_healthy etcd "$ns" 3
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
      kill) kill -KILL "$(pod_pid "$ns" "$leader")" ;;
    esac
    t1=$(now)
    wait "$lp"
    record_round "$method" "$(( (t1 - t0) / 1000000 ))" "${window:-}" /tmp/bench-load.json >> "$results"
  done
done
handover_table "$results" "$rounds" write leader '{"yield": "`kubectl raft yield`", "bare": "bare MoveLeader request to the leader'"'"'s pod IP", "delete": "`kubectl delete pod <leader>`", "kill": "SIGKILL of the leader'"'"'s process"}'
rm -f "$results"
[ "${KEEP:-0}" = 1 ] || "$k" delete namespace "$ns" --wait=false >/dev/null
