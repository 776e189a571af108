#!/usr/bin/env bash
# Benchmark (not a test): a node-pool upgrade, simulated. etcd-3, etcd-5, ZooKeeper-3 and NATS-3
# (tests/manifests/{etcd-3,etcd-5,zookeeper-3,nats-3}.yaml) run together in a NODES-node world
# (6 by default: etcd-5's required anti-affinity needs 5, and on exactly 5 the gate holds the
# 5-member cluster's evictions for good, since no other node can take a replacement), each in a
# namespace of its own; then every node is drained in turn with the machine's plain `kubectl
# drain --ignore-daemonsets --delete-emptydir-data` and uncordoned, and the next node waits
# until all four clusters are healthy again (as an upgrade tool waits for the node to come
# back). Two passes over the same clusters, side by side in one run:
#   nogate   the PodDisruptionBudgets only
#   gate     `kubectl-raft gate serve --via direct -v=6` on the host (GATE_VIA=proxy for the API
#            server's pods/proxy instead), behind a URL webhook
#            (https://127.0.0.1:PORT/validate, as tests/e2e/gate.rs runs it) scoped by a
#            namespaceSelector to a label on the four namespaces (one gate for all of them)
# Measured in each pass: the write load (tests/load/writeload.rs: etcd's JSON gateway on both
# etcd clusters, a JetStream publish on the R3 stream BENCH on NATS with a PING every second:
# failed attempts, lost writes); ZooKeeper takes no write from it, so its leader is sampled instead; every cluster's
# leader through each pod's own port every 200 ms (tests/load/leader_sampler.py: etcd's status,
# ZooKeeper's /commands/zabstate with its ZAB epoch, NATS's /raftz for the meta group and the
# stream's group): leader changes, the time without a leader before each, terms (epochs)
# advanced; pod readiness from the API server every 0.5 s. With the gate: its decisions, its
# transfers, its /metrics histogram and, from its -v=6 log, its requests per decision.
# Prints a Markdown table for docs/benchmarks.md; the run's logs stay in the directory it names.
# Usage: bash tests/bench/upgrade.sh   (NODES=6, PASSES="nogate gate"; DRAIN="kworld-1 ..." to
#        drain only those nodes, for a short try; `upgrade.sh LOGDIR` prints the table of a run's logs
#        again)
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")
table() {
  python3 - "$1" <<'PY'
import glob, json, os, re, statistics, sys
from datetime import datetime
d = sys.argv[1]
def load(path):
    try: return json.load(open(path))
    except Exception: return None
def jsonl(name):
    p = os.path.join(d, name)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
passes = {p["pass"]: p for p in jsonl("passes.jsonl")}
nodes = jsonl("nodes.jsonl")
names = {"etcd3": "etcd, 3 members", "etcd5": "etcd, 5 members", "zk": "ZooKeeper, 3 servers", "nats": "NATS, 3 servers"}
# An election cannot end sooner than this after a leader vanishes (its followers' timeout), so a
# change of leader within it was a handover; and a leaderless stretch longer than it is counted
# a quorum loss. ZooKeeper has no such timeout (a vanished leader's sockets close at once):
# 2 s, as for etcd.
timeout_ms = {"etcd3": 2000, "etcd5": 2000, "zk": 2000, "nats": 4000}
majority = {"etcd3": 2, "etcd5": 3, "zk": 2, "nats": 2}
ready = [l.split() for l in open(os.path.join(d, "ready.log"))] if os.path.exists(os.path.join(d, "ready.log")) else []
pnames = {"nogate": "PDBs only", "gate": "with the gate"}

def group_stats(s, g):
    x = s["groups"][g]
    long_ms = [m for m in x["leaderlessMs"] if m > timeout_ms[s["_sys"]]]
    noq_ms = [m for m in x["withoutQuorumMs"] if m > timeout_ms[s["_sys"]]]
    hand = [c for c in x["changes"] if c["gapMs"] < timeout_ms[s["_sys"]]]
    terms = x["termsAdvanced"] or 0
    el = terms if s["_sys"] == "zk" else max(0, terms - len(hand))
    return dict(losses=max(len(long_ms), len(noq_ms)), changes=x["leaderChanges"], terms=terms, elections=el,
                handovers=0 if s["_sys"] == "zk" else len(hand), leaderless=max(x["leaderlessMs"] or [0]))

# --- the gate's log: decisions, their time and their requests ------------------------------------
def ts(line):
    return datetime.strptime(line[:26], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
gate = {"decisions": [], "transfers": {}, "events": 0, "other": 0}
glog = os.path.join(d, "gate.log")
if os.path.exists(glog):
    ours = re.compile(r"(bench-upgrade-(?:etcd3|etcd5|zk|nats))")
    starts, open_dec, transfer = {}, [], {}
    decide = re.compile(r" INFO (.*) pod=(\S+) user=\S+ (?:source_ip=\S+ )?dry_run=(\S+) verdict=(\S+)$")
    for line in open(glog):
        line = line.rstrip("\n")
        if not line[:4].isdigit(): continue
        t = ts(line)
        # A replica request, whatever the route (--via direct or proxy): the plugin's own line
        # of it ("GET ns/pod:port/path 200 in 3 ms", "NATS request ... in 9 ms").
        rq = re.search(r" TRACE (?:(?:GET|POST|PUT|DELETE) ([^/\s]+)/|(NATS request))", line)
        if rq:
            ns = rq.group(1) or next((n for n in transfer if n.endswith("nats")), None)
            if ns in transfer:
                transfer[ns]["replica"] += 1; continue
            cands = [x for x in open_dec if ns is None or x["ns"] == ns]
            if cands:
                cands[-1]["replica"] += 1
            else:
                gate["other"] += 1
            continue
        if "HTTP: requesting" in line:
            url = re.search(r"http\.url=(\S+)", line).group(1)
            m = ours.search(url)
            if "/proxy/" in url:
                continue  # a replica request through pods/proxy: counted by its own line above
            pod = re.search(r"/api/v1/namespaces/([^/]+)/pods/([^/:?]+)$", url)
            if pod and re.search(r"http\.method=GET", line):
                key = pod.group(1) + "/" + pod.group(2)
                dec = {"key": key, "ns": pod.group(1), "start": t, "api": 0, "replica": 0}
                starts.setdefault(key, []).append(dec); open_dec.append(dec)
            if "/events" in url:
                gate["events"] += 1; continue
            ns = m.group(1) if m else None
            if ns in transfer:
                transfer[ns]["api"] += 1; continue
            cands = [x for x in open_dec if ns is None or x["ns"] == ns]
            if cands:
                cands[-1]["api"] += 1
            else:
                gate["other"] += 1
            continue
        m = decide.search(line)
        if m:
            key, verdict = m.group(2), m.group(4)
            dec = starts.get(key, []).pop() if starts.get(key) else {"key": key, "ns": key.split("/")[0], "start": None, "api": 0, "replica": 0}
            for x in starts.get(key, []):  # a retry's look that ended in this one
                dec["api"] += x["api"]; dec["replica"] += x["replica"]
                if x in open_dec: open_dec.remove(x)
            starts[key] = []
            if dec in open_dec: open_dec.remove(dec)
            dec.update(end=t, verdict=verdict, ms=(t - dec["start"]) * 1000 if dec["start"] else None)
            gate["decisions"].append(dec)
            if verdict == "TransferStarted":
                transfer[dec["ns"]] = {"api": 0, "replica": 0, "start": t}
            continue
        m = re.search(r"(leadership transferred|transfer failed).*cluster=(\S+?)/", line) or re.search(r"cluster=(\S+?)/\S+ .*(leadership transferred|transfer failed)", line)
        if m:
            ns = m.group(2) if m.group(1).startswith(("leadership", "transfer")) else m.group(1)
            tr = transfer.pop(ns, None)
            if tr:
                tr.update(ms=(t - tr["start"]) * 1000, ok="transferred" in line)
                gate["transfers"].setdefault(ns, []).append(tr)

def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))] if xs else float("nan")
def hist_q(p):
    path = os.path.join(d, "gate-metrics.txt")
    if not os.path.exists(path): return None
    b = [(float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2)))
         for m in re.finditer(r'kubectl_raft_gate_decision_seconds_bucket\{le="([^"]+)"\} (\S+)', open(path).read())]
    if not b: return None
    n, prev_le, prev_c = b[-1][1], 0.0, 0.0
    for le, c in b:
        if c >= p * n:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * ((p * n - prev_c) / (c - prev_c) if c > prev_c else 0)
        prev_le, prev_c = le, c

