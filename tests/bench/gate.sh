#!/bin/bash
# The gate's decision time (docs/benchmarks.md, "How long the gate takes to answer an eviction"):
# a namespace with a 3-member etcd, the gate beside the API server, 40 dry-run reviews of a
# follower's eviction with curl, one after another; prints min, p50, p90 and max.
# Run from the repository root with the test world up and `cargo build` done.
set -e
K="/var/tmp/kraft-world/bin/kubectl --kubeconfig /var/tmp/kraft-world/run/admin.kubeconfig"
export KUBECONFIG=/var/tmp/kraft-world/run/admin.kubeconfig
ns=gatebench-$$
$K create ns $ns >/dev/null
$K apply -n $ns -f tests/manifests/etcd-3.yaml >/dev/null
for i in $(seq 1 90); do r=$($K get sts etcd -n $ns -o jsonpath='{.status.readyReplicas}' 2>/dev/null); [ "$r" = 3 ] && break; sleep 2; done
sleep 5
target/debug/kubectl-raft gate serve -n $ns --listen 127.0.0.1:19443 --tls-name 127.0.0.1 --tls-secret gate-tls --webhook "" > "${TMPDIR:-/tmp}/gatebench-gate.log" 2>&1 &
gp=$!
sleep 4
body='{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","resource":{"group":"","version":"v1","resource":"pods"},"subResource":"eviction","name":"etcd-0","namespace":"'$ns'","dryRun":true,"userInfo":{"username":"bench"}}}'
for i in $(seq 1 40); do curl -sk -o /dev/null -w '%{time_total}\n' -X POST -H 'content-type: application/json' --data "$body" https://127.0.0.1:19443/validate; done > "${TMPDIR:-/tmp}/gatebench.txt"
kill $gp
$K delete ns $ns --wait=false >/dev/null
sort -n "${TMPDIR:-/tmp}/gatebench.txt" | awk '{a[NR]=$1} END {print "n="NR, "min="a[1], "p50="a[int(NR*0.5)], "p90="a[int(NR*0.9)], "p99/max="a[NR]}'
