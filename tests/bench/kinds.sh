#!/usr/bin/env bash
# Benchmark (not a test): the handover benchmarks that matter, on the agent's nodes and on
# real kubelets (Kubernetes' kubelet over containerd and runc), side by side in one run on one
# world of 4 nodes of each kind: yield on a 3-member etcd (tests/bench/yield.sh), every node
# drained in turn and a frozen follower's neighbour drained (drain.sh: healthy, broken), and
# restart (restart.sh: healthy, hang). Each table is printed under the kind it ran on.
# Usage: bash tests/bench/kinds.sh [YIELD_ROUNDS=5] [ROUNDS=3]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
yield_rounds=${1:-5}
rounds=${2:-3}
export NODES=4 KUBELETS=4 SIZES=3
for bench in yield drain restart; do
  for kind in agent kubelet; do
    echo
    echo "### $bench on $kind nodes"
    case $bench in
      yield) KIND=$kind bash "$here/yield.sh" "$yield_rounds" ;;
      drain) KIND=$kind SCENARIOS="healthy broken" bash "$here/drain.sh" "$rounds" ;;
      restart) KIND=$kind bash "$here/restart.sh" "$rounds" ;;
    esac
  done
done
