#!/usr/bin/env bash
# nodeimage-test.sh [NODEIMAGE-FLAGS...] — the node image's test variant:
# the node image of nodeimage.sh with the images the tests run on a node
# added (busybox and the e2e workload: test/images/cmd/testimages), built
# or found in the cache. Prints the same two lines as nodeimage.sh.
# `make run-vm` (whose example pod runs busybox) and `make test-e2e-vm`
# boot it; `make node-image` is the image a node ships, without them.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

# busybox-static: the busybox image packs it.
build/scripts/apt-install.sh busybox-static >&2
images=$(mktemp -d /tmp/plinth-test-images.XXXXXX)
trap 'rm -rf "$images"' EXIT
go run ./test/images/cmd/testimages -dir "$images" >"$images/list"
image_flags=()
while read -r tarball; do
	image_flags+=(-image "$tarball")
done <"$images/list"
[ ${#image_flags[@]} -gt 0 ] || { echo "nodeimage-test.sh: no test images" >&2; exit 1; }
build/scripts/nodeimage.sh "${image_flags[@]}" "$@"
