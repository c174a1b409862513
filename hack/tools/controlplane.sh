#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from Go modules, once, and prints the
# directory that holds both binaries (use it as KUBEBUILDER_ASSETS). With the argument "kubectl" it
# builds kubectl too (from the same Kubernetes release), for exploring the demo's clusters.
#
# The binaries are cached outside the work tree, keyed by the pinned versions and the Go version,
# so fresh clones, CI runs and `make demo` share one build. Nothing is downloaded but Go modules.
# The first build takes about 10 minutes on 2 cores; progress goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
modversion() { (cd "$here/controlplane/$1" && go list -m -f '{{.Version}}' "$2"); }
k8s_version=$(modversion kube-apiserver k8s.io/kubernetes)
etcd_version=$(modversion etcd go.etcd.io/etcd/server/v3)
go_version=$(go env GOVERSION)
cache_root=${BUTLER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/butler-provider-harvester}
# Bump build_rev when the way the binaries are built changes, so caches are rebuilt.
build_rev=2
dir="$cache_root/controlplane/k8s-${k8s_version}_etcd-${etcd_version}_${go_version}_r${build_rev}"

build() { # name, module dir, package, ldflags
  local name=$1 moddir=$2 pkg=$3 ldflags=${4:-}
  if [ -x "$dir/$name" ]; then return; fi
  echo ">> building $name from Go modules (first run only; cached in $dir)" >&2
  local start=$SECONDS tmp="$dir/.$name.tmp.$$"
  (cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $ldflags" -o "$tmp" "$pkg") >&2 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 15
    kill -0 "$pid" 2>/dev/null && echo "   ... still building $name ($((SECONDS - start))s)" >&2
  done
  wait "$pid"
  mv -f "$tmp" "$dir/$name"
  echo ">> built $name in $((SECONDS - start))s" >&2
}

mkdir -p "$dir"
build etcd "$here/controlplane/etcd" .
# The version an API server reports (/version) comes from the linker, as in Kubernetes' own build.
minor=$(echo "$k8s_version" | cut -d. -f2)
v=k8s.io/component-base/version
build kube-apiserver "$here/controlplane/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver \
  "-X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
if [ "${1:-}" = kubectl ]; then
  build kubectl "$here/controlplane/kube-apiserver" k8s.io/kubernetes/cmd/kubectl \
    "-X $v.gitVersion=$k8s_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
fi
echo "$dir"
