#!/usr/bin/env bash
# bench.sh — runs every benchmark of the project and prints, for benchmarks
# that measure a baseline in the same run, how many times faster we are.
#
# To add a benchmark, append a line to HOST or KERNEL:
#   "PACKAGE BENCH-REGEXP [BASELINE]"
# HOST entries run with `go test -bench` on this machine (as root in CI);
# KERNEL entries run inside the kernel test VM (build/ktest), for code that
# needs kernel features the host lacks. BASELINE names the sub-benchmark
# "impl=BASELINE" the other "impl=..." sub-benchmarks of the same parent are
# compared with.
#
# Environment: BENCHTIME (default 1s) is passed as -benchtime; the raw
# output (benchstat format) is kept in $PLINTH_BENCH_OUT if set.
set -euo pipefail
cd "$(dirname "$0")/../.."

HOST=(
	# 500 PVCs to Bound, provisioner vs a bare client with the same QPS/burst
	# (custom metric ratio-Bound, measured back to back in each op);
	# plinth-node's RSS per foreign PVC (custom metrics B/foreign-pvc-*).
	"./node/kubernetes/provisioner Provision500"
	"./node/kubernetes/provisioner ForeignClaimsRSS"
	# Claim patch to new size visible on the published device, 20 resizes
	# per op, beside the kube-controller-manager's own reaction to the same
	# patches (custom metrics ms-*-median/p90, ratio-visible/kcm).
	"./node/kubernetes/resizer ResizeBlock"
	"./pkg/loop CreateRemove losetup"
	"./node/kubernetes/csi PublishUnpublishBlock"
)
KERNEL=(
	"./pkg/fsquota SetQuota chmod"
	"./node/kubernetes/csi VolumeStats quota"
)

benchtime=${BENCHTIME:-1s}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${PLINTH_BENCH_OUT:-$work/bench.txt}
: >"$out"
baselines=()

for entry in "${HOST[@]}"; do
	read -r pkg re base <<<"$entry"
	echo "bench: $pkg -bench $re (host)" >&2
	go test -count=1 -run '^$' -bench "$re" -benchtime "$benchtime" "$pkg" | tee -a "$out"
	[ -n "${base:-}" ] && baselines+=("$base")
done

if [ ${#KERNEL[@]} -gt 0 ]; then
	build/scripts/apt-install.sh qemu-system-x86 xfsprogs e2fsprogs lz4
	kernel=$(build/ktest/kernel.sh)
	modules=$(echo "$kernel"/lib/modules/*)
	CGO_ENABLED=0 go build -o "$work/ktest" ./build/ktest/cmd/ktest
	for entry in "${KERNEL[@]}"; do
		read -r pkg re base <<<"$entry"
		echo "bench: $pkg -bench $re (VM, $(basename "$modules"))" >&2
		bin="$work/$(echo "${pkg#./}" | tr / _).test"
		CGO_ENABLED=0 go test -c -o "$bin" "$pkg"
		# Strip the runner's console timestamps so the output stays in
		# benchstat format.
		"$work/ktest" -kernel "$kernel/vmlinux" -modules "$modules" "$bin" -- \
			-test.run='^$' -test.bench="$re" -test.benchtime="$benchtime" |
			sed -u 's/^\[ *[0-9.]*\] //' | tee -a "$out"
		[ -n "${base:-}" ] && baselines+=("$base")
	done
fi

# Ratios between each impl=... sub-benchmark and its baseline sibling.
if [ ${#baselines[@]} -gt 0 ]; then
	echo
	echo "bench: time per op against the baseline measured in this run"
	awk -v bases="${baselines[*]}" '
		BEGIN { n = split(bases, b, " "); for (i = 1; i <= n; i++) isbase[b[i]] = 1 }
		/^Benchmark.*\/impl=/ && $4 == "ns/op" {
			name = $1; sub(/-[0-9]+$/, "", name)
			i = index(name, "/impl="); parent = substr(name, 1, i - 1); impl = substr(name, i + 6)
			# With -count N, average the runs.
			if (!cnt[parent, impl]++) impls[parent] = impls[parent] " " impl
			sum[parent, impl] += $3
		}
		END {
			for (p in impls) {
				m = split(impls[p], list, " ")
				for (i = 1; i <= m; i++) if (isbase[list[i]]) base = list[i]
				if (!base) continue
				for (i = 1; i <= m; i++) if (list[i] != base) {
					t = sum[p, list[i]] / cnt[p, list[i]]; bt = sum[p, base] / cnt[p, base]
					if (t < bt) { r = bt / t; how = "faster" } else { r = t / bt; how = "slower" }
					if (r < 100) rs = sprintf("%.3g", r); else rs = sprintf("%.0f", r)
					printf "  %s: impl=%s %.0f ns/op vs impl=%s %.0f ns/op: %s times %s\n",
						p, list[i], t, base, bt, rs, how
				}
				base = ""
			}
		}' "$out" | sort
fi
