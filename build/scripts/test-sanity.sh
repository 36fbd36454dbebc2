#!/usr/bin/env bash
# test-sanity.sh — csi-sanity (the CSI community's conformance suite) against
# `plinth-node csi-serve`, once for mount and once for block access. (The
# CSI request validation is fuzzed by test-fuzz.sh, with every other fuzz
# target.)
#
# The data directory is a freshly made, loop-mounted XFS (as on a node), so
# block volumes get real XFS fallocate semantics. It is mounted with prjquota
# so filesystem volumes get real project quotas; kernels without XFS quota
# support (CONFIG_XFS_QUOTA) refuse that mount, and then the same XFS is
# mounted without quotas and csi-serve runs with --allow-unenforced-capacity.
# The script says which one it used. Quota enforcement itself is tested in the
# kernel VM by `make test-kernel`; this target tests the CSI contract.
#
# Needs root (mounts, loop devices). Leaves no mounts, loop devices or
# processes behind, and fails if the server leaked any.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

if [ "$(id -u)" -ne 0 ]; then
	if [ "${CI:-}" = true ]; then
		echo "test-sanity: must run as root in CI" >&2
		exit 1
	fi
	echo "test-sanity: needs root (mounts and loop devices); skipped" >&2
	exit 0
fi

build/scripts/apt-install.sh xfsprogs util-linux mount
sanity=$(build/scripts/csi-sanity.sh)

# Short paths: unix socket paths are limited to 107 bytes.
work=$(mktemp -d /tmp/plinth-sanity.XXXXXX)
server_pid=""
cleanup() {
	local rc=$?
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	# Anything still mounted below the work directory (a failed run).
	# (grep finds nothing on a clean run: that must not fail the trap under
	# set -e and pipefail, or a passing run exits 1.)
	{ grep -o " $work/[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" || true; done
	for dev in $(losetup -j "$work/xfs.img" -O NAME -n 2>/dev/null); do losetup -d "$dev" || true; done
	rm -rf "$work"
	exit $rc
}
trap cleanup EXIT

echo "test-sanity: building plinth-node" >&2
go build -o "$work/plinth-node" ./node/cmd/plinth-node

data=$work/data
kubelet=$work/kubelet
mkdir -p "$data" "$kubelet/pods"
truncate -s 2G "$work/xfs.img"
mkfs.xfs -q -f "$work/xfs.img"
extra=()
if mount -o loop,prjquota "$work/xfs.img" "$data" 2>/dev/null; then
	echo "test-sanity: data directory is XFS with project quotas (capacity enforced)" >&2
else
	mount -o loop "$work/xfs.img" "$data"
	extra+=(--allow-unenforced-capacity)
	echo "test-sanity: this kernel cannot mount XFS with prjquota; data directory is XFS without quotas, csi-serve runs with --allow-unenforced-capacity" >&2
fi

"$work/plinth-node" csi-serve \
	--endpoint "unix://$work/csi.sock" \
	--controller-endpoint "unix://$work/ctrl.sock" \
	--data-dir "$data" --kubelet-dir "$kubelet" --ephemeral-dir "$work/ephemeral" \
	--node-name sanity-node "${extra[@]}" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do
	[ -S "$work/csi.sock" ] && [ -S "$work/ctrl.sock" ] && break
	kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; echo "test-sanity: csi-serve exited" >&2; exit 1; }
	sleep 0.1
done

failed=0
for access in mount block; do
	echo "test-sanity: csi-sanity, $access access" >&2
	# Target and staging paths below the kubelet directory, as the plugin
	# demands; small volumes (16 MiB, expanded to 32 MiB).
	if ! "$sanity" \
		-csi.endpoint "unix://$work/csi.sock" \
		-csi.controllerendpoint "unix://$work/ctrl.sock" \
		-csi.mountdir "$kubelet/pods/sanity-target" \
		-csi.stagingdir "$kubelet/pods/sanity-staging" \
		-csi.testvolumesize $((16 << 20)) \
		-csi.testvolumeexpandsize $((32 << 20)) \
		-csi.testvolumeaccesstype "$access" \
		-ginkgo.no-color; then
		failed=1
	fi
done

# Everything csi-sanity created must be gone again.
leaks=$(
	ls -A "$data/volumes"
	ls -A "$data/snapshots"
	ls -A "$work/ephemeral/csi/publications"
	losetup -a | grep -F "$data/" || true
	grep -F " $kubelet/" /proc/self/mounts || true
)
if [ -n "$leaks" ]; then
	echo "test-sanity: leftovers after csi-sanity:" >&2
	echo "$leaks" >&2
	failed=1
fi

kill -TERM "$server_pid"
if ! wait "$server_pid"; then
	echo "test-sanity: csi-serve did not exit cleanly" >&2
	failed=1
fi
server_pid=""
if [ "$failed" -ne 0 ]; then
	echo "--- csi-serve log ---" >&2
	cat "$work/server.log" >&2
	exit 1
fi
umount "$data"

echo "test-sanity: ok" >&2
