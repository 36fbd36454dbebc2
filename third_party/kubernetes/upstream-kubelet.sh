#!/usr/bin/env bash
# upstream-kubelet.sh — builds the kubelet of the same version as build.sh,
# without Plinth's patches (the kubelet most clusters run), and prints the
# directory holding it. Cached like build.sh's binaries, under
#   $PLINTH_CACHE/kubelet-upstream-<k8s>-<go>-<hash>/bin/kubelet
# A separate script, not a build.sh flag: build.sh's cache key covers its own
# text, and a change to it would rebuild every cached Kubernetes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
export PATH=/usr/local/go/bin:$PATH

log() { echo "kubernetes/upstream-kubelet.sh: $*" >&2; }

k8s_version=$(cd "$here" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' k8s.io/kubernetes)
go_version=$(go env GOVERSION)
inputs_hash=$(cat "$0" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
out="$cache/kubelet-upstream-$k8s_version-$go_version-$inputs_hash"
if [ -f "$out/bin/.complete" ]; then
	echo "$out/bin"
	exit 0
fi

mkdir -p "$cache"
exec 9>/tmp/plinth-bigbuild.lock
log "waiting for /tmp/plinth-bigbuild.lock"
flock 9
if [ -f "$out/bin/.complete" ]; then
	echo "$out/bin"
	exit 0
fi
start=$(date +%s)
work=$(mktemp -d "$cache/kubelet-upstream-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building the upstream kubelet $k8s_version with $go_version in $work"
cp "$here/go.mod" "$here/go.sum" "$work/"
cd "$work"
export GOFLAGS=-mod=readonly
major=${k8s_version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
mkdir -p bin
CGO_ENABLED=${CGO_ENABLED:-1} go build -trimpath -ldflags "$ldflags" -o bin/ k8s.io/kubernetes/cmd/kubelet
echo "kubelet $k8s_version (k8s.io/kubernetes, unpatched), go $go_version, built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s" >bin/BUILD-INFO
touch bin/.complete
rm -rf "$out"
mkdir -p "$out"
mv bin "$out/bin"
log "done in $(($(date +%s) - start)) s: $out/bin"
echo "$out/bin"
