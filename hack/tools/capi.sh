#!/usr/bin/env bash
# Builds Cluster API from Go modules (hack/tools/capi), once, and prints the directory that holds:
#   capi-manager  the core manager, sigs.k8s.io/cluster-api/core: what the cluster-api-controller
#                 image runs (the Cluster, Machine, MachineSet, MachineDeployment, ... controllers)
#   clusterctl    sigs.k8s.io/cluster-api/cmd/clusterctl
#   kubeadm-bootstrap-manager
#                 the kubeadm bootstrap provider, sigs.k8s.io/cluster-api/bootstrap/kubeadm: what the
#                 kubeadm-bootstrap-controller image runs (bootstrap data and tokens for KubeadmConfigs)
#   crds/         Cluster API core's CRDs (core/config/crd/bases of the cluster-api module), as
#                 kustomize's bases: no conversion webhooks, so an API server serves them alone
#   kubeadm-crds/ the kubeadm bootstrap and control plane providers' CRDs, the same way (the
#                 cluster templates are checked against them)
#   core-rbac/    core's RBAC (ServiceAccount, roles, bindings) as its release installs it, a
#                 kustomization to build
#   webhook/      core's webhook configurations (core/config/webhook/manifests.yaml: defaulting
#                 and validation) and the CRD patches that turn its conversion webhook on
#                 (core/config/crd/patches), for the testbed to point at the manager it runs
#   kubeadm-bootstrap-webhook/
#                 the same for the kubeadm bootstrap provider (bootstrap/kubeadm/config)
# Tests use the directory as CAPI_ASSETS (make test sets it). With an argument (one of the names
# above) it prints that path instead.
#
# As hack/tools/controlplane.sh does for the API server, the build is cached outside the work tree,
# keyed by the pinned Cluster API version and the Go version, and made atomically (built in a
# temporary directory, then renamed), so concurrent runs and fresh clones share one build. Nothing
# is downloaded but Go modules. The first build takes a few minutes on 2 cores; progress goes to
# stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
moddir="$here/capi"
capi_version=$(cd "$moddir" && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
go_version=$(go env GOVERSION)
cache_root=${BUTLER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/butler-provider-harvester}
# Bump build_rev when the way the binaries are built changes, so caches are rebuilt.
build_rev=3
dir="$cache_root/capi/capi-${capi_version}_${go_version}_r${build_rev}"

case "${1:-}" in
  "" | capi-manager | clusterctl | kubeadm-bootstrap-manager | crds | kubeadm-crds | core-rbac | webhook | kubeadm-bootstrap-webhook) ;;
  *) echo "usage: $0 [capi-manager|clusterctl|kubeadm-bootstrap-manager|crds|kubeadm-crds|core-rbac|webhook|kubeadm-bootstrap-webhook]" >&2; exit 2 ;;
esac

# rename_dir moves a finished build into place; it fails if the target exists (another run won).
rename_dir() {
  if mv -T "$1" "$2" 2>/dev/null; then return 0; fi
  [ ! -e "$2" ] && mv "$1" "$2" # mv without -T (BSD): only when nothing is in the way
}

