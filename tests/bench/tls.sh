#!/usr/bin/env bash
# Benchmark (not a test): `kubectl raft status` of a 3-member etcd through the port-forward
# route, plain HTTP against TLS with client certificates (tests/manifests/etcd-3.yaml and
# etcd-3-tls.yaml, side by side in one world, rounds interleaved): the time of each status,
# and the requests each replica received (from `-v=6`, one line per request). Certificates
# are made here with openssl. Prints a Markdown table for docs/benchmarks.md.
# Usage: bash tests/bench/tls.sh [ROUNDS=9]
set -euo pipefail
rounds=${1:-9}
NODES=${NODES:-4} . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

plain=bench-plain tls=bench-tls
for ns in $plain $tls; do
  "$k" create namespace "$ns" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
done
pki=$(mktemp -d)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=bench CA" -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
issue() { # NAME CN SANS
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
    -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\n' "$3" > "$pki/$1.ext"
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null
}
issue server etcd "DNS:*.etcd.$tls.svc.cluster.local,DNS:*.etcd.$tls.svc,DNS:*.etcd,DNS:localhost,IP:127.0.0.1"
issue client kubectl-raft "DNS:kubectl-raft"
"$k" -n $tls create secret generic etcd-server-tls --from-file=ca.crt="$pki/ca.crt" \
  --from-file=tls.crt="$pki/server.crt" --from-file=tls.key="$pki/server.key" \
  --dry-run=client -o yaml | "$k" apply -f - >/dev/null
"$k" -n $tls create secret generic etcd-client-tls --from-file=ca.crt="$pki/ca.crt" \
  --from-file=tls.crt="$pki/client.crt" --from-file=tls.key="$pki/client.key" \
  --dry-run=client -o yaml | "$k" apply -f - >/dev/null
"$k" -n $tls label secret etcd-client-tls kubectl-raft.io/credentials=true --overwrite >/dev/null
apply_placed $plain tests/manifests/etcd-3.yaml
apply_placed $tls tests/manifests/etcd-3-tls.yaml
for ns in $plain $tls; do
  until [ "$("$k" get sts etcd -n "$ns" -o jsonpath='{.status.readyReplicas}')" = 3 ]; do sleep 1; done
done

ms() { echo $(( ($2 - $1) / 1000000 )); }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# healthy voters in a status report on stdin
voters() { field '["clusters"][0]["summary"]["healthyVoters"]'; }
declare -A times ok
for r in $(seq 1 "$rounds"); do
  for ns in $plain $tls; do
    t0=$(now)
    "$raft" status etcd -n "$ns" --via port-forward -o json -v=6 \
      > "/tmp/bench-tls-$ns.json" 2> "/tmp/bench-tls-$ns.log"
    t1=$(now)
    times[$ns]+="$(ms "$t0" "$t1") "
    ok[$ns]+="$(voters < "/tmp/bench-tls-$ns.json") "
  done
done
# Requests per replica in the last round: -v=6 logs one line per request, "METHOD ns/pod:port/path STATUS".
per_replica() {
  grep -oE "(GET|POST) $1/etcd-[0-9]+" "/tmp/bench-tls-$1.log" | sed "s|$1/||" | sort | uniq -c |
    awk '{n[$3] = n[$3] (n[$3] ? ", " : "") $2 " " $1} END {for (p in n) print p ": " n[p]}' | sort | paste -sd';' -
}
echo "| route, etcd | healthy voters each round | requests per replica (one status) | median (ms) | all runs (ms) |"
echo "|---|---|---|---|---|"
for ns in $plain $tls; do
  # shellcheck disable=SC2086
  echo "| port-forward, $([ $ns = $plain ] && echo 'plain HTTP' || echo 'TLS, client certificate') | ${ok[$ns]} | $(per_replica $ns) | $(median ${times[$ns]}) | ${times[$ns]}|"
done
rm -rf "$pki"
"$k" delete namespace $plain $tls --wait=false >/dev/null
