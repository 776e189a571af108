#!/usr/bin/env bash
# Builds the test world: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
# the kubelet from k8s.io/kubernetes (pinned in go.mod), kworld (agent, embedded etcd,
# up/down, the real-kubelet nodes), and the images the real-kubelet nodes run (images.sh).
# Installs the Debian packages the world and its workloads need. Idempotent and cached:
# binaries are rebuilt only when their sources change; Go's build cache does the rest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/env.sh"
bin="$KWORLD_DIR/bin"
mkdir -p "$bin"

if [ "$(id -u)" != 0 ]; then
  echo "build.sh: the test world needs root (network namespaces, bind mounts)" >&2
  exit 1
fi

missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v ip >/dev/null || missing+=(iproute2)
command -v nsenter >/dev/null || missing+=(util-linux)
command -v ps >/dev/null || missing+=(procps)
# ZooKeeper 3.8 for the ZooKeeper workload; the servlet API lets its AdminServer (Jetty) start.
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
[ -f /usr/share/java/servlet-api.jar ] || missing+=(libservlet-api-java)
# The real-kubelet nodes (kworld up --kubelets N): Debian's containerd 1.6 and runc, the CNI
# plugins (bridge, host-local, loopback), and what images.sh builds their images with.
command -v containerd >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v umoci >/dev/null || missing+=(umoci)
command -v skopeo >/dev/null || missing+=(skopeo)
# Spur's build (spurctld.sh) generates its gRPC code with protoc.
command -v protoc >/dev/null || missing+=(protobuf-compiler)
[ -x /bin/busybox ] && ! LC_ALL=C readelf -l /bin/busybox 2>/dev/null | grep -q 'program interpreter' || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "build.sh: installing ${missing[*]}" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's etcd-server package ships a service unit; the world runs etcd itself.
if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
  systemctl stop etcd || true
fi

if ! command -v go >/dev/null; then
  echo "build.sh: Go is required to build the control plane from source (go.mod pins the version); install Go 1.24 or newer" >&2
  exit 1
fi

cd "$here"
stamp() { cat go.mod go.sum "$@" 2>/dev/null | sha256sum | cut -c1-16; }
k8s_stamp=$(stamp "$here/build.sh")
# The version Kubernetes' own build stamps in (hack/lib/version.sh does it with ldflags),
# so `kubectl version`, version-skew checks and clients see v1.34.x, not v0.0.0-master.
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$k8s_version" | cut -d. -f2)
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=release-$k8s_version -X $pkg.buildDate=2026-01-01T00:00:00Z"
done
if [ "$(cat "$bin/.k8s.stamp" 2>/dev/null)" != "$k8s_stamp" ] || [ ! -x "$bin/kube-apiserver" ] || [ ! -x "$bin/kubelet" ]; then
  echo "build.sh: building the Kubernetes control plane from source (cold: ~5 min on 2 cores)" >&2
  t0=$(date +%s)
  go build -ldflags "$ldflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet
  echo "$k8s_stamp" > "$bin/.k8s.stamp"
  echo "build.sh: control plane built in $(( $(date +%s) - t0 ))s" >&2
fi
kw_stamp=$(stamp cmd/kworld/*.go)
if [ "$(cat "$bin/.kworld.stamp" 2>/dev/null)" != "$kw_stamp" ] || [ ! -x "$bin/kworld" ]; then
  echo "build.sh: building kworld" >&2
  go build -o "$bin/kworld" ./cmd/kworld
  echo "$kw_stamp" > "$bin/.kworld.stamp"
fi
# NATS JetStream, a Raft system that runs here as a real server (the Debian package, 2.9, is
# too old: no /raftz, no stepdown to a preferred server). Its own go.mod, so `go install`.
nats_version=v2.15.2
if [ "$(cat "$bin/.nats.stamp" 2>/dev/null)" != "$nats_version" ] || [ ! -x "$bin/nats-server" ]; then
  echo "build.sh: building nats-server $nats_version (cold: ~30 s)" >&2
  GOBIN="$bin" go install "github.com/nats-io/nats-server/v2@$nats_version"
  echo "$nats_version" > "$bin/.nats.stamp"
fi
# Where the manifests (tests/manifests/nats-*.yaml) run it from, as Debian's etcd runs from /usr/bin.
cmp -s "$bin/nats-server" /usr/local/bin/nats-server 2>/dev/null || install -m 0755 "$bin/nats-server" /usr/local/bin/nats-server

# The Consul stand-in (tests/standin/hraft: hashicorp/raft behind Consul's HTTP API shapes;
# Consul's licence keeps Consul itself out). Its own go.mod, so built from its directory;
# rebuilt when its module files or sources change. Installed where tests/manifests/hraft-*.yaml
# run it from.
hraft_dir="$here/../standin/hraft"
hraft_stamp=$(cd "$hraft_dir" && cat go.mod go.sum $(ls *.go | grep -v '_test\.go$') | sha256sum | cut -c1-16)
if [ "$(cat "$bin/.hraft.stamp" 2>/dev/null)" != "$hraft_stamp" ] || [ ! -x "$bin/hraft-standin" ]; then
  echo "build.sh: building hraft-standin (the Consul stand-in)" >&2
  (cd "$hraft_dir" && go build -o "$bin/hraft-standin" .)
  echo "$hraft_stamp" > "$bin/.hraft.stamp"
fi
cmp -s "$bin/hraft-standin" /usr/local/bin/hraft-standin 2>/dev/null || install -m 0755 "$bin/hraft-standin" /usr/local/bin/hraft-standin

# Spur's spurctld (openraft), built from source by spurctld.sh (its own lock). tests/run.sh
# sets KRAFT_SPURCTLD=background and builds it beside the tests instead (#41): a cold build is
# about 3 minutes of the world's critical path, and the spurctld tests wait on its lock.
if [ "${KRAFT_SPURCTLD:-}" != background ]; then
  bash "$here/spurctld.sh"
fi

# The real-kubelet nodes' images (etcd, nats-server, busybox, the pause sandbox), from the
# binaries above; cached by their checksums.
bash "$here/images.sh"
