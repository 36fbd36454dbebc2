#!/usr/bin/env bash
# test-unit.sh — every Go test of the main module on the host. Tests that need
# root run here when we are root (CI is); kernel-only tests run in the VM via
# test-kernel.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Controller tests (node/kubernetes/...) and test/launch run a real control
# plane (test/launch's with the snapshot API too; the etcd restore tests
# with etcdctl and etcdutl). Build (or find cached) the Kubernetes binaries,
# the snapshot-controller and the etcd tools first, so that no test binary
# spends its 10-minute timeout on a cold build; the launcher's path
# setup also checks for the CNI plugins; test/images packs busybox-static,
# and build/nodeimage's tests use it as a static program; test/images packs
# Debian's fio with its libraries for bench/datapath; the host's XFS tests
# (test/volumetest.LoopXFS: copy-on-write, the engine's crash tests) and
# the first-boot format test need mkfs.xfs and mkfs.ext4.
build/scripts/apt-install.sh containernetworking-plugins busybox-static fio xfsprogs e2fsprogs
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
PLINTH_SNAPSHOT_BIN=$(third_party/snapshotter/build.sh)
PLINTH_ETCD_TOOLS_BIN=$(third_party/etcdtools/build.sh)
export PLINTH_K8S_BIN PLINTH_SNAPSHOT_BIN PLINTH_ETCD_TOOLS_BIN
go test -count=1 ./...
