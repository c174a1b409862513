#!/usr/bin/env bash
# Builds the published provider (github.com/butlerdotdev/butler-provider-harvester, the program this
# one replaces) from its source at a pinned commit, once, and prints the path of its manager binary.
# `make bench-published` runs it side by side with this provider; nothing else uses it.
#
# The source comes from a git repository: PUBLISHED_GIT (a clone or mirror, bare or not), else a
# clone of https://github.com/butlerdotdev/butler-provider-harvester made for the build. The Go
# module proxy does not serve that commit (the module path is this repository's own), so the source
# cannot come from there; its dependencies do, checked against its own go.sum. The commit is built
# in a temporary directory with its own go.mod, as its Dockerfile builds it (CGO off, -s -w), and
# cached like hack/tools/controlplane.sh's builds: outside the work tree, keyed by the commit and
# the Go version, renamed into place when complete.
set -euo pipefail

# PUBLISHED_COMMIT: fabb05a (2026-04-30, "Bump butler-api to v0.13.0 (#15)"), the newest commit of
# its main branch, after its last release v0.2.3: butler-api v0.13.0, whose CRDs the bench installs.
commit=${PUBLISHED_COMMIT:-fabb05a3b7f4ddd2bfd1905d524acb40862241d5}
go_version=$(go env GOVERSION)
cache_root=${BUTLER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/butler-provider-harvester}
dir="$cache_root/published/${commit}_${go_version}"

if [ ! -x "$dir/manager" ]; then
  echo ">> building the published provider at $commit (first run only; cached in $dir)" >&2
  mkdir -p "$cache_root/published"
  tmp=$(mktemp -d "$cache_root/published/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  src=${PUBLISHED_GIT:-}
  if [ -z "$src" ]; then
    src="$tmp/repo.git"
    git clone --quiet --bare https://github.com/butlerdotdev/butler-provider-harvester.git "$src" >&2
  fi
  mkdir "$tmp/src"
  git -C "$src" archive "$commit" | tar -x -C "$tmp/src"
  start=$SECONDS
  (cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/manager" ./cmd) >&2
  mkdir -p "$tmp/out" && mv "$tmp/manager" "$tmp/out/manager"
  chmod 755 "$tmp/out"
  # Another run may have finished first; its build is as good as this one.
  mv -T "$tmp/out" "$dir" 2>/dev/null || [ -x "$dir/manager" ] || { echo "cannot move the build to $dir" >&2; exit 1; }
  echo ">> built the published provider in $((SECONDS - start))s" >&2
fi
echo "$dir/manager"
