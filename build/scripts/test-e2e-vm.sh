#!/usr/bin/env bash
# test-e2e-vm.sh — the tests of test/e2evm on a Plinth node booted from the
# node image in a qemu VM (TCG), with XFS project quotas enforced. Needs
# root; CI runs it as root. It boots the node image's test variant
# (nodeimage-test.sh: the tests' busybox and e2e workload images added),
# with the images of Kubernetes' storage suite added too (agnhost, busybox
# under e2e.test's names: test/storagesuite/cmd/suiteimages), for the
# suite's specs that run on the VM node (test/e2evm
# TestStorageSuiteUnusedVolumes).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

# busybox-static: the suite images (suiteimages) pack it, before
# nodeimage-test.sh installs it for the test images.
build/scripts/apt-install.sh qemu-system-x86 iproute2 busybox-static
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
# The snapshot API (CRDs and snapshot-controller) every cluster has.
PLINTH_SNAPSHOT_BIN=$(third_party/snapshotter/build.sh)
export PLINTH_SNAPSHOT_BIN
PLINTH_K8S_E2E_BIN=$(third_party/kubernetes/e2e/build.sh)
export PLINTH_K8S_BIN PLINTH_K8S_E2E_BIN
images=$(mktemp -d /tmp/plinth-suite-images.XXXXXX)
trap 'rm -rf "$images"' EXIT
image_flags=()
while read -r tarball; do
	image_flags+=(-image "$tarball")
done < <(go run ./test/storagesuite/cmd/suiteimages -dir "$images")
[ ${#image_flags[@]} -gt 0 ] || { echo "test-e2e-vm.sh: no suite images" >&2; exit 1; }
{ read -r PLINTH_NODE_IMAGE; read -r kernel; } < <(build/scripts/nodeimage-test.sh "${image_flags[@]}")
PLINTH_KERNEL=$kernel/vmlinux
export PLINTH_KERNEL PLINTH_NODE_IMAGE
PLINTH_E2E_VM=1 go test -count=1 -timeout 60m -v ./test/e2evm/... "$@"
