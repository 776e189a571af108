#!/usr/bin/env bash
# Builds the OCI images the world's real-kubelet nodes run (there is no registry and no
# Docker here): each is a root filesystem assembled from what the world already has (the same
# etcd and nats-server binaries the agent's pods run, with the shared libraries they link,
# and Debian's static busybox for the shells the manifests' hooks and probes use), made an
# image by umoci and written as a docker-archive by skopeo, named as the manifests name it,
# so one manifest runs on both kinds of node. Each real-kubelet node imports them into its
# containerd (`ctr -n k8s.io images import`); pods use them with the default
# imagePullPolicy (IfNotPresent), and nothing is ever pulled.
#
#   bash tests/world/images.sh     (called by build.sh; cached by the checksums of its inputs)
#
# Images (in $KWORLD_DIR/bin/images/):
#   pause.tar        registry.k8s.io/pause:3.10          the sandbox (tests/world/cmd/pause, static Go)
#   busybox.tar      docker.io/library/busybox:1.35      busybox only (the fidelity tests' pods)
#   etcd.tar         quay.io/coreos/etcd:v3.4.23         Debian's etcd-server 3.4.23 at /usr/bin/etcd
#   nats.tar         nats:2.15.2-alpine                  nats-server 2.15.2 at /usr/local/bin/nats-server
# The plugin's own image (ghcr.io/kubectl-raft/kubectl-raft) is tests/image.sh's release
# archive, imported as it is.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/env.sh"
bin="$KWORLD_DIR/bin"
out="$bin/images"
mkdir -p "$out"

missing=()
command -v umoci >/dev/null || missing+=(umoci)
command -v skopeo >/dev/null || missing+=(skopeo)
[ -x /bin/busybox ] && ! LC_ALL=C readelf -l /bin/busybox 2>/dev/null | grep -q 'program interpreter' || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  echo "images.sh: installing ${missing[*]}" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$bin/pause" ./cmd/pause)

# copy_with_libs ROOTFS FILE...: FILE at the same path in ROOTFS, with every shared library
# ldd says it loads (and the dynamic loader), at their paths.
copy_with_libs() {
  local rootfs=$1; shift
  local f lib
  for f in "$@"; do
    install -D -m 0755 "$f" "$rootfs$f"
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' || true); do
      [ -e "$rootfs$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
    done
  done
}

# base ROOTFS: busybox with its applets, /tmp, and the few files programs expect in /etc.
base() {
  local rootfs=$1
  mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/var/run"
  chmod 1777 "$rootfs/tmp"
  install -m 0755 /bin/busybox "$rootfs/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ -e "$rootfs/bin/$applet" ] || ln -s busybox "$rootfs/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$rootfs/etc/group"
  printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
}

# image NAME REF ROOTFS [ENTRYPOINT...]: ROOTFS as one layer, written to $out/NAME.tar.
image() {
  local name=$1 ref=$2 rootfs=$3; shift 3
  local layout="$work/layout-$name"
  umoci init --layout "$layout"
  umoci new --image "$layout:kworld"
  umoci insert --image "$layout:kworld" "$rootfs" / >/dev/null
  local args=(--image "$layout:kworld" --config.workingdir / --config.env PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin)
  local e
  for e in "$@"; do args+=(--config.entrypoint "$e"); done
  umoci config "${args[@]}"
  rm -f "$out/$name.tar.tmp"
  skopeo copy -q "oci:$layout:kworld" "docker-archive:$out/$name.tar.tmp:$ref"
  mv "$out/$name.tar.tmp" "$out/$name.tar"
  echo "$ref" > "$out/$name.ref"
}

inputs=(/bin/busybox /usr/bin/etcd /usr/local/bin/nats-server "$bin/pause" "${BASH_SOURCE[0]}")
stamp=$(cat "${inputs[@]}" | sha256sum | cut -c1-16)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$out/nats.tar" ]; then
  exit 0
fi
echo "images.sh: building the real-kubelet nodes' images" >&2
t0=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/pause"
install -m 0755 "$bin/pause" "$work/pause/pause"
image pause registry.k8s.io/pause:3.10 "$work/pause" /pause

base "$work/busybox"
image busybox docker.io/library/busybox:1.35 "$work/busybox" /bin/sh

base "$work/etcd"
copy_with_libs "$work/etcd" /usr/bin/etcd
image etcd quay.io/coreos/etcd:v3.4.23 "$work/etcd" /usr/bin/etcd

base "$work/nats"
copy_with_libs "$work/nats" /usr/local/bin/nats-server
image nats nats:2.15.2-alpine "$work/nats" /usr/local/bin/nats-server

echo "$stamp" > "$out/.stamp"
echo "images.sh: images built in $(( $(date +%s) - t0 ))s: $(cd "$out" && ls *.tar | tr '\n' ' ')" >&2
