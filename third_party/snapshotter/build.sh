#!/usr/bin/env bash
# build.sh — builds the snapshot-controller of kubernetes-csi/external-snapshotter
# from the Go module proxy, copies the snapshot.storage.k8s.io CRDs out of
# the client module at the same version, and prints the directory holding
#   snapshot-controller   the controller (runs beside kube-controller-manager)
#   crd/*.yaml            VolumeSnapshotClass, VolumeSnapshotContent, VolumeSnapshot
#
# The output is cached, like ../kubernetes/build.sh's, under
#   $PLINTH_CACHE/snapshot-controller-<version>-<go>-<hash>
# where <hash> covers this script, go.mod and go.sum. A warm call only hashes
# those files. Cold builds hold /tmp/plinth-bigbuild.lock so that two big
# builds never share the machine's 2 cores.
#
# Only the three CRDs of snapshot.storage.k8s.io are copied: the group
# snapshot CRDs belong to a feature gate (VolumeGroupSnapshot) that is off in
# this release and that Plinth does not serve.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
export PATH=/usr/local/go/bin:$PATH

log() { echo "snapshotter/build.sh: $*" >&2; }

modversion() { # the version go.mod selects for a module, without touching the network
	(cd "$here" && GOFLAGS=-mod=readonly go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$1")
}
version=$(modversion github.com/kubernetes-csi/external-snapshotter/v8)
client_version=$(modversion github.com/kubernetes-csi/external-snapshotter/client/v8)
go_version=$(go env GOVERSION)
inputs_hash=$(cat "$0" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
out="$cache/snapshot-controller-$version-$go_version-$inputs_hash"
crds=(snapshot.storage.k8s.io_volumesnapshotclasses.yaml
	snapshot.storage.k8s.io_volumesnapshotcontents.yaml
	snapshot.storage.k8s.io_volumesnapshots.yaml)

complete() { [ -f "$out/.complete" ]; }
if complete; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache"
exec 9>/tmp/plinth-bigbuild.lock
log "waiting for /tmp/plinth-bigbuild.lock"
flock 9
if complete; then # someone else built it while we waited
	echo "$out"
	exit 0
fi

start=$(date +%s)
work=$(mktemp -d "$cache/snapshot-controller-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building snapshot-controller $version with $go_version in $work (about 3 minutes cold)"

cp "$here/go.mod" "$here/go.sum" "$work/"
cd "$work"
export GOFLAGS=-mod=readonly
client_dir=$(go mod download -json "github.com/kubernetes-csi/external-snapshotter/client/v8@$client_version" |
	sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$client_dir/config/crd" ] || { log "no config/crd in the client module $client_version"; exit 1; }

mkdir -p result/crd
# main.version is what upstream's release builds set (its Makefile's REV).
go build -trimpath -ldflags "-s -w -X main.version=$version" -o result/snapshot-controller \
	github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
for f in "${crds[@]}"; do
	cp "$client_dir/config/crd/$f" result/crd/
done
chmod 0644 result/crd/*.yaml
{
	echo "snapshot-controller $version (github.com/kubernetes-csi/external-snapshotter/v8)"
	echo "crd from github.com/kubernetes-csi/external-snapshotter/client/v8 $client_version config/crd"
	echo "go $go_version"
	echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s"
} >result/BUILD-INFO
touch result/.complete
rm -rf "$out"
mv result "$out"
log "done in $(($(date +%s) - start)) s: $out"
echo "$out"