if [ ! -x "$dir/capi-manager" ] || [ ! -x "$dir/clusterctl" ] || [ ! -x "$dir/kubeadm-bootstrap-manager" ] || [ ! -d "$dir/crds" ] || [ ! -d "$dir/kubeadm-crds" ]; then
  echo ">> building Cluster API $capi_version (core manager, clusterctl, kubeadm bootstrap provider) from Go modules (first run only; cached in $dir)" >&2
  mkdir -p "$cache_root/capi"
  tmp=$(mktemp -d "$cache_root/capi/.build.XXXXXX")
  chmod 755 "$tmp" # mktemp makes it private; the build is not
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  # As Cluster API's release build does (Makefile, Dockerfile): the version from the linker (clusterctl
  # compares it with the providers' metadata), and the fieldsv1string tag of the images.
  minor=$(echo "$capi_version" | cut -d. -f2)
  v=sigs.k8s.io/cluster-api/version
  ldflags="-s -w -X $v.gitVersion=$capi_version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  (cd "$moddir" && CGO_ENABLED=0 go build -trimpath -tags=fieldsv1string -ldflags="$ldflags" -o "$tmp/" \
    sigs.k8s.io/cluster-api/core sigs.k8s.io/cluster-api/cmd/clusterctl sigs.k8s.io/cluster-api/bootstrap/kubeadm) >&2 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 15
    kill -0 "$pid" 2>/dev/null && echo "   ... still building Cluster API ($((SECONDS - start))s)" >&2
  done
  wait "$pid"
  mv "$tmp/core" "$tmp/capi-manager"
  mv "$tmp/kubeadm" "$tmp/kubeadm-bootstrap-manager"
  src=$(cd "$moddir" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  mkdir "$tmp/crds"
  cp "$src"/core/config/crd/bases/*.yaml "$tmp/crds/"
  mkdir "$tmp/kubeadm-crds"
  cp "$src"/bootstrap/kubeadm/config/crd/bases/*.yaml "$src"/controlplane/kubeadm/config/crd/bases/*.yaml "$tmp/kubeadm-crds/"
  chmod -R u+w "$tmp/crds" "$tmp/kubeadm-crds" # the module cache is read-only; the copies need not be
  # Builds are renamed into place whole; anything else there is an interrupted older layout.
  { [ -x "$dir/capi-manager" ] && [ -x "$dir/kubeadm-bootstrap-manager" ] && [ -d "$dir/crds" ] && [ -d "$dir/kubeadm-crds" ]; } || rm -rf "$dir"
  if ! rename_dir "$tmp" "$dir"; then
    [ -x "$dir/capi-manager" ] || { echo "cannot move the build to $dir" >&2; exit 1; }
  fi
  echo ">> built Cluster API $capi_version in $((SECONDS - start))s" >&2
fi

# core-rbac/: Cluster API core's RBAC as its release installs it: core/config/rbac with the
# namespace, name prefix and role aggregation patch that core/config/default puts on it (its
# ClusterRoleBinding binds the manager's ServiceAccount to the role that aggregates every
# ClusterRole labelled cluster.x-k8s.io/aggregate-to-manager), for tests that run the core manager
# as that ServiceAccount; `kustomize build` it. Only copied from the module, so it is added to a
# cached build that lacks it, without rebuilding (and renamed into place whole, like the build).
if [ ! -d "$dir/core-rbac" ]; then
  src=$(cd "$moddir" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  rbac_tmp=$(mktemp -d "$dir/.core-rbac.XXXXXX")
  cp -r "$src/core/config/rbac" "$rbac_tmp/rbac"
  cp "$src/core/config/default/manager_role_aggregation_patch.yaml" "$rbac_tmp/"
  cat >"$rbac_tmp/kustomization.yaml" <<'KUSTOMIZATION'
# The lines of Cluster API's core/config/default that shape its RBAC.
namespace: capi-system
namePrefix: capi-
resources:
- rbac
patches:
- path: manager_role_aggregation_patch.yaml
KUSTOMIZATION
  chmod -R u+w,go+rX "$rbac_tmp" # the module cache is read-only, and mktemp makes the directory private
  rename_dir "$rbac_tmp" "$dir/core-rbac" || rm -rf "$rbac_tmp" # another run won
fi

# add_webhooks NAME CONFIG: NAME/ holds the webhook configurations and conversion patches of the
# program whose kustomize config is CONFIG (a directory of the module), as they are there (their
# clientConfig names the release's Service; the testbed points them at the manager it runs, with a
# CA of its own). Added to a cached build that lacks it, like core-rbac/.
add_webhooks() {
  [ -d "$dir/$1" ] && return 0
  local src webhook_tmp
  src=$(cd "$moddir" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  webhook_tmp=$(mktemp -d "$dir/.$1.XXXXXX")
  cp "$src/$2/webhook/manifests.yaml" "$webhook_tmp/"
  cp -r "$src/$2/crd/patches" "$webhook_tmp/conversion"
  chmod -R u+w,go+rX "$webhook_tmp"
  rename_dir "$webhook_tmp" "$dir/$1" || rm -rf "$webhook_tmp" # another run won
}
add_webhooks webhook core/config                                     # core's
add_webhooks kubeadm-bootstrap-webhook bootstrap/kubeadm/config      # the kubeadm bootstrap provider's

if [ -n "${1:-}" ]; then
  echo "$dir/$1"
else
  echo "$dir"
fi
