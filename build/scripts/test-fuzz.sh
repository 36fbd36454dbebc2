#!/usr/bin/env bash
# test-fuzz.sh — every Go fuzz target of the main module (each
# `func FuzzX(f *testing.F)` in a _test.go file, found with grep), fuzzed
# briefly, one after the other. Their seed corpora (f.Add and
# testdata/fuzz/FuzzX/) already run with every `go test`; this looks for
# new failing inputs. A failure fails the script and names the failing
# input's file, which belongs in the repository once the bug is fixed
# (docs/testing.md).
#
# The budget is a count of inputs per target, not a time: with a time,
# Go 1.26's fuzzing coordinator can report its own deadline as a failure,
# "context deadline exceeded", when a worker is mid-input as the time runs
# out (go.dev/issue/75804, fixed in Go 1.27). The counts below make each
# target run for about 5 to 15 s on an idle 2-core machine;
# PLINTH_FUZZ_SCALE multiplies them all (0.1 for a quick look, 100 for a
# night), and PLINTH_FUZZ_ONLY (a regular expression) picks targets by
# name. -timeout bounds a run whose input hangs.
#
# FuzzValidateRequest publishes volumes with real mounts: it needs root,
# and skips without it (as its package's other tests do).
set -euo pipefail
cd "$(dirname "$0")/../.."

# Inputs per target; targets not named get default_inputs. A target whose
# inputs cost more (a request decoded and decided, a volume published)
# gets fewer.
default_inputs=100000
declare -A inputs=(
	[FuzzValidateRequest]=10000
	[FuzzValidateClaim]=5000
	[FuzzServeReview]=20000
	[FuzzAdmitObject]=20000
	[FuzzAdmitNodeWrite]=20000
)
scale=${PLINTH_FUZZ_SCALE:-1}

# package directory <TAB> target, for every fuzz target outside
# third_party (other modules).
targets=$({ git grep -o -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' ':!third_party' || true; } |
	sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1\t\2#' | sort)
if [ -z "$targets" ]; then
	echo "test-fuzz: no fuzz targets found" >&2
	exit 1
fi
only=${PLINTH_FUZZ_ONLY:-}
# A budget for a target that is gone is a stale line: say so.
for name in "${!inputs[@]}"; do
	if ! grep -q $'\t'"$name"'$' <<<"$targets"; then
		echo "test-fuzz: budget for $name, which is no fuzz target any more" >&2
		exit 1
	fi
done

log=$(mktemp /tmp/plinth-fuzz.XXXXXX)
trap 'rm -f "$log"' EXIT
start=$SECONDS
while IFS=$'\t' read -r dir name; do
	if [ -n "$only" ] && ! [[ $name =~ $only ]]; then
		continue
	fi
	n=${inputs[$name]:-$default_inputs}
	n=$(awk -v n="$n" -v s="$scale" 'BEGIN { n = int(n * s); print (n < 1 ? 1 : n) }')
	echo "test-fuzz: $name (./$dir), $n inputs" >&2
	t0=$SECONDS
	if ! go test -run='^$' -fuzz="^$name\$" -fuzztime="${n}x" -parallel=2 -timeout=5m "./$dir" >"$log" 2>&1; then
		cat "$log" >&2
		crasher=$(sed -nE 's#.*Failing input written to (testdata/fuzz/[^ ]*).*#\1#p' "$log" | head -n 1)
		if [ -n "$crasher" ]; then
			echo "test-fuzz: $name failed; its failing input is $dir/$crasher:" >&2
			cat "$dir/$crasher" >&2
			echo "test-fuzz: rerun it with: go test -run='^$name/${crasher##*/}\$' ./$dir" >&2
		else
			echo "test-fuzz: $name failed without a failing input (see above)" >&2
		fi
		exit 1
	fi
	echo "test-fuzz: $name: ok in $((SECONDS - t0)) s" >&2
done <<<"$targets"
echo "test-fuzz: ok in $((SECONDS - start)) s" >&2
