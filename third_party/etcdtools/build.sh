#!/usr/bin/env bash
# build.sh — builds etcdctl and etcdutl, etcd's client and offline tools,
# from the Go module proxy at the version of the etcd that
# ../kubernetes/build.sh builds, and prints the directory holding
#   etcdctl   talks to a running etcd (snapshot save, get, ...)
#   etcdutl   works on data files offline (snapshot restore, status, ...)
#
# They live here, not in ../kubernetes/build.sh, because a change there
# changes that bundle's cache key and rebuilds all of Kubernetes (6-10
# minutes) on every machine; these two take about 35 s cold.
#
# The output is cached, like ../snapshotter/build.sh's, under
#   $PLINTH_CACHE/etcd-tools-<version>-<go>-<hash>
# where <hash> covers this script, go.mod and go.sum. A warm call only hashes
# those files. Cold builds hold /tmp/plinth-bigbuild.lock so that two big
# builds never share the machine's 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
export PATH=/usr/local/go/bin:$PATH

log() { echo "etcdtools/build.sh: $*" >&2; }

modversion() { # the version a go.mod in dir $1 selects for module $2, without touching the network
	(cd "$1" && GOFLAGS=-mod=readonly go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$2")
}
ctl_version=$(modversion "$here" go.etcd.io/etcd/etcdctl/v3)
utl_version=$(modversion "$here" go.etcd.io/etcd/etcdutl/v3)
go_version=$(go env GOVERSION)
inputs_hash=$(cat "$0" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
out="$cache/etcd-tools-$ctl_version-$go_version-$inputs_hash"

complete() { [ -f "$out/.complete" ]; }
if complete; then
	echo "$out"
	exit 0
fi

# A snapshot is read by the etcd it is restored for: the tools and the
# server move together. Checked on a cold build only, so a warm call stays
# cheap.
server_version=$(modversion "$here/../kubernetes" go.etcd.io/etcd/server/v3)
if [ "$ctl_version" != "$server_version" ] || [ "$utl_version" != "$server_version" ]; then
	log "etcdctl $ctl_version and etcdutl $utl_version here, etcd $server_version in ../kubernetes: move go.mod here to $server_version (see README.md)"
	exit 1
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
work=$(mktemp -d "$cache/etcd-tools-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building etcdctl and etcdutl $ctl_version with $go_version in $work (about 35 s cold)"

cp "$here/go.mod" "$here/go.sum" "$work/"
cd "$work"
export GOFLAGS=-mod=readonly
mkdir result
go build -trimpath -ldflags "-s -w" -o result/etcdctl go.etcd.io/etcd/etcdctl/v3
go build -trimpath -ldflags "-s -w" -o result/etcdutl go.etcd.io/etcd/etcdutl/v3
{
	echo "etcdctl $ctl_version (go.etcd.io/etcd/etcdctl/v3)"
	echo "etcdutl $utl_version (go.etcd.io/etcd/etcdutl/v3)"
	echo "go $go_version"
	echo "built $(date -u +%FT%TZ) in $(($(date +%s) - start)) s"
} >result/BUILD-INFO
touch result/.complete
rm -rf "$out"
mv result "$out"
log "done in $(($(date +%s) - start)) s: $out"
echo "$out"
