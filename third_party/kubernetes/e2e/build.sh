#!/usr/bin/env bash
# build.sh — builds Kubernetes' end-to-end suite (e2e.test, from
# k8s.io/kubernetes/test/e2e) and the agnhost test program (static, from
# k8s.io/kubernetes/test/images/agnhost) at the Kubernetes version of
# ../go.mod, and prints the directory holding both.
#
# Like ../build.sh it caches the binaries, not the Go build cache, under
#   $PLINTH_CACHE/kubernetes-e2e-<k8s>-<go>-<hash>
# where <hash> covers this script, go.mod, go.sum and imports.go; a warm call
# only hashes those files. Cold builds hold /tmp/plinth-bigbuild.lock, the
# lock of ../build.sh, so two big builds never share the machine's 2 cores.
#
# Nothing is patched: the suite only talks to the cluster through its API.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
export PATH=/usr/local/go/bin:$PATH

log() { echo "kubernetes/e2e/build.sh: $*" >&2; }

modversion() { # the version a go.mod in $1 selects for module $2, offline
	(cd "$1" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$2")
}
k8s_version=$(modversion "$here" k8s.io/kubernetes)
cluster_version=$(modversion "$here/.." k8s.io/kubernetes)
if [ "$k8s_version" != "$cluster_version" ]; then
	log "FATAL: e2e/go.mod has k8s.io/kubernetes $k8s_version but ../go.mod (the cluster's binaries) has $cluster_version; move both together"
	exit 1
fi
go_version=$(go env GOVERSION)
inputs_hash=$(cat "$0" "$here/go.mod" "$here/go.sum" "$here/imports.go" | sha256sum | cut -c1-16)
out="$cache/kubernetes-e2e-$k8s_version-$go_version-$inputs_hash"

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
work=$(mktemp -d "$cache/kubernetes-e2e-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building e2e.test and agnhost of Kubernetes $k8s_version with $go_version in $work (about 5 min cold)"
cd "$here"
export GOFLAGS=-mod=readonly CGO_ENABLED=0

# The suite logs the version it was built from; give it the release's.
version_flags=""
major=${k8s_version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	version_flags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	version_flags+=" -X $pkg.gitTreeState=clean"
done
mkdir -p "$work/bin"
go test -c -trimpath -ldflags "-s -w $version_flags" -o "$work/bin/e2e.test" k8s.io/kubernetes/test/e2e

# agnhost's image tag is its VERSION file; the suite pulls agnhost:<VERSION>.
k8s_dir=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
agnhost_version=$(cat "$k8s_dir/test/images/agnhost/VERSION")
go build -trimpath -ldflags "-s -w -X main.Version=$agnhost_version" -o "$work/bin/agnhost" k8s.io/kubernetes/test/images/agnhost
echo "$agnhost_version" >"$work/bin/agnhost.version"
# The ginkgo CLI of the version e2e.test links: the only way to run its specs
# in parallel processes (it serves them their specs and merges the reports).
go build -trimpath -ldflags "-s -w" -o "$work/bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo

for b in e2e.test agnhost ginkgo; do
	[ -x "$work/bin/$b" ] || { log "FATAL: $b was not built"; exit 1; }
done
{
	echo "e2e.test, agnhost $agnhost_version and ginkgo from k8s.io/kubernetes $k8s_version"
	echo "go $go_version"
	echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s"
} >"$work/bin/BUILD-INFO"
touch "$work/bin/.complete"
rm -rf "$out"
mkdir -p "$out"
mv "$work/bin" "$out/bin"
log "done in $(($(date +%s) - start)) s: $out/bin"
echo "$out/bin"
