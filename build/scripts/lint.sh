#!/usr/bin/env bash
# lint.sh — gofmt, go vet and staticcheck over the main module.
set -euo pipefail
cd "$(dirname "$0")/../.."
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^third_party/') 2>&1 || true)
if [ -n "$unformatted" ]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi
# go.mod is the source of truth (Bazel's deps are generated from it), so it
# must be tidy: builds run with -mod=readonly and would fail on a missing
# requirement anyway, this names the fix.
if ! diff=$(go mod tidy -diff 2>&1); then
	echo "lint: go.mod/go.sum are not tidy; run \`go mod tidy\` (then \`make gazelle\`):" >&2
	echo "$diff" >&2
	exit 1
fi
go vet ./...
staticcheck=$(build/scripts/go-tool.sh honnef.co/go/tools/cmd/staticcheck@v0.8.2)
"$staticcheck" ./...
echo "lint: ok"
