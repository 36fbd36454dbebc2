#!/usr/bin/env bash
# image.sh — builds the container image of plinth-node that deploy/ runs (or
# finds it in the cache) and prints the path of its OCI archive, under
# $PLINTH_CACHE/images/, named by its content. Load it with
#   ctr -n k8s.io images import <archive>      (containerd)
#   kind load image-archive <archive>          (kind)
# The builder is build/containerimage; the image holds the static binary only.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
: "${PLINTH_CACHE:=$HOME/.cache/plinth}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# -trimpath and no symbol table: the same sources give the same bytes, so
# the same image digest, from any checkout.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/plinth-node" ./node/cmd/plinth-node
go run ./build/containerimage -binary "$work/plinth-node" -dir "$PLINTH_CACHE/images"
