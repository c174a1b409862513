#!/usr/bin/env bash
# Builds this repository's manager at a commit (default: HEAD's first parent, the previous commit of
# main), once, and prints the path of its binary: the manager an upgrade starts from (make
# bench-upgrade). The commit's source comes from this repository's own git history, its
# dependencies from the Go module proxy; built as the Dockerfile builds it (CGO off, -s -w) and
# cached like the other builds of hack/tools: outside the work tree, keyed by the commit and the Go
# version, renamed into place when complete.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
commit=$(git -C "$repo" rev-parse "${1:-HEAD^}")
go_version=$(go env GOVERSION)
cache_root=${BUTLER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/butler-provider-harvester}
dir="$cache_root/managers/${commit}_${go_version}"

if [ ! -x "$dir/manager" ]; then
  echo ">> building the manager at $commit (first run only; cached in $dir)" >&2
  mkdir -p "$cache_root/managers"
  tmp=$(mktemp -d "$cache_root/managers/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/src"
  git -C "$repo" archive "$commit" | tar -x -C "$tmp/src"
  (cd "$tmp/src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/out/manager" ./cmd/manager) >&2
  chmod 755 "$tmp/out"
  # Another run may have finished first; its build is as good as this one.
  mv -T "$tmp/out" "$dir" 2>/dev/null || [ -x "$dir/manager" ] || { echo "cannot move the build to $dir" >&2; exit 1; }
fi
echo "$dir/manager"
