#!/usr/bin/env bash
# bench.sh — `make bench`: runs every benchmark of the project, the Go
# benchmarks of the tree and then the cluster benchmark programs
# (bench/<noun>), and renders all their figures into one table, printed at
# the end and written with a plot per benchmark to bench/results/<date>.md
# (bench/report). Each figure stands beside a baseline measured in the same
# run; ratios between sizes of the same work ("flat in N") are printed too.
#
# Expected total: printed up front, from the per-section figures below
# (EXPECTED_MIN for the Go benchmarks, the minutes in CLUSTER for each
# program), about 250 minutes on the 2-core machine this is developed on.
# Every section's time is printed in a table at the end. A run that takes
# longer than its budget fails (BENCH_BUDGET, default twice the expected
# total): a benchmark that grew past its budget is a bug, as `make bench` is
# meant to be run.
#
# Every `func Benchmark` in the tree must be run by an entry below, and
# every entry must run one; the script checks both before it starts. An
# entry is
#   "PACKAGE BENCH-REGEXP [OPTION...]"
# with the options
#   base=IMPL      the sub-benchmark "impl=IMPL" is the baseline the other
#                  "impl=..." sub-benchmarks of the same parent are compared
#                  with; it must have run, or the entry fails.
#   flat=KEY       sub-benchmarks "KEY=N" measure the same work beside N
#                  other objects; the time at the largest N is divided by
#                  the time at the smallest (goal: about 1).
#   benchtime=T    -benchtime for this entry (default $BENCHTIME or 1s).
#                  One-shot benchmarks, whose single op is a whole
#                  measurement reported in custom metrics, use 1x.
#   count=N        -count for this entry: the report's runs, of which it
#                  shows median and spread (default $BENCH_COUNT or 5; long
#                  one-shot measurements run fewer).
#   vm             run in the kernel test VM (test/ktest), for code that
#                  needs kernel features the host lacks.
#   controlplane   with vm: the VM also gets the control plane's binaries
#                  and a static plinth-node, as test-kernel.sh gives the
#                  controller tests (build/scripts/ktest-controlplane.sh).
# A benchmark that skips fails its entry: a skipped benchmark is a number
# silently missing from the report. How each benchmark's lines become the
# report's series and baselines is bench/report/gobench.go.
#
# CLUSTER lists the cluster benchmark programs, each run as
# `bench/<noun> -out DIR [-quick]` after the Go benchmarks; each writes its
# results (bench/result) into DIR, where the Go benchmarks' converted
# results are too. An entry may run a program with flags under a name of
# its own (see CLUSTER).
#
# Environment:
#   BENCH_ONLY    an extended regexp: run only the Go entries whose line,
#                 and the cluster entries whose "bench/<name>", it matches
#                 (datapath matches datapath-vm and datapath-fs too;
#                 ^bench/datapath$ only the one)
#   BENCH_QUICK=1 a smoke test: Go benchmarks with one run each, cluster
#                 programs with -quick (each under ~3 minutes); the report
#                 says it is a quick run
#   BENCH_COUNT   the default -count (5)
#   BENCHTIME     the default -benchtime (1s)
#   BENCH_BUDGET  the time limit of the whole run (seconds, or e.g. 90m)
#   BENCH_RESULTS where the report goes (default bench/results)
#   BENCH_RUN     a directory that keeps the run's finished sections, so
#                 that a run can take more than one sitting: started again
#                 with the same BENCH_RUN, it skips every section that
#                 ended ok there and runs the rest (a failed or unfinished
#                 one again). A run resumes only at the code it started at
#                 (the commit may differ, but only under bench/results) and
#                 with the same settings (BENCH_ONLY, BENCH_QUICK,
#                 BENCH_COUNT, BENCHTIME, the copy sizes); the report names
#                 the first sitting's commit and date, and its times are
#                 every sitting's. Default: a fresh directory, one sitting.
#   BENCH_STOP_BY a time (anything date -d reads, e.g. 09:20): the sitting
#                 leaves every section that would not end by then at its
#                 expected length to a later one and ends with exit status
#                 3 (needs BENCH_RUN, which the next sitting goes on from)
#   PLINTH_BENCH_OUT  keeps the Go benchmarks' raw output (benchstat format)
#   PLINTH_SNAPSHOT_BENCH_GIB, PLINTH_SNAPSHOT_BENCH_FILES  the copy
#                 benchmarks' sizes (default 1,10 GiB and 100,000 files)
set -euo pipefail
cd "$(dirname "$0")/../.."

