#!/usr/bin/env bash
# csi-sanity.sh — builds (once, cached) the csi-sanity binary that every
# target running the CSI conformance suite uses, and prints its path: one
# place pins its version.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec build/scripts/go-tool.sh github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.6.0
