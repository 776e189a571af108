#!/usr/bin/env bash
# Benchmark (not a test): the peak memory of an admin's `kubectl raft status -A` against the
# worst tenants this project could write, side by side for each binary given, in one run on
# one world. Prints a Markdown table for docs/benchmarks.md.
#
# The tenants, each in a namespace of its own, one pod each:
#   - `nats-N` (TENANTS of them): a StatefulSet that says it is NATS (kubectl-raft.io/system:
#     nats) and whose pod answers the streams-and-consumers listing with LISTING_MB of JSON
#     (the ceiling the built-in profile allows is 64 MiB), everything else small;
#   - `aliases`: an annotation profile of the most requests an annotation may make.
# Each binary runs `status -A -o json` ROUNDS times; /usr/bin/time -v gives its peak RSS.
#
# Usage: [PAD=900] bash tests/bench/tenant_memory.sh [TENANTS=4] [LISTING_MB=60] [ROUNDS=3] [BINARY...]
#   BINARY defaults to this checkout's release build; pass an older build to compare.
#   PAD: bytes of padding per stream (a real listing's config and state); PAD=0 is the worst
#   case for a parser: the most, smallest values per byte (about 1.5 million streams in 64 MiB).
set -euo pipefail
tenants=${1:-4}
listing_mb=${2:-60}
rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
NODES=4 . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=("$raft")
command -v /usr/bin/time >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null; }

# A server whose streams-and-consumers listing is LISTING_MB of JSON: many streams, each with
# a name, a leader and padding, as a real listing has config and state besides.
server=$(cat <<PY
import http.server, json
pad = "x" * ${PAD:-900}
streams = []
size = 0
i = 0
while size < $listing_mb * 1024 * 1024:
    s = {"name": "S%d" % i, "cluster": {"leader": "nats-0"}}
    if pad:
        s["cluster"]["replicas"] = [{"name": "nats-1", "current": True}]
        s["config"] = {"description": pad}
    size += len(json.dumps(s))
    streams.append(s)
    i += 1
BIG = json.dumps({"account_details": [{"name": "APP", "stream_detail": streams}]}).encode()
SMALL = json.dumps({"server_name": "nats-0", "meta_cluster": {"leader": "nats-0", "cluster_size": 1}, "SYS": {"_meta_": {"state": "LEADER", "term": 1}}}).encode()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = BIG if "streams=true" in self.path else SMALL
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8222), H).serve_forever()
PY
)

tenant() { # namespace, name, annotations (YAML lines, indented 4)
  "$k" create namespace "$1" --dry-run=client -o yaml | "$k" apply -f - >/dev/null
  cat <<YAML | "$k" apply -n "$1" -f - >/dev/null
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: $2
  annotations:
$3
spec:
  serviceName: $2
  replicas: 1
  selector: {matchLabels: {app: $2}}
  template:
    metadata: {labels: {app: $2}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: server
        image: python:3
        command: [/usr/bin/python3, -c, $(python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))' <<<"$server")]
        ports: [{name: monitor, containerPort: 8222}]
        readinessProbe: {tcpSocket: {port: 8222}, periodSeconds: 1}
YAML
}

for i in $(seq 1 "$tenants"); do
  tenant "mem-nats-$i" nats "    kubectl-raft.io/system: nats"
done
requests=""
for i in 1 2 3 4 5 6 7; do
  requests+="      - {name: r$i, request: {path: /r$i}, fields: {role: {json: /role}}}"$'\n'
done
tenant mem-aliases aliases "    kubectl-raft.io/profile: |
      name: aliases
      port: {numbers: [8222]}
      health: {request: {path: /healthz}}
      requests:
${requests%$'\n'}"
echo "waiting for the tenants' pods (the listing is built at start: a few seconds each)" >&2
for i in $(seq 1 "$tenants"); do
  "$k" rollout status sts/nats -n "mem-nats-$i" --timeout=180s >/dev/null
done
"$k" rollout status sts/aliases -n mem-aliases --timeout=180s >/dev/null
sleep 5

peak() { # binary -> peak RSS in MiB of one `status -A -o json`, and its seconds
  local out; out=$(mktemp)
  /usr/bin/time -v "$1" status -A -o json --probe-timeout 30s > /dev/null 2> "$out" || true
  awk -F: '/Maximum resident set size/ {rss=$2} /Elapsed \(wall clock\)/ {split($0, a, ": "); t=a[2]} END {printf "%.0f %s\n", rss/1024, t}' "$out"
  rm -f "$out"
}

echo "| binary | tenants (a ${listing_mb} MiB listing each, ${PAD:-900} B padding a stream) | peak RSS per round (MiB) | wall clock per round |"
echo "|---|---|---|---|"
for b in "${binaries[@]}"; do
  rss=(); wall=()
  for _ in $(seq 1 "$rounds"); do
    read -r r w < <(peak "$b")
    rss+=("$r"); wall+=("$w")
  done
  echo "| \`$b\` | $tenants | ${rss[*]} | ${wall[*]} |"
done
if [ -z "${KEEP:-}" ]; then
  for i in $(seq 1 "$tenants"); do "$k" delete namespace "mem-nats-$i" --wait=false >/dev/null; done
  "$k" delete namespace mem-aliases --wait=false >/dev/null
fi