# --- the table -------------------------------------------------------------------------------------
print("| system | pass | quorum losses | leader changes | elections | handovers: the gate's transfers / the server's own | nodes drained while they hosted the leader | longest without an agreed leader, ms | failed write attempts | lost writes |")
print("|---|---|---|---|---|---|---|---|---|---|")
summary = {}
for sysname in ["etcd3", "etcd5", "zk", "nats"]:
    for p in [p for p in ["nogate", "gate"] if p in passes]:
        s = load(os.path.join(d, f"{p}-{sysname}-sampler.json"))
        if not s: continue
        s["_sys"] = sysname
        w = load(os.path.join(d, f"{p}-{sysname}-load.json"))
        lo, hi = passes[p]["from"] / 1e9, passes[p]["to"] / 1e9
        # A majority not Ready at once (the API server's view, every 0.5 s): one loss per run of such samples.
        runs, inrun = 0, False
        for r in ready:
            if r[1] != sysname or not lo <= float(r[0]) <= hi: continue
            low = int(r[2]) < majority[sysname]
            runs += low and not inrun
            inrun = low
        hosted = sum(1 for n in nodes if n["pass"] == p and any(x.split()[0] == sysname for x in n["leaders"].split(",") if x))
        gate_tr = len([dd for dd in gate["decisions"] if dd["ns"] == f"bench-upgrade-{sysname}" and dd["verdict"] == "TransferStarted"]) if p == "gate" else 0
        groups = ["meta", "stream"] if sysname == "nats" else ["leader"]
        gs = [group_stats(s, g) for g in groups]
        def cell(f, sep=" / "):
            return sep.join(str(f(g)) for g in gs)
        # One incident shows as a leaderless stretch, as a majority not answering and as a majority
        # not Ready: counted once (the most of the three).
        losses = max(sum(g["losses"] for g in gs), runs)
        # The longest time without an agreed leader: the writer's watcher (20 ms) where there is one (etcd,
        # the NATS stream), the sampler (200 ms) for ZooKeeper and the NATS meta group.
        if sysname == "nats":
            ll = f"{gs[0]['leaderless']} / {w['longestLeaderlessMs']:.0f}" if w else cell(lambda g: g["leaderless"])
        elif w:
            ll = f"{w['longestLeaderlessMs']:.0f}"
        else:
            ll = str(gs[0]["leaderless"])
        own = [max(0, g["handovers"] - (gate_tr if i == 0 else 0)) for i, g in enumerate(gs)]
        hand = ("-" if sysname == "zk" else f"{gate_tr} / " + " + ".join(map(str, own)))
        row = dict(losses=losses, changes=cell(lambda g: g["changes"]), elections=cell(lambda g: g["elections"]),
                   hand=hand, hosted=hosted, ll=ll, failed=w["failed"] if w else "-", lost=w["lost"] if w else "-")
        summary[(sysname, p)] = row
        print(f"| {names[sysname]}{' (meta / stream)' if sysname == 'nats' else ''} | {pnames[p]} | {row['losses']} | {row['changes']} | {row['elections']} | {row['hand']} | {hosted} | {ll} | {row['failed']} | {row['lost']} |")