# The sizes of the copy benchmarks (node/core/volume/snapshot_bench_test.go).
export PLINTH_SNAPSHOT_BENCH_GIB="${PLINTH_SNAPSHOT_BENCH_GIB:-1,10}"
export PLINTH_SNAPSHOT_BENCH_FILES="${PLINTH_SNAPSHOT_BENCH_FILES:-100000}"

ENTRIES=(
	# 500 PVCs to Bound, provisioner vs a bare client with the same QPS and
	# burst, both in each op (custom metric ratio-Bound; goal >= 0.7).
	"./node/kubernetes/provisioner Provision500 benchtime=1x count=1"
	# plinth-node's RSS per foreign PVC (10,000 of them), beside a plain
	# client-go informer on the same claims (ratio-rss-*; goal < 2 KiB).
	"./node/kubernetes/provisioner ForeignClaimsRSS benchtime=1x count=1"
	# Claim patch to new size visible on the published device, 20 resizes
	# per op, beside the kube-controller-manager's own reaction to the same
	# patches (ms-*-median/p90, ratio-visible/kcm).
	"./node/kubernetes/resizer ResizeBlock benchtime=1x"
	# The same for a filesystem claim, its size as statfs of the volume's
	# directory shows it: only enforced project quotas make it visible, so
	# in the kernel VM, under TCG (goal for both: median < 1 s).
	"./node/kubernetes/resizer ResizeFilesystem benchtime=1x count=3 vm controlplane"
	# Loop device attach+free: the library against losetup, beside 0 and
	# 200 other devices (goal: 10x faster, flat).
	"./pkg/loop CreateRemove base=losetup flat=existing"
	# Block publish+unpublish pair against the bare kernel work, beside 0
	# and 200 other publications (goal: < 5 ms, flat).
	"./node/kubernetes/csi PublishUnpublishBlock base=floor flat=published"
	# A state record's atomic write against a plain write with fsync.
	"./node/core/localstorage Write base=fsync"
	# A log line, without and with readers streaming.
	"./pkg/logtree Info"
	# Project quota on a new directory against one metadata change (chmod).
	"./pkg/fsquota SetQuota base=chmod vm"
	# A writer in a filesystem volume, with the quota watch running and
	# without (the baseline): one file rewritten, and 10,000 files in
	# turn (issue 37; about 1 min in the VM with 3 runs).
	"./node/core QuotaWatchWriteCost base=unwatched count=3 vm"
	# Volume usage from the quota against walking 100,000 files (goal:
	# 1000x faster), and the quota audit's walk of the same files. One
	# run: each makes the 100,000 files anew, in the VM.
	"./node/kubernetes/csi VolumeStats base=quota count=1 vm"
	# A block volume's snapshot and restore (one FICLONE each) against a
	# full copy of its written image, 1 and 10 GiB (issue 39), on a
	# loop-mounted XFS (goal: under 50 ms, flat in the size; about 21 GiB
	# of host disk while the 10 GiB copy runs; PLINTH_SNAPSHOT_BENCH_GIB
	# sets the sizes, e.g. 1,4 on a smaller disk).
	"./node/core/volume BlockCopies base=cp flat=gib benchtime=3x count=3"
	# A filesystem volume's snapshot and restore (one FICLONE per file)
	# against cp -a of its 100,000 files of 4 KiB (issue 39; goal: in
	# proportion to the files, not their bytes; PLINTH_SNAPSHOT_BENCH_FILES).
	"./node/core/volume FilesystemCopies base=cp benchtime=3x count=3"
	# A Create beside 1,000 and 10,000 volumes against one exact
	# measurement of their promise, which each Create paid before the
	# promise ledger (goal: flat in the volumes; about 30 s a run, most
	# of it making the 10,000 volumes).
	"./node/core/volume CreateAmong base=measure flat=volumes count=3"
)

# Measured total of the Go benchmarks here, with -count 5; keep it current
# when adding an entry (the per-entry table shows what each costs).
EXPECTED_MIN=22

