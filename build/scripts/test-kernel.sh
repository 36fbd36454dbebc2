#!/usr/bin/env bash
# test-kernel.sh [TEST-ARGS...] — runs every kernel test against a real kernel.
#
# A package has kernel tests when a _test.go file calls ktest.Main (see
# build/ktest). Each such package is tested twice:
#   1. on the host, as root (loop devices work on any kernel; tests that need
#      the VM skip here via ktest.RequireVM), and
#   2. inside a qemu micro-VM booting the pinned Debian cloud kernel, with
#      fresh XFS/ext4 disks mounted with prjquota (build/ktest/cmd/ktest).
# Any failure, and a VM that does not boot or report, fails the target.
# TEST-ARGS go to the test binaries in both runs, e.g. -test.run=Quota.
set -euo pipefail
cd "$(dirname "$0")/../.."

build/scripts/apt-install.sh qemu-system-x86 xfsprogs e2fsprogs lz4 util-linux
kernel=$(build/ktest/kernel.sh)
modules=$(echo "$kernel"/lib/modules/*)

mapfile -t pkgs < <(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -l 'ktest\.Main(' | xargs -n1 dirname | sort -u | sed 's|^|./|')
if [ ${#pkgs[@]} -eq 0 ]; then
	echo "test-kernel: no package calls ktest.Main; nothing would be tested" >&2
	exit 1
fi
echo "test-kernel: packages with kernel tests: ${pkgs[*]}" >&2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Host run. go test's own flags can't mix with test binary flags here, so
# pass TEST-ARGS through -args.
if [ "$(id -u)" -ne 0 ] && [ "${CI:-}" = true ]; then
	echo "test-kernel: must run as root in CI" >&2
	exit 1
fi
echo "test-kernel: host run ($(uname -r))" >&2
go test -count=1 "${pkgs[@]}" -args "$@"

# VM run: static binaries, since the VM has no libc. The runner doubles as
# the VM's /init, so it is static too.
CGO_ENABLED=0 go build -o "$work/ktest" ./build/ktest/cmd/ktest
tests=()
for p in "${pkgs[@]}"; do
	name=$(echo "${p#./}" | tr / _).test
	CGO_ENABLED=0 go test -c -o "$work/$name" "$p"
	tests+=("$work/$name")
done
echo "test-kernel: VM run ($(basename "$modules"))" >&2
"$work/ktest" -kernel "$kernel/vmlinux" -modules "$modules" "${tests[@]}" -- "$@"
