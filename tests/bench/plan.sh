#!/usr/bin/env bash
# Benchmark (not a test): the drain planner's time for a full plan (placement and steps) over
# 1,000 nodes, 500 clusters and 2,500 members, 10 nodes drained; release build. The number
# goes to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
cargo test --release --bins plan_at_scale -- --ignored --nocapture 2>&1 | grep '^plan_at_scale:'