# The cluster benchmark programs, "NAME MINUTES [NOUN FLAG...]": bench/<noun>
# (NOUN defaults to NAME) is run with -out DIR and the FLAGs, after the Go
# benchmarks; MINUTES is what a full run of it takes here (with
# BENCH_QUICK=1 each takes at most 3). A program listed here that does not
# exist fails the run before anything is measured.
CLUSTER=(
	# Claims to Running: Plinth, local-path-provisioner, emptyDir (issue
	# 14.1). The program prints 60 min: 5 runs per point (3 at N = 200),
	# local-path 3 (1 at N = 200, where its run takes about 10 min).
	"provisioning 60"
	# Block volumes at density, patched against upstream kubelet (14.2):
	# 6.5 min measured.
	"density 7"
	# plinth-node's RSS and CPU against local-path-provisioner's (14.4):
	# about 7 min with 2 runs measured, 10 with the default 3.
	"footprint 10"
	# Many provisioners against one control plane (14.5, 35): 27.5 min
	# measured (10, 50, 100 and 200 instances, 3 rounds each, every claim
	# provisioned first by the whole fleet, registered nodes, settled RSS).
	"fleet 35"
	# plinth-node killed and restarted with 1,000 and 10,000 volumes, half
	# published (40.3): time to ready and to every publication checked;
	# 29 s measured (7 min before the promise ledger made a Create's room
	# check independent of the volumes: most of it making the 10,000).
	"restart 1"
	# fio in a pod on a filesystem claim (runc, gVisor) and a block claim,
	# against the same fio in a pod on a hostPath of the same data
	# filesystem, and the node's own (40.1): 5 rounds of 6 workloads on 8
	# targets, each job 4 s (16m40s measured with 7 targets).
	"datapath 19"
	# The same on the VM node's virtio disk, under TCG (40.1): the six
	# in-pod targets, no node floors, 5 rounds of jobs of 0.5 s ramp and
	# 1.5 s measured (a pod starts and ends in about 10 s under TCG):
	# 11m44s measured with 5 targets.
	"datapath-vm 14 datapath -node vm -ramp 500ms -runtime 1500ms"
	# The filesystem volume against its two in-pod floors alone, 30
	# rounds (40.1): 5 rounds cannot tell 0.97 of the floor from 1.00 on
	# this disk (one round's ratio ranges 0.6-1.7), 30 narrow the
	# median's 95% interval to the 10th-21st of the rounds' ratios.
	# 3 targets, jobs of 4 s, even rounds reversed: 42m45s measured.
	"datapath-fs 45 datapath -targets floor-dir-pod,filesystem-runc,floor-volfile-pod -rounds 30 -label rounds30"
	# The VM node rebooted cleanly and by a power cut under a pod reading
	# its claims, beside the same pod on an emptyDir (40.4): time to the
	# pod's first byte, by phase: 20 reboots of about 25 s, 8.3 min
	# measured (2.9 with -quick); a reboot that hangs adds about 4.
	"reboot 12"
	# fio at queue depth 1 in a pod on the VM node, with the quota audit
	# walking a volume of 1,000,000 files and without (40.2): the fill
	# (7.5 min), a wait for the audit's tick (0 to 13 min), one walk at
	# its rate limit (8.3 min): 14 min measured at 500,000 files.
	"audit 30"
)

quick=${BENCH_QUICK:-}
[ "$quick" = 1 ] || [ -z "$quick" ] || { echo "bench: BENCH_QUICK=$quick: want 1 or nothing" >&2; exit 1; }
count=${BENCH_COUNT:-5}
benchtime=${BENCHTIME:-1s}
results_out=${BENCH_RESULTS:-bench/results}
work=$(mktemp -d)
# nodebin: the VM's plinth-node, for controlplane entries (below).
nodebin=
trap 'rm -rf "$work" "$nodebin"' EXIT
out=${PLINTH_BENCH_OUT:-$work/bench.txt}
: >"$out"

# dur SECONDS prints 1m05s.
dur() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# --- Every benchmark has an entry, every entry a benchmark. ---------------
mapfile -t funcs < <(git ls-files --cached --others --exclude-standard '*_test.go' | grep -v '^third_party/' |
	xargs grep -H '^func Benchmark' | sed -E 's|^(.*)/[^/]*:func (Benchmark[A-Za-z0-9_]*).*|./\1 \2|' | sort -u)
problems=()
for f in "${funcs[@]}"; do
	read -r fpkg fname <<<"$f"
	covered=
	for entry in "${ENTRIES[@]}"; do
		read -r pkg re _ <<<"$entry"
		if [ "$pkg" = "$fpkg" ] && grep -Eq -- "$re" <<<"$fname"; then covered=1; fi
	done
	[ -n "$covered" ] || problems+=("$fpkg $fname has no entry in ENTRIES")
done
for entry in "${ENTRIES[@]}"; do
	read -r pkg re _ <<<"$entry"
	hit=
	for f in "${funcs[@]}"; do
		read -r fpkg fname <<<"$f"
		if [ "$pkg" = "$fpkg" ] && grep -Eq -- "$re" <<<"$fname"; then hit=1; fi
	done
	[ -n "$hit" ] || problems+=("entry \"$entry\" matches no func Benchmark in $pkg")
