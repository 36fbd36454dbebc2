#!/usr/bin/env bash
# test-storage-e2e.sh — Kubernetes' own external-storage e2e suite (e2e.test,
# focus External.Storage, test/storagesuite/suite/testdriver.yaml) against
# plinth-node on the cluster of test/launch; see test/storagesuite. Needs
# root. PLINTH_STORAGE_SUITE_PROCS sets the number of ginkgo processes,
# PLINTH_STORAGE_SUITE_FOCUS narrows the run to some specs (a regexp).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH

build/scripts/apt-install.sh containerd runc containernetworking-plugins busybox-static xfsprogs iproute2 util-linux
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
# The snapshot API (CRDs and snapshot-controller) every cluster has.
PLINTH_SNAPSHOT_BIN=$(third_party/snapshotter/build.sh)
export PLINTH_SNAPSHOT_BIN
PLINTH_K8S_E2E_BIN=$(third_party/kubernetes/e2e/build.sh)
export PLINTH_K8S_BIN PLINTH_K8S_E2E_BIN
bin=$(mktemp -d /tmp/plinth-suite-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/plinth-node" ./node/cmd/plinth-node
export PLINTH_NODE_BIN=$bin/plinth-node
PLINTH_STORAGE_SUITE=1 go test -count=1 -timeout 70m -v ./test/storagesuite/
