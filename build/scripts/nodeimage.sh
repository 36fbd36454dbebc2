#!/usr/bin/env bash
# nodeimage.sh [NODEIMAGE-FLAGS...] — builds the Plinth node's OS image (or
# finds it in the cache) and prints two lines:
#   1. the image: an initramfs archive (newc cpio, compressed) under
#      $PLINTH_CACHE/nodeimage/<key>/, the whole root filesystem of the node
#   2. the kernel directory it boots with (test/ktest/kernel.sh): <dir>/vmlinux
# e.g.  { read -r image; read -r kernel; } < <(build/scripts/nodeimage.sh)
#
# The layout is node/core/imagelayout's (docs/design.md, "The node image"); the builder is
# build/nodeimage. Its inputs come from the project's own caches: plinth-node
# built static from this checkout, the patched kubelet
# (third_party/kubernetes/build.sh), gVisor's runsc and its shim
# (third_party/gvisor/build.sh), Debian's containerd, runc, CNI plugins,
# xfsprogs and busybox-static, the test kernel's modules, and the one
# container image a node needs, the pods' sandbox (node/cmd/pause). Extra
# container images: -image FILE.tar (repeatable; nodeimage-test.sh adds the
# tests' images that way); extra kernel modules: -module NAME. The key
# hashes every input's content and the builder itself, so a second call
# with nothing changed is a cache hit (about a second, mostly `go build`
# finding its cache).
#
# Not a Bazel rule (yet): most inputs live outside Bazel (the kubelet in the
# third_party build's cache, the kernel in ktest's, Debian's binaries in /usr,
# the pause image from `go build`), so a genrule would have to read them
# unsandboxed and Bazel's action cache would key on none of them, serving a
# stale image after an apt upgrade or a kubelet patch. The builder's own key
# covers every byte that goes in.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

build/scripts/apt-install.sh containerd runc containernetworking-plugins busybox-static xfsprogs lz4 >&2
kernel=$(test/ktest/kernel.sh)
modules=$(echo "$kernel"/lib/modules/*)
kubelet=$(third_party/kubernetes/build.sh)/kubelet
gvisor=$(third_party/gvisor/build.sh)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# -trimpath and no symbol table: the same sources give the same bytes, so
# the same key, from any checkout.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/plinth-node" ./node/cmd/plinth-node
go build -trimpath -o "$work/nodeimage" ./build/nodeimage/cmd/nodeimage
"$work/nodeimage" -repo . -init "$work/plinth-node" -kubelet "$kubelet" -gvisor "$gvisor" -moddir "$modules" "$@"
echo "$kernel"