done
if [ ${#problems[@]} -gt 0 ]; then
	printf 'bench: %s\n' "${problems[@]}" >&2
	exit 1
fi

# A Go entry's share of the Go benchmarks' time, at least a minute: what
# BENCH_STOP_BY and the time left count for each.
go_entry_min=$(((EXPECTED_MIN + ${#ENTRIES[@]} - 1) / ${#ENTRIES[@]}))
if [ -n "${BENCH_ONLY:-}" ]; then
	only=()
	for entry in "${ENTRIES[@]}"; do
		if grep -Eq -- "$BENCH_ONLY" <<<"$entry"; then only+=("$entry"); fi
	done
	only_cluster=()
	for c in "${CLUSTER[@]}"; do
		if grep -Eq -- "$BENCH_ONLY" <<<"bench/${c%% *}"; then only_cluster+=("$c"); fi
	done
	[ $((${#only[@]} + ${#only_cluster[@]})) -gt 0 ] || { echo "bench: BENCH_ONLY=$BENCH_ONLY matches no entry and no cluster program" >&2; exit 1; }
	ENTRIES=("${only[@]}")
	CLUSTER=("${only_cluster[@]}")
fi

# --- The run's directory: one sitting, or one of several (BENCH_RUN). ----------
# code_tree prints a hash of HEAD's files outside bench/results, or nothing
# when the work tree has changes outside it: what a run measures is the
# code, and a sitting's commit of results must not stop the next one.
code_tree() {
	[ -z "$(git status --porcelain -- . ':(exclude)bench/results')" ] || return 0
	git ls-tree -r HEAD | grep -v $'\tbench/results/' | sha256sum | cut -d' ' -f1
}
run_dir=${BENCH_RUN:-$work/run}
mkdir -p "$run_dir/sections"
run_dir=$(cd "$run_dir" && pwd)
code=$(code_tree)
head=$(git rev-parse HEAD)
settings="only=${BENCH_ONLY:-} quick=$quick count=$count benchtime=$benchtime copies=$PLINTH_SNAPSHOT_BENCH_GIB/$PLINTH_SNAPSHOT_BENCH_FILES"
if [ -f "$run_dir/started" ]; then
	# "COMMIT DATE CODE" of the first sitting, then its settings.
	{
		read -r commit run_date started_code
		IFS= read -r started_settings || true
	} <"$run_dir/started"
	if [ -z "$code" ] || [ "$code" != "$started_code" ]; then
		echo "bench: BENCH_RUN=$run_dir was started at $commit; the code differs from it now (only bench/results may, and nothing may be uncommitted): check that commit out, or start a new run in a new directory" >&2
		exit 1
	fi
	if [ "$settings" != "$started_settings" ]; then
		echo "bench: BENCH_RUN=$run_dir was started with $started_settings, not $settings" >&2
		exit 1
	fi
	echo "bench: going on with the run started at $commit on $run_date (BENCH_RUN=$run_dir)" >&2
else
	# The commit measured is the one the run starts at; the report adds
	# the tree's at its end if that differs (bench/report, commitLine).
	commit=$head
	[ -n "$code" ] || commit="$commit + uncommitted changes"
	run_date=$(date -u +%F)
	if [ -n "${BENCH_RUN:-}" ] && [ -z "$code" ]; then
		echo "bench: BENCH_RUN: a run of uncommitted changes cannot be resumed; commit them first" >&2
		exit 1
	fi
	printf '%s %s %s\n%s\n' "$commit" "$run_date" "$code" "$settings" >"$run_dir/started"
fi
stop_by=
if [ -n "${BENCH_STOP_BY:-}" ]; then
	[ -n "${BENCH_RUN:-}" ] || { echo "bench: BENCH_STOP_BY needs BENCH_RUN, for the next sitting to go on from" >&2; exit 1; }
	stop_by=$(date -d "$BENCH_STOP_BY" +%s) || { echo "bench: BENCH_STOP_BY=$BENCH_STOP_BY: not a time" >&2; exit 1; }
fi
# section NAME prints the directory of the run's section NAME (a Go entry
# or bench/<program>): its status ("ok" or "FAIL ..."), its row of the
# time table, its seconds, and what it measured (bench.txt and ratios.txt
# of a Go entry, results/ of a program).
section() { echo "$run_dir/sections/$(printf '%s' "${1#./}" | tr -c 'A-Za-z0-9._-' '_')"; }
# done_before NAME: the section ended ok in this run, in an earlier sitting.
done_before() { [ "$(cat "$(section "$1")/status" 2>/dev/null)" = ok ]; }
# begin NAME MINUTES makes NAME's section anew, or leaves it to a later
# sitting when BENCH_STOP_BY comes before MINUTES from now (a shorter
# section after it may still fit).
begin() {
	if [ -n "$stop_by" ] && [ $(($(date +%s) + 60 * $2)) -gt "$stop_by" ]; then
		echo "bench: leaving $1 (about $2 min) to a later sitting, to end by $BENCH_STOP_BY" >&2
		stopped=1
		return 1
	fi
	rm -rf "$(section "$1")"
	mkdir -p "$(section "$1")"
}
stopped=
pending_entries=()
for entry in "${ENTRIES[@]}"; do
	done_before "$entry" || pending_entries+=("$entry")
done
pending_cluster=()
for c in "${CLUSTER[@]}"; do
	done_before "bench/${c%% *}" || pending_cluster+=("$c")
done
if [ ${#pending_entries[@]} -lt ${#ENTRIES[@]} ] || [ ${#pending_cluster[@]} -lt ${#CLUSTER[@]} ]; then
	echo "bench: $((${#ENTRIES[@]} - ${#pending_entries[@]})) Go entries and $((${#CLUSTER[@]} - ${#pending_cluster[@]})) programs ended ok in an earlier sitting; running ${#pending_entries[@]} and ${#pending_cluster[@]}" >&2
fi

# --- Expected time and budget. -------------------------------------------------
expected_go=$((${#ENTRIES[@]} * go_entry_min))
[ "$expected_go" -le "$EXPECTED_MIN" ] || expected_go=$EXPECTED_MIN
expected_cluster=0
for c in "${CLUSTER[@]}"; do
	read -r noun minutes _ <<<"$c"
	[ -n "$minutes" ] || { echo "bench: CLUSTER entry \"$c\": want NAME MINUTES [NOUN FLAG...]" >&2; exit 1; }
	[ -z "$quick" ] || minutes=3
	expected_cluster=$((expected_cluster + minutes))
done
if [ -n "$quick" ]; then
	count=1
	expected_go=$(((expected_go + 2) / 3))
	go_entry_min=1
fi
expected=$((expected_go + expected_cluster))
# What is left of the run (the Go entries' shares, rounded up, at most
# their whole).
left=$((${#pending_entries[@]} * go_entry_min))
[ "$left" -le "$expected_go" ] || left=$expected_go
for c in "${pending_cluster[@]}"; do
	read -r noun minutes _ <<<"$c"
	[ -z "$quick" ] || minutes=3
	left=$((left + minutes))
done
budget=${BENCH_BUDGET:-$((2 * expected + 5))m}
case $budget in
*m) budget=$((${budget%m} * 60)) ;;
*s) budget=${budget%s} ;;
esac
echo "bench: expected about $((expected))m (Go benchmarks ${expected_go}m, ${#CLUSTER[@]} cluster programs ${expected_cluster}m), budget $(dur "$budget")${quick:+ (quick run)}" >&2
[ "$left" -eq "$expected" ] || echo "bench: about ${left}m of it left" >&2

# --- Tools, before the first entry. -------------------------------------------
# The report and the cluster programs are built first: a program that is
# missing or does not build fails the run now, not after an hour.
command -v go >/dev/null || { echo "bench: no go on PATH (/usr/local/go/bin)" >&2; exit 1; }
mkdir -p "$work/bin" "$work/results"
go build -o "$work/bin/report" ./bench/report
# program ENTRY prints the entry's program, its NOUN or else its NAME;
# flags ENTRY its FLAGs, one a line.
program() {
	local name minutes noun
	read -r name minutes noun _ <<<"$1"
	echo "${noun:-$name}"
}
flags() {
	local name minutes noun rest
	read -r name minutes noun rest <<<"$1"
	[ -z "$rest" ] || printf '%s\n' $rest
}
for c in "${pending_cluster[@]}"; do
	noun=$(program "$c")
	[ -d "bench/$noun" ] || { echo "bench: cluster program bench/$noun (in CLUSTER) does not exist" >&2; exit 1; }
	go build -o "$work/bin/$noun" "./bench/$noun"
done
# util-linux: losetup, the loop benchmark's baseline; qemu and iproute2:
# bench/reboot's VM node. The Kubernetes binaries are built (or found
# cached) now, not inside the first entry.
build/scripts/apt-install.sh util-linux containernetworking-plugins qemu-system-x86 iproute2
PLINTH_K8S_BIN=$(third_party/kubernetes/build.sh)
# The snapshot API (CRDs and snapshot-controller) every cluster has.
PLINTH_SNAPSHOT_BIN=$(third_party/snapshotter/build.sh)
export PLINTH_SNAPSHOT_BIN
export PLINTH_K8S_BIN
# bench/datapath's fio (on the node and in its pods' image) and gVisor
# (its pods of RuntimeClass gvisor).
for c in "${pending_cluster[@]}"; do
	[ "$(program "$c")" = datapath ] || continue
	build/scripts/apt-install.sh fio
	PLINTH_GVISOR_BIN=$(third_party/gvisor/build.sh)
	export PLINTH_GVISOR_BIN
done
# bench/audit's pods run this host's fio too, in the VM node.
for c in "${pending_cluster[@]}"; do
	[ "${c%% *}" = audit ] || continue
	build/scripts/apt-install.sh fio
done
vm_ready=
cp_args=()
vm_setup() {
	[ -n "$vm_ready" ] && return
	build/scripts/apt-install.sh qemu-system-x86 xfsprogs e2fsprogs lz4
	kernel=$(test/ktest/kernel.sh)
	modules=$(echo "$kernel"/lib/modules/*)
	CGO_ENABLED=0 go build -o "$work/ktest" ./test/ktest/cmd/ktest
	vm_ready=1
}
for entry in "${pending_entries[@]}"; do
	case " $entry " in *" vm "*) vm_setup ;; esac
	case " $entry " in *" controlplane "*)
		if [ ${#cp_args[@]} -eq 0 ]; then
			. build/scripts/ktest-controlplane.sh
			ktest_controlplane cp_args nodebin
		fi
		;;
	esac
done
setup=$SECONDS

# --- Ratios of one entry's results. -------------------------------------------
# ratios FILE BASE FLAT prints the entry's ratios and fails when its
# baseline did not run.
ratios() {
	awk -v base="$2" -v flat="$3" '
		function fmt(r) { return r < 100 ? sprintf("%.3g", r) : sprintf("%.0f", r) }
		/^Benchmark[^ \t]*[ \t]+[0-9]+[ \t]/ {
			name = $1; sub(/-[0-9]+$/, "", name)
			for (i = 3; i < NF; i += 2) {
				unit = $(i + 1)
				# Ratios a benchmark computes itself from a baseline
				# in each op.
				if (unit ~ /^ratio-/) printf "  %s %s: %s\n", name, unit, $i
			}
			if ($4 != "ns/op") next
			if (base != "" && (i = index(name, "/impl="))) {
				parent = substr(name, 1, i - 1); impl = substr(name, i + 6)
				if (!cnt[parent, impl]++) impls[parent] = impls[parent] " " impl
				sum[parent, impl] += $3
			}
			if (flat != "" && match(name, "/" flat "=[0-9]+")) {
				n = substr(name, RSTART + length(flat) + 2, RLENGTH - length(flat) - 2) + 0
				group = substr(name, 1, RSTART) flat "=*" substr(name, RSTART + RLENGTH)
				if (!fcnt[group, n]++) { groups[group] = 1; if (!(group in lo) || n < lo[group]) lo[group] = n; if (!(group in hi) || n > hi[group]) hi[group] = n }
				fsum[group, n] += $3
			}
		}
		END {
			bad = 0
			if (base != "" && length(impls) == 0) { print "bench: no impl=... sub-benchmarks ran, so no baseline ratio" > "/dev/stderr"; bad = 1 }
			for (p in impls) {
				if (!cnt[p, base]) { printf "bench: %s: the baseline impl=%s did not run\n", p, base > "/dev/stderr"; bad = 1; continue }
				bt = sum[p, base] / cnt[p, base]
				m = split(impls[p], list, " ")
				others = 0
				for (i = 1; i <= m; i++) if (list[i] != base) {
					others++
					t = sum[p, list[i]] / cnt[p, list[i]]
					if (t < bt) { r = bt / t; how = "faster" } else { r = t / bt; how = "slower" }
					printf "  %s: impl=%s %.0f ns/op vs impl=%s %.0f ns/op: %s times %s\n", p, list[i], t, base, bt, fmt(r), how
				}
				if (!others) { printf "bench: %s: only the baseline ran\n", p > "/dev/stderr"; bad = 1 }
			}
			if (flat != "" && length(groups) == 0) { printf "bench: no %s=N sub-benchmarks ran, so no flatness ratio\n", flat > "/dev/stderr"; bad = 1 }
			for (g in groups) {
				if (lo[g] == hi[g]) { printf "bench: %s: only %s=%d ran\n", g, flat, lo[g] > "/dev/stderr"; bad = 1; continue }
				tl = fsum[g, lo[g]] / fcnt[g, lo[g]]; th = fsum[g, hi[g]] / fcnt[g, hi[g]]
				printf "  %s: %s=%d / %s=%d: %.0f / %.0f ns/op = %.2f (flat: about 1)\n", g, flat, hi[g], flat, lo[g], th, tl, th / tl
				# With a baseline, the same ratio of the time relative
				# to the baseline: growth of our own work, apart from
				# what the kernel does slower beside N objects.
				if (base != "" && (i = index(g, "/impl=")) && substr(g, i + 6) != base) {
					bg = substr(g, 1, i + 5) base
					if ((bg, lo[g]) in fcnt && (bg, hi[g]) in fcnt) {
						bl = fsum[bg, lo[g]] / fcnt[bg, lo[g]]; bh = fsum[bg, hi[g]] / fcnt[bg, hi[g]]
						printf "  %s: %s=%d / %s=%d relative to impl=%s: %.3g / %.3g = %.2f (flat: about 1)\n", g, flat, hi[g], flat, lo[g], base, th / bh, tl / bl, (th / bh) / (tl / bl)
					}
				}
			}
			exit bad
		}' "$1" | sort
}

# --- Run. ---------------------------------------------------------------------
# Each section keeps what it measured in its directory of the run
# (section); the sitting's setup time goes beside them.
echo "$setup" >>"$run_dir/setup-seconds"
for entry in "${pending_entries[@]}"; do
	read -r pkg re opts <<<"$entry"
	base= flat= bt=$benchtime n=$count where=host withcp=
	for o in $opts; do
		case $o in
		base=*) base=${o#base=} ;;
		flat=*) flat=${o#flat=} ;;
		benchtime=*) bt=${o#benchtime=} ;;
		count=*) [ -n "$quick" ] || n=${o#count=} ;;
		vm) where=vm ;;
		controlplane) withcp=1 ;;
		*)
			echo "bench: entry \"$entry\": unknown option $o" >&2
			exit 1
			;;
		esac
	done
	if [ -n "$withcp" ] && [ $where != vm ]; then
		echo "bench: entry \"$entry\": controlplane needs vm" >&2
		exit 1
	fi
	begin "$entry" "$go_entry_min" || continue
	sec=$(section "$entry")
	log="$work/entry.log"
	echo "bench: $pkg -bench $re -benchtime $bt -count $n ($where)" >&2
	t0=$SECONDS
	status=0
	if [ $where = host ]; then
		# -v, so that a skipped benchmark shows ("--- SKIP").
		go test -count="$n" -v -run '^$' -bench "$re" -benchtime "$bt" "$pkg" 2>&1 | tee "$log" >&2 || status=$?
	else
		bin="$work/$(echo "${pkg#./}" | tr / _).test"
		CGO_ENABLED=0 go test -c -o "$bin" "$pkg"
		# The VM's init runs the binary with -test.v and fails it for a
		# skip (test/ktest). Strip the console's timestamps.
		vm_args=()
		[ -z "$withcp" ] || vm_args=("${cp_args[@]}")
		"$work/ktest" -kernel "$kernel/vmlinux" -modules "$modules" "${vm_args[@]}" "$bin" -- \
			-test.run='^$' -test.bench="$re" -test.benchtime="$bt" -test.count="$n" 2>&1 |
			sed -u 's/^\[ *[0-9.]*\] //' | tee "$log" >&2 || status=$?
	fi
	took=$((SECONDS - t0))
	results="$sec/bench.txt"
	grep -E '^(goos|goarch|pkg|cpu): |^Benchmark[^ 	]*[ 	]+[0-9]+[ 	]' "$log" | tr -d '\r' >"$results" || true
	verdict=ok
	if [ $status -ne 0 ]; then
		verdict="FAIL (exit $status)"
	elif grep -q -- '--- SKIP' "$log"; then
		verdict="FAIL (skipped: $(grep -- '--- SKIP' "$log" | sed 's/.*--- SKIP: //' | tr '\n' ' '))"
	elif ! grep -q '^Benchmark' "$results"; then
		verdict="FAIL (no results)"
	elif ! ratios "$results" "$base" "$flat" >"$sec/ratios.txt"; then
		verdict="FAIL (ratio missing)"
	fi
	echo "bench: $pkg $re took $(dur $took): $verdict" >&2
	printf '  %-52s %-5s %8s  %s\n' "$pkg $re" "$where" "$(dur $took)" "$verdict" >"$sec/row"
	echo "$took" >"$sec/seconds"
	echo "$verdict" >"$sec/status"
done

# --- The cluster programs. -------------------------------------------------------
for c in "${pending_cluster[@]}"; do
	name=${c%% *}
	read -r _ minutes _ <<<"$c"
	[ -z "$quick" ] || minutes=3
	begin "bench/$name" "$minutes" || continue
	sec=$(section "bench/$name")
	noun=$(program "$c")
	mapfile -t args < <(flags "$c")
	args+=(-out "$sec/results")
	[ -z "$quick" ] || args+=(-quick)
	echo "bench: bench/$name: bench/$noun ${args[*]}" >&2
	t0=$SECONDS
	status=0
	"$work/bin/$noun" "${args[@]}" >&2 || status=$?
	took=$((SECONDS - t0))
	verdict=ok
	[ $status -eq 0 ] || verdict="FAIL (exit $status)"
	echo "bench: bench/$name took $(dur $took): $verdict" >&2
	printf '  %-52s %-5s %8s  %s\n' "bench/$name" cluster "$(dur $took)" "$verdict" >"$sec/row"
	echo "$took" >"$sec/seconds"
	echo "$verdict" >"$sec/status"
done

# --- The whole run, from its sections. ------------------------------------------
# Every section's figures, in the order of ENTRIES and CLUSTER, whichever
# sitting measured them; a section that failed is reported too.
sittings=$(wc -l <"$run_dir/setup-seconds")
total=$(awk '{ s += $1 } END { print s + 0 }' "$run_dir/setup-seconds")
go_took=0
failed=0
table=("$(printf '  %-52s %-5s %8s  %s' "setup (tools, Kubernetes binaries, kernel)" "" "$(dur "$total")" "$([ "$sittings" -eq 1 ] && echo ok || echo "ok, $sittings sittings")")")
: >"$work/ratios.txt"
gather() {
	local sec
	sec=$(section "$1")
	[ -f "$sec/status" ] || return 0
	[ "$(cat "$sec/status")" = ok ] || failed=1
	table+=("$(cat "$sec/row")")
	total=$((total + $(cat "$sec/seconds")))
	[ "$2" != go ] || go_took=$((go_took + $(cat "$sec/seconds")))
	[ ! -f "$sec/bench.txt" ] || cat "$sec/bench.txt" >>"$out"
	[ ! -f "$sec/ratios.txt" ] || cat "$sec/ratios.txt" >>"$work/ratios.txt"
	! compgen -G "$sec/results/*.json" >/dev/null || cp "$sec"/results/*.json "$work/results/"
}
for entry in "${ENTRIES[@]}"; do gather "$entry" go; done
for c in "${CLUSTER[@]}"; do gather "bench/${c%% *}" cluster; done

if [ -n "$stopped" ]; then
	echo
	echo "bench: time per entry so far (BENCH_RUN=$run_dir)"
	printf '%s\n' "${table[@]}"
	echo "bench: this sitting ended at BENCH_STOP_BY with sections left; start again with BENCH_RUN=$run_dir to go on (about ${left}m was left at its start)" >&2
	exit 3
fi

if [ ${#ENTRIES[@]} -gt 0 ]; then
	echo
	echo "bench: results (raw, benchstat format: $out)"
	# (No results at all, when every entry failed, still prints the table.)
	{ grep '^Benchmark' "$out" || true; } | sed 's/^/  /'
	echo
	echo "bench: ratios measured in this run"
	cat "$work/ratios.txt"
fi

# --- The report: every figure in one table, bench/results/<date>.md. ---------------
# The Go benchmarks' output becomes results beside the cluster programs';
# whatever ran is reported, even when something failed.
echo
if grep -q '^Benchmark' "$out"; then
	"$work/bin/report" -from-gotest "$out" -results "$work/results" || { echo "bench: FAIL: converting the Go benchmarks' output" >&2; failed=1; }
fi
if compgen -G "$work/results/*.json" >/dev/null; then
	"$work/bin/report" -results "$work/results" -out "$results_out" -date "$run_date" -commit "$commit" ${quick:+-quick} || { echo "bench: FAIL: the report" >&2; failed=1; }
else
	echo "bench: FAIL: no results to report" >&2
	failed=1
fi

echo
echo "bench: time per entry"
printf '%s\n' "${table[@]}"
[ ${#ENTRIES[@]} -eq 0 ] || printf '  %-52s %-5s %8s  (expected about %dm for all entries)\n' "Go benchmarks" "" "$(dur $go_took)" "$expected_go"
printf '  %-52s %-5s %8s  (expected about %dm, budget %s)\n' total "" "$(dur $total)" "$expected" "$(dur "$budget")"
if [ "$total" -gt "$budget" ]; then
	echo "bench: FAIL: took $(dur $total), over the budget of $(dur "$budget")" >&2
	failed=1
fi
if [ $failed -ne 0 ]; then
	echo "bench: FAIL" >&2
	exit 1
fi
