#!/usr/bin/env bash
# The main job: bring up the local test world (a Kubernetes control plane built from source,
# pods as processes), deploy a 3-member etcd StatefulSet, install kubectl-raft and run it the
# way a user does, as `kubectl raft`: status, yield, drain, restart under a watch, and the gate
# deciding for plain `kubectl drain` (a frozen member refused, then the leader handed over first); spurctld
# (built from the Spur source) behind the seed's TCP probe; then a 3-server NATS JetStream
# cluster with streams: the stream leaders per server, and yield --streams with credentials
# from a Secret its StatefulSet names.
# Usage: bash tests/demo.sh        (as root; leaves the world running: tests/world/down.sh stops it)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
. "$root/tests/world/env.sh"
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
# The leader as kubectl raft reports it; a follower and its process (pods are processes here).
leader_of() { kubectl raft status -n "$ns" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clusters"][0]["summary"]["leader"])'; }
pick_follower() {
  leader=$(leader_of)
  follower=$(kubectl get pods -n "$ns" -l app=etcd -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | grep -v "^$leader$" | head -1)
  pid=$(kubectl get pod "$follower" -n "$ns" -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|kworld://||')
}

echo "== building and starting the test world (cold: ~6 min, warm: ~10 s)" >&2
KUBECONFIG=$(bash tests/world/up.sh --nodes 4)
export KUBECONFIG
# The world's kubectl (built from the same Kubernetes source) and the plugin, on PATH,
# installed into a directory of its own as `cargo install` would.
cargo build --locked --release -q
mkdir -p "$KWORLD_DIR/plugins"
install -m 0755 target/release/kubectl-raft "$KWORLD_DIR/plugins/kubectl-raft"
export PATH="$KWORLD_DIR/plugins:$KWORLD_DIR/bin:$PATH"

ns=demo
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -n "$ns" -f tests/manifests/etcd-3.yaml >/dev/null
echo "== waiting for the 3 etcd members to be Ready" >&2
until [ "$(kubectl get sts etcd -n "$ns" -o jsonpath='{.status.readyReplicas}')" = 3 ]; do sleep 1; done

say "kubectl get nodes"
kubectl get nodes
say "kubectl get pods -n $ns -o wide"
kubectl get pods -n "$ns" -o wide
say "kubectl plugin list"
kubectl plugin list 2>/dev/null | grep kubectl-raft || true
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"
say "kubectl raft status -n $ns -o wide"
kubectl raft status -n "$ns" -o wide

pick_follower
echo
echo "== freezing $follower's etcd process with SIGSTOP: it hangs, but its pod still looks fine to Kubernetes" >&2
kill -STOP "$pid"
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns" || true
kill -CONT "$pid"
echo
echo "== $follower resumed" >&2
for _ in $(seq 1 60); do
  kubectl raft status -n "$ns" -o json | python3 -c 'import json,sys; s=json.load(sys.stdin)["clusters"][0]["summary"]; sys.exit(0 if s["healthyVoters"] == 3 and s["leader"] else 1)' && break
  sleep 1
done

say "kubectl raft yield etcd -n $ns --dry-run"
kubectl raft yield etcd -n "$ns" --dry-run
echo
echo "== a sequential writer runs against every member while leadership moves" >&2
cargo build --locked --release -q --example writeload
eps=$(kubectl get pods -n "$ns" -l app=etcd -o jsonpath='{range .items[*]}http://{.status.podIP}:2379,{end}' | sed 's/,$//')
target/release/examples/writeload --endpoints "$eps" --duration 4s > "$KWORLD_DIR/demo-load.json" &
sleep 1.5
say "kubectl raft yield etcd -n $ns"
kubectl raft yield etcd -n "$ns"
wait
echo "writes during the handover: $(cat "$KWORLD_DIR/demo-load.json")"
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"

leader=$(leader_of)
node=$(kubectl get pod "$leader" -n "$ns" -o jsonpath='{.spec.nodeName}')
echo
echo "== draining $node, the leader's node: the plan first, then the drain" >&2
say "kubectl raft drain $node --ignore-daemonsets --dry-run"
kubectl raft drain "$node" --ignore-daemonsets --dry-run
say "kubectl raft drain $node --ignore-daemonsets"
kubectl raft drain "$node" --ignore-daemonsets
say "kubectl get pods -n $ns -o wide"
kubectl get pods -n "$ns" -o wide
say "kubectl uncordon $node"
kubectl uncordon "$node"
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"

# A Raft-aware rollout, watched from "a second terminal" (here: in the background).
until kubectl raft status -n "$ns" -o json | python3 -c 'import json,sys; s=json.load(sys.stdin)["clusters"][0]["summary"]; sys.exit(0 if s["healthyVoters"] == 3 and s["readyPods"] == 3 else 1)'; do sleep 1; done
say "kubectl raft restart etcd -n $ns --dry-run"
kubectl raft restart etcd -n "$ns" --dry-run
say "kubectl raft status etcd -n $ns --watch --interval 1s &     # one line per change"
kubectl raft status etcd -n "$ns" --watch --interval 1s &
watcher=$!
sleep 3
say "kubectl raft restart etcd -n $ns"
kubectl raft restart etcd -n "$ns"
sleep 3
kill -INT "$watcher"; wait "$watcher" || true

# The gate: plain `kubectl drain` (or any evictor) gets drain's decision. In a cluster it runs
# as docs/gate.yaml installs it; here beside the API server, as the tests run it.
until kubectl raft status -n "$ns" -o json | python3 -c 'import json,sys; s=json.load(sys.stdin)["clusters"][0]["summary"]; sys.exit(0 if s["healthyVoters"] == 3 and s["readyPods"] == 3 and s["leader"] else 1)'; do sleep 1; done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo
echo "== the gate: an eviction webhook for namespaces labelled kubectl-raft.io/gate=enabled" >&2
cat <<EOF_HOOK | kubectl apply -f - >/dev/null
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: kubectl-raft-gate-demo}
webhooks:
- name: evictions.gate.kubectl-raft.io
  admissionReviewVersions: [v1]
  sideEffects: NoneOnDryRun
  failurePolicy: Fail
  timeoutSeconds: 10
  namespaceSelector: {matchLabels: {kubectl-raft.io/gate: enabled}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods/eviction], scope: Namespaced}]
  clientConfig: {url: "https://127.0.0.1:$port/validate"}
