#!/usr/bin/env bash
# test.sh — `make test-bazel`: every Go test of the main module under Bazel.
#
#  1. Staleness check. gazelle.sh runs on a scratch copy of the checkout; if it
#     would change any BUILD.bazel or build/bazel/deps.bzl, the committed files
#     no longer match go.mod and the sources, and this fails with the diff.
#     The fix is `make gazelle`. (CI thereby catches a forgotten regeneration.)
#  2. `bazel test //...` with Debian's Bazel 4.2.3 (bazel.sh), offline except
#     for the Go module proxy. The first run on a machine downloads the Go SDK
#     and every dependency and compiles them (minutes); later runs reuse
#     $PLINTH_CACHE/bazel-4.2.3 and the host's Go module cache.
#
# Tests that need a control plane, a cluster or the kernel VM are not Bazel's
# business: Bazel runs tests with -test.short, where they skip (they run in
# `make test-unit`/`test-kernel`/`test-e2e`); a test that cannot follow that
# convention gets `tags = ["manual"],  # keep` in its BUILD file. The cluster
# tests are tagged `e2e` and filtered out here (.bazelrc); `--config=e2e`
# runs them (build/bazel/README.md). Tests that only need root run here too,
# as real root (see .bazelrc).
#
# Big cold builds: wrap the call in `flock /tmp/plinth-bigbuild.lock` on a
# shared machine. This script does not take the lock itself, so wrapping
# `make test` in it cannot deadlock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
export PATH=/usr/local/go/bin:$PATH

scratch=$(mktemp -d /tmp/plinth-gazelle-check.XXXXXX)
cleanup() {
	rm -rf "$scratch"
	# Leave no JVM behind on a CI machine; elsewhere it idles out (bazel.sh).
	if [ -n "${CI:-}" ] || [ "${PLINTH_BAZEL_SHUTDOWN:-}" = 1 ]; then
		"$here/bazel.sh" shutdown 2>/dev/null || true
	fi
}
trap cleanup EXIT

# --- 1. are the generated files up to date? ---------------------------------
# Copy what git would see (tracked and untracked-but-not-ignored files that
# exist), snapshot it in a throwaway git repository, regenerate, compare.
git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
	tar -c --null -T - -f - | tar -x -C "$scratch" -f -
gitq() { git -C "$scratch" -c user.name=check -c user.email=check@plinth.invalid "$@"; }
gitq init -q
gitq add -A
gitq commit -q -m before
if ! "$here/gazelle.sh" "$scratch" >"$scratch/.gazelle.log" 2>&1; then
	cat "$scratch/.gazelle.log" >&2
	echo "test-bazel: gazelle failed (see above)" >&2
	exit 1
fi
rm -f "$scratch/.gazelle.log"
stale=$(gitq status --porcelain --untracked-files=all)
if [ -n "$stale" ]; then
	echo "test-bazel: Bazel files are stale; gazelle would change:" >&2
	echo "$stale" >&2
	gitq add -A
	gitq diff --cached --stat >&2
	{ gitq diff --cached || true; } | head -200 >&2 || true
	echo "test-bazel: run \`make gazelle\` and commit the result." >&2
	exit 1
fi
echo "test-bazel: BUILD files and build/bazel/deps.bzl match go.mod and the sources"

# --- 2. bazel test //... ------------------------------------------------------
"$here/bazel.sh" test //... "$@"