print()
for p in [p for p in ["nogate", "gate"] if p in passes]:
    ns = [n for n in nodes if n["pass"] == p]
    refused = sum(1 for x in gate["decisions"] if not x["verdict"].startswith("Allowed")) if p == "gate" else 0
    failed = [n["node"] for n in ns if n["rc"] != 0]
    print(f"{pnames[p]}: {len(ns)} nodes in {passes[p]['ms'] / 1000:.0f} s (drains {statistics.median([n['drainMs'] for n in ns]) / 1000:.1f} s median, "
          f"{max(n['drainMs'] for n in ns) / 1000:.1f} s longest" + (f"; {refused} evictions refused by the gate and retried" if p == "gate" else "")
          + (f"; drain failed on {', '.join(failed)}" if failed else "") + ")")
decs = [x for x in gate["decisions"] if x["ms"] is not None]
if gate["decisions"]:
    by = {}
    for x in gate["decisions"]: by[x["verdict"]] = by.get(x["verdict"], 0) + 1
    ms = [x["ms"] for x in decs]
    h50, h99 = hist_q(0.5), hist_q(0.99)
    trs = [t for ts_ in gate["transfers"].values() for t in ts_]
    print()
    print("| gate decisions | verdicts | decision time p50 / p99 / max, ms (its log) | p50 / p99 from its `decision_seconds` histogram | API requests per decision, median (max) | replica requests per decision, median (max) | transfers: done, each its requests (API + replica), time |")
    print("|---|---|---|---|---|---|---|")
    hist = f"{h50 * 1000:.0f} / {h99 * 1000:.0f}" if h50 is not None else "-"
    print(f"| {len(gate['decisions'])} | {', '.join(f'{k} {v}' for k, v in sorted(by.items(), key=lambda kv: -kv[1]))} | {q(ms, .5):.0f} / {q(ms, .99):.0f} / {max(ms):.0f} | {hist} | "
          f"{q([x['api'] for x in decs], .5)} ({max(x['api'] for x in decs)}) | {q([x['replica'] for x in decs], .5)} ({max(x['replica'] for x in decs)}) | "
          + "; ".join(f"{'ok' if t['ok'] else 'FAILED'} {t['api']} + {t['replica']}, {t['ms']:.0f} ms" for t in trs) + " |")
    print(f"\n(events written: {gate['events']}; requests of no decision: {gate['other']}; per verdict, median API + replica requests: "
          + ", ".join(f"{v} {q([x['api'] for x in decs if x['verdict'] == v], .5)} + {q([x['replica'] for x in decs if x['verdict'] == v], .5)}" for v in by) + ")")
    slow = [x for x in decs if x["ms"] > 1000]
    if slow:
        print("decisions over 1 s: " + ", ".join(f"{x['key']} {x['verdict']} {x['ms']:.0f} ms" for x in slow))
