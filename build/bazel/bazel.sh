#!/usr/bin/env bash
# bazel.sh COMMAND [ARGS...] — runs Debian's Bazel 4.2.3 the way Plinth's
# scripts do, e.g. `build/bazel/bazel.sh test //pkg/...`.
#
# Everything Bazel keeps lives under $PLINTH_CACHE/bazel-<version>/:
#   root/   --output_user_root: server install, per-checkout output bases
#           (fetched external repositories, compiled actions)
#   repo/   --repository_cache: downloads by sha256 (Go SDK, rules_go, gazelle)
#   disk/   --disk_cache: action outputs shared between checkouts, so a second
#           clone of the repository reuses the first one's compiled packages
#           (off in CI, where nothing survives the run; PLINTH_BAZEL_DISK_CACHE=0/1
#           overrides)
# go_repository rules reuse the host's Go module cache and build cache
# (GO_REPOSITORY_USE_HOST_CACHE), which `make test-unit` has already filled.
#
# The server exits after PLINTH_BAZEL_IDLE seconds without work (default 300);
# test.sh shuts it down right away in CI.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=/usr/local/go/bin:$PATH

"$repo/build/scripts/apt-install.sh" bazel-bootstrap bazel-skylib bazel-platforms \
	bazel-rules-java bazel-rules-proto gcc libc6-dev

cache=${PLINTH_CACHE:-$HOME/.cache/plinth}
bazel_version=$(dpkg-query -W -f='${Version}' bazel-bootstrap)
base="$cache/bazel-${bazel_version%%+*}"
mkdir -p "$base/root" "$base/repo" "$base/disk"

# Read by gazelle's go_repository_cache (GOMODCACHE/GOCACHE of the host).
export GO_REPOSITORY_USE_HOST_CACHE=1
# Repository rules fetch through this proxy (build/bazel/goproxy.bzl).
export GOPROXY=${GOPROXY:-$(go env GOPROXY)}

[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

# The Bazel server outlives this command and inherits our open files. A
# caller's `flock /tmp/plinth-bigbuild.lock` descriptor would keep that lock
# held by an idle server for minutes, so pass nothing but stdio along. (The
# caller's own descriptor still holds its lock.)
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] && [ "$fd" -lt 255 ] && eval "exec $fd>&-" 2>/dev/null || true
done

cmd=$1
shift
startup=(
	--nohome_rc
	--output_user_root="$base/root"
	--max_idle_secs="${PLINTH_BAZEL_IDLE:-300}"
)
case "$cmd" in
build | test | run | cquery | aquery | coverage)
	disk=(--disk_cache="$base/disk")
	# CI starts from nothing every time, so there the disk cache only costs
	# writes (about 1.5 GB); developers with several checkouts gain from it.
	default_disk=1
	[ -n "${CI:-}" ] && default_disk=0
	[ "${PLINTH_BAZEL_DISK_CACHE:-$default_disk}" = 0 ] && disk=()
	exec bazel "${startup[@]}" "$cmd" --repository_cache="$base/repo" "${disk[@]}" "$@"
	;;
query | fetch | sync)
	exec bazel "${startup[@]}" "$cmd" --repository_cache="$base/repo" "$@"
	;;
*)
	exec bazel "${startup[@]}" "$cmd" "$@"
	;;
esac