EOF_HOOK
kubectl raft gate serve -n "$ns" --listen "127.0.0.1:$port" --tls-name 127.0.0.1 --tls-secret gate-tls \
  --webhook kubectl-raft-gate-demo 2> "$KWORLD_DIR/demo-gate.log" &
gate=$!
until grep -q "serving on" "$KWORLD_DIR/demo-gate.log"; do sleep 0.5; done
say "kubectl label namespace $ns kubectl-raft.io/gate=enabled"
kubectl label namespace "$ns" kubectl-raft.io/gate=enabled --overwrite
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"
leader=$(leader_of)
node=$(kubectl get pod "$leader" -n "$ns" -o jsonpath='{.spec.nodeName}')
pick_follower
echo
echo "== $follower frozen again; its PDB still allows one eviction (the pod is Ready)" >&2
kill -STOP "$pid"
say "kubectl drain $node --ignore-daemonsets --pod-selector=app=etcd --timeout=15s     # the leader's node"
kubectl drain "$node" --ignore-daemonsets --pod-selector=app=etcd --timeout=15s || true
kill -CONT "$pid"
kubectl uncordon "$node" >/dev/null
echo
echo "== $follower resumed: the same plain drain now gets the leader handed over first" >&2
until kubectl raft status -n "$ns" -o json | python3 -c 'import json,sys; s=json.load(sys.stdin)["clusters"][0]["summary"]; sys.exit(0 if s["healthyVoters"] == 3 and s["leader"] else 1)'; do sleep 1; done
say "kubectl drain $node --ignore-daemonsets --pod-selector=app=etcd --timeout=120s"
kubectl drain "$node" --ignore-daemonsets --pod-selector=app=etcd --timeout=120s
say "kubectl uncordon $node"
kubectl uncordon "$node"
echo
echo "== what the gate decided, from its log (each also an Event on the pod, and a metric):" >&2
sed -n 's/.*INFO \(.*\) pod=.*verdict=\([A-Za-z]*\).*/  \2: \1/p' "$KWORLD_DIR/demo-gate.log" | uniq | tail -4
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"
kubectl label namespace "$ns" kubectl-raft.io/gate- >/dev/null
kubectl delete validatingwebhookconfiguration kubectl-raft-gate-demo >/dev/null
kill "$gate"; wait "$gate" 2>/dev/null || true

