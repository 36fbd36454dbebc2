#!/usr/bin/env bash
# gazelle.sh [DIR] — regenerates Plinth's Bazel files from go.mod and the Go
# sources: build/bazel/deps.bzl (one go_repository per module in go.mod's
# build list) and a BUILD.bazel beside every Go package of the main module.
# DIR defaults to the repository; test.sh points it at a scratch copy to find
# out whether the committed files are stale.
#
# go.mod is the source of truth; never edit deps.bzl by hand. In BUILD files,
# only attributes or rules marked `# keep` survive regeneration.
#
# Gazelle runs as a host binary: the version the Bazel build pins in
# versions.bzl, with the same patch (third_party/bazel/patches), built once
# into $PLINTH_CACHE/tools. So this needs no Bazel and takes seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
root=$(cd "${1:-$repo}" && pwd)
export PATH=/usr/local/go/bin:$PATH

version=$(sed -n 's/^GAZELLE_VERSION = "\(v[^"]*\)".*/\1/p' "$repo/build/bazel/versions.bzl")
[ -n "$version" ] || { echo "gazelle.sh: no GAZELLE_VERSION in build/bazel/versions.bzl" >&2; exit 1; }
patch="$repo/third_party/bazel/patches/gazelle-$version.patch"
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
gazelle="$cache/tools/gazelle-$version-$(sha256sum "$patch" | cut -c1-12)/gazelle"
if [ ! -x "$gazelle" ]; then
	echo "gazelle.sh: building gazelle $version (patched) into ${gazelle%/gazelle}" >&2
	src=$(GOFLAGS= go mod download -json "github.com/bazelbuild/bazel-gazelle@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -d "$src" ] || { echo "gazelle.sh: could not download gazelle $version" >&2; exit 1; }
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cp -r "$src/." "$work"
	chmod -R u+w "$work"
	git -C "$work" apply -p1 "$patch"
	mkdir -p "$(dirname "$gazelle")"
	(cd "$work" && GOFLAGS=-mod=mod go build -o "$gazelle.tmp" ./cmd/gazelle)
	mv "$gazelle.tmp" "$gazelle"
fi

cd "$root"

# Directories with their own go.mod are other modules (third_party/kubernetes
# builds Kubernetes binaries with its own dependency set): not ours to build.
excludes=()
while IFS= read -r mod; do
	excludes+=(-exclude "${mod%/go.mod}")
done < <(find . -mindepth 2 \( -name .git -o -name 'bazel-*' -o -name _out \) -prune -o -name go.mod -print | sed 's|^\./||' | sort)

deps=build/bazel/deps.bzl
if [ ! -f "$deps" ]; then
	printf 'load("@bazel_gazelle//:deps.bzl", "go_repository")\n\ndef go_dependencies():\n    pass\n' >"$deps"
fi

# Proto files inside dependencies stay plain files (disable_global): their
# go_proto_library rules would need @com_google_protobuf, which only exists
# on GitHub. Every dependency ships its generated .pb.go files anyway.
"$gazelle" update-repos \
	-from_file=go.mod \
	-to_macro="$deps%go_dependencies" \
	-prune \
	-build_file_proto_mode=disable_global

"$gazelle" update -repo_root="$root" "${excludes[@]}"
