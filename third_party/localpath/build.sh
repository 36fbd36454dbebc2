#!/usr/bin/env bash
# build.sh — builds rancher's local-path-provisioner, the dynamic local
# provisioner most single-node clusters ship (kind, k3s), from the Go module
# proxy and prints the binary's path. bench/provisioning runs it on the host
# as the peer Plinth is compared with.
#
# The version is pinned here; the binary is cached under
#   $PLINTH_CACHE/localpath-<version>-<go>/local-path-provisioner
# so a warm call costs nothing. It is a plain `go install` of a tagged
# module: no patches, nothing of this repository goes into it.
set -euo pipefail
version=v0.0.30
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
export PATH=/usr/local/go/bin:$PATH

go_version=$(go env GOVERSION)
out="$cache/localpath-$version-$go_version"
bin="$out/local-path-provisioner"
if [ -x "$bin" ] && [ -f "$out/.complete" ]; then
	echo "$bin"
	exit 0
fi
echo "localpath/build.sh: building github.com/rancher/local-path-provisioner@$version with $go_version" >&2
mkdir -p "$out"
# Outside any module (a tagged module's own go.mod decides its
# dependencies), static so it runs whatever the host's libc.
(cd "$out" && GOBIN="$out" GOFLAGS=-mod=mod CGO_ENABLED=0 go install "github.com/rancher/local-path-provisioner@$version") >&2
touch "$out/.complete"
echo "$bin"