PY
}
[ $# -gt 0 ] && { table "$1"; exit; }
NODES=${NODES:-6} . "$here/lib.sh"
passes=${PASSES:-nogate gate}
export NATS_USER=sys NATS_PASSWORD=sys-secret   # the system account, for kubectl raft status nats
tmp=$(mktemp -d)
logs=$(mktemp -d /tmp/bench-upgrade.XXXXXX)
systems="etcd3 etcd5 zk nats"
declare -A ns=([etcd3]=bench-upgrade-etcd3 [etcd5]=bench-upgrade-etcd5 [zk]=bench-upgrade-zk [nats]=bench-upgrade-nats)
declare -A sts=([etcd3]=etcd [etcd5]=etcd [zk]=zk [nats]=nats)
declare -A members=([etcd3]=3 [etcd5]=5 [zk]=3 [nats]=3)
declare -A manifest=([etcd3]=etcd-3 [etcd5]=etcd-5 [zk]=zookeeper-3 [nats]=nats-3)
declare -A sampled=([etcd3]=etcd [etcd5]=etcd [zk]=zookeeper [nats]=nats)
label=kubectl-raft.io/gate-bench
webhook=kubectl-raft-gate-bench-upgrade
gate_ns=bench-upgrade-gate
drainer=/usr/bin/kubectl   # the machine's own kubectl, as an operator runs it
[ -x "$drainer" ] || drainer=$k
cleanup() {
  "$k" delete validatingwebhookconfiguration "$webhook" --ignore-not-found >/dev/null 2>&1 || true
  kill $(jobs -p) 2>/dev/null || true
  [ -s "$tmp/cordoned" ] && "$k" uncordon $(cat "$tmp/cordoned") >/dev/null 2>&1 || true
  for s in $systems; do
    "$k" delete lease -n "$gate_ns" "kubectl-raft-gate.${ns[$s]}.${sts[$s]}" --ignore-not-found >/dev/null 2>&1 || true
  done
  [ "${KEEP:-0}" = 1 ] || "$k" delete namespace "${ns[@]}" "$gate_ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- the four clusters ------------------------------------------------------------------------
declare -A pids samplers loads
for s in $systems; do deploy "${ns[$s]}" "tests/manifests/${manifest[$s]}.yaml" "${members[$s]}" "${sts[$s]}" & pids[$s]=$!; done
for s in $systems; do wait "${pids[$s]}"; done
"$k" label namespace "${ns[@]}" "$label=upgrade" >/dev/null
# The NATS system account's user, in a Secret the gate may use (named by the StatefulSet and
# labelled by its writer), as tests/e2e/gate.rs gives it; the stream BENCH for the publish load.
"$k" create secret generic nats-ops -n "${ns[nats]}" --from-literal=NATS_USER=sys --from-literal=NATS_PASSWORD=sys-secret >/dev/null
"$k" label secret nats-ops -n "${ns[nats]}" kubectl-raft.io/credentials=true >/dev/null
"$k" annotate sts nats -n "${ns[nats]}" kubectl-raft.io/credentials-secret=nats-ops >/dev/null
nats0=$("$k" get pod nats-0 -n "${ns[nats]}" -o jsonpath='{.status.podIP}')
until python3 tests/load/nats_request.py "$nats0" app app '$JS.API.STREAM.CREATE.BENCH' '{"name":"BENCH","subjects":["BENCH.>"],"num_replicas":3}' 2>/dev/null | grep -q '"config"'; do sleep 1; done

# The pods' addresses, every 0.5 s, for the writers (members not being deleted, as
# lib.sh's start_load keeps them) and the samplers (every pod with an address: a leader that
# is terminating still leads), and each cluster's Ready pods (ready.log).
python3 - "$k" "$tmp" "${ns[etcd3]}" "${ns[etcd5]}" "${ns[zk]}" "${ns[nats]}" "$logs" <<'PY' &
import json, os, subprocess, sys, time
k, tmp, names = sys.argv[1], sys.argv[2], dict(zip(["etcd3", "etcd5", "zk", "nats"], sys.argv[3:7]))
ports = {"etcd3": 2379, "etcd5": 2379, "zk": 8080, "nats": 8222}
def put(path, text):
    with open(path + ".new", "w") as f: f.write(text)
    os.replace(path + ".new", path)
ready = open(os.path.join(sys.argv[7], "ready.log"), "a")
while True:
    try:  # one request for the four namespaces: a kubectl every 0.5 s, not four
        every = json.loads(subprocess.run([k, "get", "pods", "-A", "-l", "app in (etcd,zk,nats)", "-o", "json"],
                                          capture_output=True, timeout=5).stdout)["items"]
    except Exception:
        time.sleep(0.5)
        continue
    for s, n in names.items():
        items = [p for p in every if p["metadata"]["namespace"] == n]
        live = [p for p in items if p["status"].get("podIP")]
        put(f"{tmp}/{s}.members", "".join(f"{p['metadata']['name']} http://{p['status']['podIP']}:{ports[s]}\n" for p in live))
        put(f"{tmp}/{s}.eps", "".join(f"http://{p['status']['podIP']}:{ports[s]}\n" for p in live if not p["metadata"].get("deletionTimestamp")))
        r = sum(1 for p in items if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])))
        ready.write(f"{time.time():.2f} {s} {r}\n"); ready.flush()
    time.sleep(0.5)
