#!/usr/bin/env bash
# run.sh — `make run`: a local single-node Kubernetes cluster with Plinth
# storage (etcd, apiserver, controller-manager, scheduler,
# snapshot-controller, containerd, the patched kubelet, plinth-node), until
# Ctrl-C. See test/launch.
#
# Environment: PLINTH_RUN_DIR (work directory, default /tmp/plinth-run),
# PLINTH_CACHE (binary cache), PLINTH_RUN_ARGS (extra plinth-launch flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

if [ "$(id -u)" -ne 0 ]; then
	echo "make run needs root (kubelet, containerd, mounts): sudo make run" >&2
	exit 1
fi
# A cluster already running: say so before building anything (the launcher
# checks again, authoritatively, with the same lock).
lock=/run/plinth-launch.lock
if [ -e "$lock" ] && ! flock -n "$lock" true; then
	state=$(cat "$lock" 2>/dev/null || true)
	pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' <<<"$state")
	dir=$(sed -n 's/.*"dir":"\([^"]*\)".*/\1/p' <<<"$state")
	echo "make run: a Plinth cluster is already running on this host (launcher pid ${pid:-?}, work directory ${dir:-?})." >&2
	echo "Use it (export KUBECONFIG=${dir:-<its work directory>}/kubeconfig) or stop it with Ctrl-C in its terminal." >&2
	exit 2
fi

build/scripts/apt-install.sh containerd runc containernetworking-plugins busybox-static xfsprogs iproute2 util-linux
k8s_bin=$(third_party/kubernetes/build.sh)
snapshot_bin=$(third_party/snapshotter/build.sh)
gvisor_bin=$(third_party/gvisor/build.sh)
# A fixed output directory lets go build skip linking when nothing changed
# (it compares the build IDs of the existing binaries); the lock above keeps
# two runs from writing it at once.
bin=${PLINTH_CACHE:-$HOME/.cache/plinth}/run-bin
mkdir -p "$bin"
go build -o "$bin/" ./test/launch/cmd/plinth-launch ./node/cmd/plinth-node

# The launcher handles Ctrl-C itself: its components run in their own
# process groups and are stopped in order.
# shellcheck disable=SC2086
exec "$bin/plinth-launch" --dir "${PLINTH_RUN_DIR:-/tmp/plinth-run}" --k8s-bin "$k8s_bin" \
	--snapshot-bin "$snapshot_bin" --gvisor-bin "$gvisor_bin" --plinth-node "$bin/plinth-node" ${PLINTH_RUN_ARGS:-}
