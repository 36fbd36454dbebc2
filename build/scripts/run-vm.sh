#!/usr/bin/env bash
# run-vm.sh — `make run-vm`: a Plinth node booted from the node image in a
# qemu VM (TCG), joined to a control plane on this host, until Ctrl-C. The
# node's data disk persists in the work directory; the next run boots the
# same node again. It boots the node image's test variant
# (nodeimage-test.sh), which has the busybox image of the example pod it
# prints. See test/nodevm.
#
# Environment: PLINTH_VM_DIR (work directory, default /tmp/plinth-vm),
# PLINTH_CACHE (caches), PLINTH_VM_ARGS (extra plinth-vm flags: -fresh,
# -console).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

if [ "$(id -u)" -ne 0 ]; then
	echo "make run-vm needs root (the node's IP goes on a host interface): sudo make run-vm" >&2
	exit 1
fi
build/scripts/apt-install.sh qemu-system-x86 iproute2
k8s_bin=$(third_party/kubernetes/build.sh)
snapshot_bin=$(third_party/snapshotter/build.sh)
{ read -r image; read -r kernel; } < <(build/scripts/nodeimage-test.sh)
bin=${PLINTH_CACHE:-$HOME/.cache/plinth}/run-bin
mkdir -p "$bin"
go build -o "$bin/" ./test/nodevm/cmd/plinth-vm
# shellcheck disable=SC2086
exec "$bin/plinth-vm" --dir "${PLINTH_VM_DIR:-/tmp/plinth-vm}" --k8s-bin "$k8s_bin" --snapshot-bin "$snapshot_bin" \
	--kernel "$kernel/vmlinux" --image "$image" ${PLINTH_VM_ARGS:-}