# spurctld (openraft), built from the Spur source by the world's build: the seed's TCP probe.
if [ -x /usr/local/bin/spurctld ]; then
  ns=demo-spur
  echo
  echo "== spurctld: 3 replicas behind the seed's tcpSocket probe" >&2
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -n "$ns" -f tests/manifests/spurctld-3.yaml >/dev/null
  until kubectl raft status -n "$ns" -o json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin)["clusters"][0]["summary"]; sys.exit(0 if s["healthyVoters"] == 3 and s["leader"] else 1)'; do sleep 1; done
  say "kubectl raft status -n $ns"
  kubectl raft status -n "$ns"
fi

ns=demo-nats
echo
echo "== NATS JetStream: 3 servers, a system account for operations, streams in account APP" >&2
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -n "$ns" -f tests/manifests/nats-3.yaml >/dev/null
until [ "$(kubectl get sts nats -n "$ns" -o jsonpath='{.status.readyReplicas}')" = 3 ]; do sleep 1; done
ip=$(kubectl get pod nats-0 -n "$ns" -o jsonpath='{.status.podIP}')
# JetStream answers its API once its meta group has a leader; the first request may time out.
for s in ORDERS EVENTS AUDIT; do
  for try in $(seq 1 60); do
    python3 tests/load/nats_request.py "$ip" app app "\$JS.API.STREAM.CREATE.$s" \
      "{\"name\":\"$s\",\"subjects\":[\"$s.>\"],\"num_replicas\":3}" 2>/dev/null | grep -q '"config"' && break
    [ "$try" = 60 ] && { echo "JetStream did not create stream $s within a minute" >&2; exit 1; }
    sleep 1
  done
done
python3 tests/load/nats_request.py "$ip" app app '$JS.API.CONSUMER.DURABLE.CREATE.ORDERS.work' \
  '{"stream_name":"ORDERS","config":{"durable_name":"work","ack_policy":"explicit"}}' >/dev/null
say "kubectl create secret generic nats-ops -n $ns --from-literal=NATS_USER=sys ... (system and APP users)"
kubectl create secret generic nats-ops -n "$ns" --from-literal=NATS_USER=sys --from-literal=NATS_PASSWORD=sys-secret \
  --from-literal=NATS_APP_USER=app --from-literal=NATS_APP_PASSWORD=app --dry-run=client -o yaml | kubectl apply -f - >/dev/null
say "kubectl label secret nats-ops -n $ns kubectl-raft.io/credentials=true"
kubectl label secret nats-ops -n "$ns" kubectl-raft.io/credentials=true --overwrite
say "kubectl annotate sts nats -n $ns kubectl-raft.io/credentials-secret=nats-ops"
kubectl annotate sts nats -n "$ns" kubectl-raft.io/credentials-secret=nats-ops --overwrite
sleep 1
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"
say "kubectl raft yield nats -n $ns --streams --dry-run"
kubectl raft yield nats -n "$ns" --streams --dry-run
say "kubectl raft yield nats -n $ns --streams"
kubectl raft yield nats -n "$ns" --streams
say "kubectl raft status -n $ns"
kubectl raft status -n "$ns"
echo
echo "== The world keeps running: KUBECONFIG=$KUBECONFIG; stop it with tests/world/down.sh" >&2
