#!/usr/bin/env bash
# test-unit.sh — every Go test of the main module on the host. Tests that need
# root run here when we are root (CI is); kernel-only tests run in the VM via
# test-kernel.
set -euo pipefail
cd "$(dirname "$0")/../.."
go test -count=1 ./...
