#!/usr/bin/env bash
# test-e2e-vm.sh — the tests of test/e2evm on a Plinth node booted from the
# node image in a qemu VM (TCG), with XFS project quotas enforced. Needs
# root; CI runs it as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

build/scripts/apt-install.sh qemu-system-x86 iproute2
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
{ read -r PLINTH_NODE_IMAGE; read -r kernel; } < <(build/scripts/nodeimage.sh)
PLINTH_KERNEL=$kernel/vmlinux
export PLINTH_K8S_BIN PLINTH_KERNEL PLINTH_NODE_IMAGE
PLINTH_E2E_VM=1 go test -count=1 -timeout 60m -v ./test/e2evm/... "$@"
