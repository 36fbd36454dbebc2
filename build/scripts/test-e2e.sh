#!/usr/bin/env bash
# test-e2e.sh — Go tests against a real single-node cluster launched by
# test/launch: the node, the patched kubelet, pods, and a clean teardown.
# Needs root; CI runs it as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

build/scripts/apt-install.sh containerd runc containernetworking-plugins busybox-static xfsprogs iproute2 util-linux
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
# The snapshot API (CRDs and snapshot-controller) every cluster has.
PLINTH_SNAPSHOT_BIN=$(third_party/snapshotter/build.sh)
export PLINTH_SNAPSHOT_BIN
export PLINTH_K8S_BIN
# gVisor (runsc and its containerd shim) for the pods of RuntimeClass gvisor.
PLINTH_GVISOR_BIN=$(third_party/gvisor/build.sh)
export PLINTH_GVISOR_BIN
bin=$(mktemp -d /tmp/plinth-e2e-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/plinth-node" ./node/cmd/plinth-node
export PLINTH_NODE_BIN=$bin/plinth-node
# deploy/'s image, for test/deploy (plinth-node as a DaemonSet).
PLINTH_IMAGE=$(build/scripts/image.sh)
export PLINTH_IMAGE
# ... run by the kubelet most clusters run, unpatched.
PLINTH_UPSTREAM_KUBELET=$(third_party/kubernetes/upstream-kubelet.sh)/kubelet
export PLINTH_UPSTREAM_KUBELET
# PLINTH_E2E turns on the cluster tests (they are skipped in test-unit).
# One package at a time: every package launches its own cluster, and only
# one cluster runs per host.
PLINTH_E2E=1 go test -count=1 -p 1 -timeout 30m -v ./test/launch/... ./test/e2e/... ./test/deploy/...