PY
sleep 3

# --- the gate, for its pass -------------------------------------------------------------------
start_gate() {
  "$k" create namespace "$gate_ns" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$k" apply -f - >/dev/null <<EOF
{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration",
 "metadata":{"name":"$webhook"},
 "webhooks":[{"name":"evictions.gate.kubectl-raft.io","admissionReviewVersions":["v1"],
   "sideEffects":"NoneOnDryRun","failurePolicy":"Fail","timeoutSeconds":10,
   "namespaceSelector":{"matchLabels":{"$label":"upgrade"}},
   "rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["pods/eviction"],"scope":"Namespaced"}],
   "clientConfig":{"url":"https://127.0.0.1:$port/validate"}}]}
EOF
  "$raft" gate serve -n "$gate_ns" --listen "127.0.0.1:$port" --tls-name 127.0.0.1 --tls-secret gate-tls \
    --webhook "$webhook" --via "${GATE_VIA:-direct}" -v=6 2> "$logs/gate.log" &
  gate=$!
  for _ in $(seq 1 120); do grep -q "serving on" "$logs/gate.log" && break; sleep 0.5; done
  until [ -n "$("$k" get validatingwebhookconfiguration "$webhook" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]; do sleep 0.5; done
}
stop_gate() {
  "$k" get secret gate-tls -n "$gate_ns" -o jsonpath='{.data.ca\.crt}' | base64 -d > "$tmp/gate-ca.crt"
  curl -sS --cacert "$tmp/gate-ca.crt" "https://127.0.0.1:$port/metrics" > "$logs/gate-metrics.txt"
  "$k" delete validatingwebhookconfiguration "$webhook" >/dev/null
  kill -TERM "$gate"; wait "$gate" 2>/dev/null || true
}

# --- one pass ---------------------------------------------------------------------------------
all_healthy() { for s in $systems; do wait_healthy "${sts[$s]}" "${ns[$s]}" "${members[$s]}"; done; }
# "system leader-pod" for every cluster whose leader (as kubectl raft status names it) is on node $1.
leaders_on() {
  for s in $systems; do
    "$raft" status "${sts[$s]}" -n "${ns[$s]}" -o json | python3 -c "import json, sys
c = json.load(sys.stdin)['clusters'][0]
l = c['summary']['leader']
if any(r['pod'] == l and r['node'] == '$1' for r in c['replicas']): print('$s', l)"
  done
}
run_pass() { # name
  local p=$1
  all_healthy
  for s in $systems; do
    python3 tests/load/leader_sampler.py "$tmp/$s.members" "${members[$s]}" 0.2 "${sampled[$s]}" > "$logs/$p-$s-sampler.json" &
    samplers[$s]=$!
  done
  "$load" --endpoints-file "$tmp/etcd3.eps" --duration 3600s > "$logs/$p-etcd3-load.json" & loads[etcd3]=$!
  "$load" --endpoints-file "$tmp/etcd5.eps" --duration 3600s > "$logs/$p-etcd5-load.json" & loads[etcd5]=$!
  "$load" --nats "$(sed 's|http://\(.*\):8222|nats://\1:4222|' "$tmp/nats.eps" | paste -sd,)" --monitors-file "$tmp/nats.eps" \
    --stream BENCH --user app --password app --ping 1s --duration 3600s > "$logs/$p-nats-load.json" & loads[nats]=$!
  sleep 3
  local t0 t1 a b
  t0=$(now)
  for node in ${DRAIN:-$("$k" get nodes -o jsonpath='{.items[*].metadata.name}')}; do
    leaders=$(leaders_on "$node" | paste -sd, -)
    echo "$node" >> "$tmp/cordoned"
    a=$(now)
    rc=0
    "$drainer" drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout=300s > "$logs/$p-drain-$node.log" 2>&1 || rc=$?
    b=$(now)
    "$k" uncordon "$node" >/dev/null
    all_healthy
    echo "{\"pass\": \"$p\", \"node\": \"$node\", \"rc\": $rc, \"drainMs\": $(( (b - a) / 1000000 )), \"untilHealthyMs\": $(( ($(now) - a) / 1000000 )), \"leaders\": \"$leaders\", \"at\": $(date +%s.%N)}" >> "$logs/nodes.jsonl"
    echo "$p: $node drained in $(( (b - a) / 1000000 )) ms (exit $rc; leaders there: ${leaders:-none})" >&2
  done
  t1=$(now)
  sleep 2
  for s in etcd3 etcd5 nats; do kill -TERM "${loads[$s]}"; wait "${loads[$s]}" || true; done
  for s in $systems; do kill -TERM "${samplers[$s]}"; wait "${samplers[$s]}" || true; done
  echo "{\"pass\": \"$p\", \"ms\": $(( (t1 - t0) / 1000000 )), \"from\": $t0, \"to\": $t1}" >> "$logs/passes.jsonl"
}

for p in $passes; do
  [ "$p" = gate ] && start_gate
  run_pass "$p"
  [ "$p" = gate ] && stop_gate
done
echo "logs: $logs" >&2
table "$logs"
