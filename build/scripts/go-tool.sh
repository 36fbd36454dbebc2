#!/usr/bin/env bash
# go-tool.sh MODULE/PATH@VERSION — builds a Go tool once into the project's
# cache ($PLINTH_CACHE/tools/<name>-<version>) and prints the binary's path.
# Versions are pinned by the caller, so the cache key is the name + version.
set -euo pipefail
spec=$1
pkg=${spec%@*}
ver=${spec##*@}
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
name=$(basename "$pkg")
dir="$cache/tools/$name-$ver"
if [ ! -x "$dir/$name" ]; then
	mkdir -p "$dir"
	GOBIN="$dir" GOFLAGS=-mod=mod go install "$spec" >&2
fi
echo "$dir/$name"
