#!/usr/bin/env bash
# test-unit.sh — every Go test of the main module on the host. Tests that need
# root run here when we are root (CI is); kernel-only tests run in the VM via
# test-kernel.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Controller tests (node/kubernetes/...) and test/launch run a real control
# plane. Build (or find cached) the Kubernetes binaries first, so that no test
# binary spends its 10-minute timeout on a cold build; the launcher's path
# setup also checks for the CNI plugins, and build/nodeimage's tests use
# busybox-static as a static program.
build/scripts/apt-install.sh containernetworking-plugins busybox-static
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
export PLINTH_K8S_BIN
go test -count=1 ./...
