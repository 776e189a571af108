#!/usr/bin/env bash
# Benchmark (not a test): four ways to take a NATS JetStream server that leads both the meta
# group and a stream out of leadership, side by side in one run on one world, on the same
# 3-server cluster (tests/manifests/nats-3.yaml) under the same publish load on the R3 stream
# BENCH (tests/load/writeload.rs --nats: each publish waits for the stream leader's
# acknowledgement; failed attempts, lost publishes, the longest stall, and the longest time
# without a stream leader that a majority of servers name and that says so itself):
#   yield   kubectl raft yield nats --streams (the meta leader to a caught-up server, then the
#           server's stream and consumer leaders off it, waiting for each)
#   bare    the stream's stepdown request by hand, to the server (the floor for the stream)
#   delete  kubectl delete pod <server> (NATS steps its leaders down by itself on SIGTERM)
#   kill    SIGKILL of the server's process (a crash: the stream and the meta group elect)
# Before each round the stream's leader is asked onto the meta leader, so every method has
# both to give up. Prints a Markdown table for docs/benchmarks.md.
# Usage: bash tests/bench/nats-yield.sh [ROUNDS=10]
set -euo pipefail
rounds=${1:-10}
NODES=4 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ns=bench-nats
export NATS_USER=sys NATS_PASSWORD=sys-secret NATS_APP_USER=app NATS_APP_PASSWORD=app
"$k" create namespace "$ns" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
"$k" apply -n "$ns" -f tests/manifests/nats-3.yaml >/dev/null

# One JetStream API request as the account APP's user: nreq IP SUBJECT BODY.
nreq() { python3 tests/load/nats_request.py "$1" app app "$2" "$3"; }
ips() { "$k" get pods -n "$ns" -l app=nats -o jsonpath="{range .items[*]}$1{.status.podIP}$2,{end}" | sed 's/,$//'; }
ip_of() { "$k" get pod "$1" -n "$ns" -o jsonpath='{.status.podIP}'; }
# The BENCH stream's leader as server $1 sees it.
stream_leader() {
  curl -s --max-time 1 "http://$(ip_of "$1"):8222/jsz?accounts=true&streams=true" | python3 -c 'import json,sys
d = json.load(sys.stdin)
print(next((s["cluster"].get("leader", "") for a in d.get("account_details", []) for s in a.get("stream_detail", []) if s["name"] == "BENCH"), ""))' 2>/dev/null || true
}

wait_healthy nats "$ns" 3
until nreq "$(ip_of nats-0)" '$JS.API.STREAM.CREATE.BENCH' '{"name":"BENCH","subjects":["BENCH.>"],"num_replicas":3}' 2>/dev/null | grep -q '"config"'; do sleep 1; done
results=$(mktemp)
for method in yield bare delete kill; do
  for r in $(seq 1 "$rounds"); do
    wait_healthy nats "$ns" 3
    leader=$("$raft" status nats -n "$ns" -o json | field '["clusters"][0]["summary"]["leader"]')
    # The stream's leader onto the meta leader, and every server agreeing on it.
    for _ in $(seq 1 60); do
      agreed=1
      for s in nats-0 nats-1 nats-2; do [ "$(stream_leader $s)" = "$leader" ] || agreed=0; done
      [ $agreed = 1 ] && break
      nreq "$(ip_of "$leader")" '$JS.API.STREAM.LEADER.STEPDOWN.BENCH' "{\"placement\":{\"preferred\":\"$leader\"}}" >/dev/null || true
      sleep 1
    done
    [ $agreed = 1 ] || { echo "BENCH's leader could not be placed on $leader" >&2; exit 1; }
    "$load" --nats "$(ips nats:// :4222)" --monitors "$(ips http:// :8222)" --stream BENCH --user app --password app --duration 7s > /tmp/bench-nats-load.json &
    lp=$!
    sleep 1.5
    t0=$(now)
    window=""
    case $method in
      yield) window=$("$raft" yield nats -n "$ns" --streams -o json | field '["leaderlessWindowMs"]') ;;
      bare) nreq "$(ip_of "$leader")" '$JS.API.STREAM.LEADER.STEPDOWN.BENCH' '' >/dev/null ;;
      delete) "$k" delete pod "$leader" -n "$ns" >/dev/null ;;
      kill) kill -KILL "$(pod_pid "$ns" "$leader")" ;;
    esac
    t1=$(now)
    wait "$lp"
    record_round "$method" "$(( (t1 - t0) / 1000000 ))" "${window:-}" /tmp/bench-nats-load.json >> "$results"
  done
done
handover_table "$results" "$rounds" publish "stream leader" '{"yield": "`kubectl raft yield nats --streams`", "bare": "bare stream stepdown request to the server", "delete": "`kubectl delete pod <server>`", "kill": "SIGKILL of the server'"'"'s process"}'
rm -f "$results"
[ "${KEEP:-0}" = 1 ] || "$k" delete namespace "$ns" --wait=false >/dev/null
