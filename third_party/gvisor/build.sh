#!/usr/bin/env bash
# build.sh — builds gVisor's runsc and containerd-shim-runsc-v1 from the Go
# module proxy and prints the directory holding them.
#
# Both come from one pinned version of gvisor.dev/gvisor (go.mod here), so
# the shim and the runsc it starts always match; Debian's runsc package ships
# no shim at all. The binaries are static (CGO_ENABLED=0): the shim runs
# under containerd with whatever PATH and libraries the host has.
#
# Two patches make the shim work with Debian 12's containerd 1.6 on hosts
# like ours (third_party/go/patches, each explains itself): the shim answers
# containerd's start call with a bare address (containerd-shim-bare-address,
# in containerd 2's shim library), and tolerates a host that refuses to lower
# its OOM score (gvisor-shim-oom-score). build.sh patches a copy of each
# module and builds against the copies.
#
# They are cached under
#   $PLINTH_CACHE/gvisor-<version>-<go>-<hash>
# where <hash> covers this script, go.mod, go.sum and the patches. A warm
# call only hashes those files. Cold builds hold /tmp/plinth-bigbuild.lock, like
# third_party/kubernetes/build.sh, so two big builds never share the
# machine's 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# module=patch: each patch applies to the version of its module that go.mod
# selects.
patched=(
	"gvisor.dev/gvisor=$repo/third_party/go/patches/gvisor-shim-oom-score.patch"
	"github.com/containerd/containerd/v2=$repo/third_party/go/patches/containerd-shim-bare-address.patch"
)
patches=("${patched[@]#*=}")
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
export PATH=/usr/local/go/bin:$PATH

log() { echo "gvisor/build.sh: $*" >&2; }

modversion() { # the version go.mod selects for a module, without touching the network
	(cd "$here" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$1")
}
version=$(modversion gvisor.dev/gvisor)
go_version=$(go env GOVERSION)
inputs_hash=$(cat "$0" "$here/go.mod" "$here/go.sum" "${patches[@]}" | sha256sum | cut -c1-16)
out="$cache/gvisor-$version-$go_version-$inputs_hash"

complete() { [ -f "$out/bin/.complete" ]; }
if complete; then
	echo "$out/bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>/tmp/plinth-bigbuild.lock
log "waiting for /tmp/plinth-bigbuild.lock"
flock 9
if complete; then # someone else built it while we waited
	echo "$out/bin"
	exit 0
fi

start=$(date +%s)
work=$(mktemp -d "$cache/gvisor-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building gVisor $version with $go_version in $work (a few minutes cold)"

cp "$here/go.mod" "$here/go.sum" "$work/"
cd "$work"
export GOFLAGS=-mod=readonly
# go build -overlay refuses to replace files under GOMODCACHE, so patch a copy
# of each module and point the build at it.
mkdir mods
for entry in "${patched[@]}"; do
	mod=${entry%%=*}
	p=${entry#*=}
	v=$(modversion "$mod")
	src=$(go mod download -json "$mod@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { log "could not download $mod@$v"; exit 1; }
	copy=mods/$(echo "$mod" | tr / _)
	cp -r "$src" "$copy"
	chmod -R u+w "$copy"
	# git apply allows no fuzz; GIT_CEILING_DIRECTORIES stops it from treating
	# an enclosing repository as the root for the patch's paths.
	if ! (cd "$copy" && GIT_CEILING_DIRECTORIES="$work" git apply --verbose "$p" >&2); then
		log "FATAL: $(basename "$p") does not apply to $mod@$v; update the patch"
		exit 1
	fi
	go mod edit -replace "$mod=./$copy"
done
mkdir -p bin
# runsc prints this as its version ("runsc version ..."), so a running
# sandbox's log names the build it came from.
ldflags="-s -w -X gvisor.dev/gvisor/runsc/version.version=$version"
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o bin/runsc gvisor.dev/gvisor/runsc
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/containerd-shim-runsc-v1 gvisor.dev/gvisor/shim

for b in runsc containerd-shim-runsc-v1; do
	[ -x "bin/$b" ] || { log "FATAL: bin/$b was not built"; exit 1; }
	# A binary built with cgo would depend on the host's libc.
	if ! go version -m "bin/$b" | grep -q 'CGO_ENABLED=0'; then
		log "FATAL: bin/$b was not built static (CGO_ENABLED=0)"
		exit 1
	fi
done
{
	echo "gvisor.dev/gvisor $version"
	echo "go $go_version"
	for p in "${patches[@]}"; do echo "patch $(basename "$p") sha256 $(sha256sum <"$p" | cut -d' ' -f1)"; done
	echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s"
} >bin/BUILD-INFO
touch bin/.complete
rm -rf "$out"
mkdir -p "$out"
mv bin "$out/bin"
log "done in $(($(date +%s) - start)) s: $out/bin"
echo "$out/bin"
