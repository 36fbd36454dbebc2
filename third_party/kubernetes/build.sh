#!/usr/bin/env bash
# build.sh — builds etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kubectl from the Go module proxy, with Plinth's
# kubelet patches applied, and prints the directory holding the binaries.
#
# A cold build takes about 10 minutes on 2 cores, so the binaries (not the
# 3+ GB Go build cache) are cached under
#   $PLINTH_CACHE/kubernetes-<k8s>-<etcd>-<go>-<hash>
# where <hash> covers this script, go.mod, go.sum and every patch. A warm call
# only hashes those files. Cold builds hold /tmp/plinth-bigbuild.lock so that
# two big builds never share the machine's 2 cores.
#
# All binaries are built from one patched copy of k8s.io/kubernetes: the patch
# only changes code the kubelet runs, and one tree compiles every shared
# package once. Their version is v<k8s>+plinth.<patch hash>, so `kubectl get
# node -o wide` and the Node's status show that the patched build runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
patches=("$repo/third_party/go/patches/kubelet-no-block-pseudo-locks.patch")
cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
export PATH=/usr/local/go/bin:$PATH

log() { echo "kubernetes/build.sh: $*" >&2; }

modversion() { # the version go.mod selects for a module, without touching the network
	(cd "$here" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$1")
}
k8s_version=$(modversion k8s.io/kubernetes)
etcd_version=$(modversion go.etcd.io/etcd/server/v3)
go_version=$(go env GOVERSION)
inputs_hash=$(cat "$0" "$here/go.mod" "$here/go.sum" "${patches[@]}" | sha256sum | cut -c1-16)
patch_hash=$(cat "${patches[@]}" | sha256sum | cut -c1-8)
out="$cache/kubernetes-$k8s_version-etcd$etcd_version-$go_version-$inputs_hash"

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
work=$(mktemp -d "$cache/kubernetes-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building Kubernetes $k8s_version + etcd $etcd_version with $go_version in $work (about 10 min cold)"

cp "$here/go.mod" "$here/go.sum" "$work/"
cd "$work"
export GOFLAGS=-mod=readonly
k8s_dir=$(go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$k8s_dir" ] || { log "could not download k8s.io/kubernetes@$k8s_version"; exit 1; }

# go build -overlay refuses to replace files under GOMODCACHE, so patch a copy
# of the module and point the build at it.
cp -r "$k8s_dir" k8s
chmod -R u+w k8s
for p in "${patches[@]}"; do
	# git apply allows no fuzz; GIT_CEILING_DIRECTORIES stops it from treating
	# an enclosing repository as the root for the patch's paths.
	if ! (cd k8s && GIT_CEILING_DIRECTORIES="$work" git apply --verbose "$p" >&2); then
		log "FATAL: $(basename "$p") does not apply to k8s.io/kubernetes@$k8s_version; update the patch"
		exit 1
	fi
done
go mod edit -replace "k8s.io/kubernetes=./k8s"

version="$k8s_version+plinth.$patch_hash"
major=${k8s_version#v}
minor=${major#*.}
minor=${minor%%.*}
major=${major%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

mkdir -p bin
CGO_ENABLED=${CGO_ENABLED:-1} go build -trimpath -ldflags "$ldflags" -o bin/ \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubelet \
	k8s.io/kubernetes/cmd/kubectl
go build -trimpath -ldflags "-s -w" -o bin/etcd go.etcd.io/etcd/server/v3

for b in "${binaries[@]}"; do
	[ -x "bin/$b" ] || { log "FATAL: bin/$b was not built"; exit 1; }
done
{
	echo "kubernetes $version (from k8s.io/kubernetes $k8s_version)"
	echo "etcd $etcd_version"
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
