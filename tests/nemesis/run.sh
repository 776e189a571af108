#!/usr/bin/env bash
# A nemesis campaign (#40): many seeded schedules of actors and faults against a 3-member etcd
# under a write load with the gate installed, each judged by what the members say
# (tests/e2e/nemesis.rs). Results go to a JSON-lines file, one summary per schedule, and a table
# is printed at the end (docs/testing.md keeps the campaigns run).
#
#   bash tests/nemesis/run.sh [--schedules N] [--first-seed S] [--steps K] [--minutes M]
#                             [--results FILE] [--aim]
#
# --aim draws aimed schedules (tests/e2e/nemesis.rs, aimed_schedule): about half their steps
# freeze a member, wait past the observer's SEEN_AFTER and start an actor on another one, the
# edge of invariant 1; the table counts the actors started with a member seen down ("edge").
# --minutes stops starting new schedules after M minutes (the one under way finishes); a
# campaign may be run in parts, each with its own --first-seed, and summed (the table lists
# the seeds). Replay one schedule: NEMESIS_SCHEDULE='drain:0,freeze:1:20,...' cargo test
# --test e2e nemesis::a_seeded_schedule (the failure prints the line).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
. tests/world/env.sh
schedules=10 first=1000 steps=10 minutes=0 results="$KWORLD_DIR/nemesis.jsonl" aim=0
while [ $# -gt 0 ]; do
  case "$1" in
    --schedules) schedules=$2; shift 2 ;;
    --first-seed) first=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --aim) aim=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$(dirname "$results")"
cargo build --bins --examples
cargo test --no-run --test e2e
deadline=0
[ "$minutes" -gt 0 ] && deadline=$(( $(date +%s) + minutes * 60 ))
rc=0
seed=$first
logs="$(dirname "$results")/nemesis-logs"
mkdir -p "$logs"
while [ "$seed" -lt $(( first + schedules )) ]; do
  if [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
    echo "run.sh: --minutes $minutes reached; next seed would be $seed" >&2
    break
  fi
  # Each schedule's whole output in a log of its own; its nemesis lines on the terminal.
  if ! NEMESIS_AIM=$aim NEMESIS_FIRST_SEED=$seed NEMESIS_SCHEDULES=1 NEMESIS_STEPS=$steps NEMESIS_RESULTS=$results \
    cargo test -q --test e2e nemesis::campaign -- --ignored --exact --nocapture > "$logs/$seed.log" 2>&1; then
    rc=1
    echo "run.sh: seed $seed failed; the end of $logs/$seed.log:" >&2
    tail -20 "$logs/$seed.log" | sed 's/^/  /' >&2
  fi
  grep '^nemesis:' "$logs/$seed.log" || true
  seed=$(( seed + 1 ))
done
echo
echo "campaign: seeds $first..$(( seed - 1 )), results in $results, logs in $logs"
python3 - "$results" "$first" "$seed" <<'PY' || rc=1
import json, sys
path, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
last = {}
for l in open(path):
    if l.strip():
        r = json.loads(l)
        if lo <= r["seed"] < hi:
            last[r["seed"]] = r          # a rerun of a seed replaces its row
rows = [last[s] for s in sorted(last)]
missing = [s for s in range(lo, hi) if s not in last]
tot = lambda k: sum(r.get(k) or 0 for r in rows)
commits = sorted({r.get("commit", "?") for r in rows})
print("| commit | seeds | schedules | steps | acted | refused | edge actors (acted/refused) | faults | takings | exposed | races | acknowledged writes | lost | violations | longest leaderless (ms) | hours |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
print(f"| {', '.join(commits)} | {lo}–{hi-1} | {len(rows)} | {tot('steps')} | {tot('acted')} | {tot('refused')} "
      f"| {tot('edgeActors')} ({tot('edgeActed')}/{tot('edgeRefused')}) | {tot('faults')} "
      f"| {tot('takings')} | {tot('exposed')} | {tot('races')} | {tot('acknowledged')} | {tot('lost')} "
      f"| {sum(len(r['violations']) for r in rows)} | {max([r.get('longestLeaderlessMs') or 0 for r in rows] or [0]):.0f} | {tot('seconds')/3600:.2f} |")
for r in rows:
    for v in r["violations"]:
        print(f"- seed {r['seed']} ({r['schedule']}): {v}")
if missing:
    print(f"- seeds with no result (the run died before writing one): {missing}")
    sys.exit(1)
PY
exit "$rc"
