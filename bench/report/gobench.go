package main

import (
	"regexp"
	"strings"

	"source.plinth.dev/bench/result"
)

// Times from `go test -bench` become seconds, the report's unit for times.
const (
	nsPerOp = 1e-9
	msToS   = 1e-3
)

var (
	seconds     = result.Axis{Label: "time", Unit: "s"}
	vmNote      = "Run in the kernel-test VM (test/ktest: Debian's cloud kernel under qemu, TCG emulation, so absolute times are several times the host's), where project quotas are enforced."
	countedNote = "Each run is one `go test -bench` result (-count runs): the mean over the iterations of that run."
)

// goSpecs is how the Go benchmarks that build/scripts/bench.sh runs appear
// in the report: which lines make which series at which x, the baseline,
// and the goals their doc comments promise. A benchmark line no spec
// matches fails the conversion, as bench.sh fails for a func Benchmark
// without an entry.
var goSpecs = []goSpec{
	{
		Pkg: "source.plinth.dev/node/kubernetes/provisioner",
		Result: result.Result{
			Name: "provision-500", Title: "500 claims to Bound: provisioner against a bare client",
			Y: result.Axis{Label: "500 claims to Bound", Unit: "s"}, Baseline: "bare client",
			Goals: []string{"Bound rate at least 0.7 of the bare client's (a time ratio of at most 1.43×)"},
			Notes: []string{"A control plane (etcd, kube-apiserver, kube-controller-manager) on the host. The bare client creates the PVs itself with the provisioner's QPS and burst; the same PV controller binds both. Each run does both, alternating which goes first; the time is computed from the rate the benchmark reports (500 / claims per second)."},
		},
		Rules: []goRule{
			{Bench: regexp.MustCompile(`^Provision500$`), Metric: "bare-PVCs-Bound/s", Series: "bare client", Scale: 500, Per: true},
			{Bench: regexp.MustCompile(`^Provision500$`), Metric: "PVCs-Bound/s", Series: "plinth provisioner", Scale: 500, Per: true},
		},
	},
	copies("Block", "gib", "GiB of written image", "snapshot and restore under 50 ms, flat in the size (issue 39)",
		"CreateSnapshot (one FICLONE of the image, fsync, records) and Create FromSnapshot of a written block volume."),
	copies("Filesystem", "files", "files of 4 KiB", "in proportion to the files, not their bytes (issue 39)",
		"CreateSnapshot (a tree walk, one FICLONE per file, syncfs) and Create FromSnapshot of a filesystem volume."),
	{
		Pkg: "source.plinth.dev/node/core/volume",
		Result: result.Result{
			Name: "create-among", Title: "Create beside N volumes against one exact measurement of their promise",
			X: result.Axis{Label: "existing volumes"}, Y: seconds, Baseline: "measure",
			Goals: []string{"flat: the same time beside 10,000 volumes as beside 1,000 (making N volumes linear, not quadratic)"},
			Notes: []string{"create: Create of a 1 MiB filesystem volume (deleted again outside the timer); measure: Space, the exact measurement of every volume's promise that each Create paid before the promise ledger (node/core/volume/ledger.go). Half the existing volumes are filesystem volumes, half 1 MiB block images. On a loop-mounted XFS on the host, quotas not enforced.", countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^CreateAmong/volumes=(?P<x>\d+)/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	},
	foreignRSS("watched", "while both watch the 100,000 claims as they are created"),
	foreignRSS("restarted", "after a restart, both having listed the 100,000 claims at start"),
	resize("Block", "a block claim, size as BLKGETSIZE64 of the published device shows it, on the host", ""),
	resize("Filesystem", "a filesystem claim, size as statfs of the volume's directory shows it", vmNote),
	{
		Pkg: "source.plinth.dev/pkg/loop",
		Result: result.Result{
			Name: "loop-create-remove", Title: "Loop device attach and free: pkg/loop against losetup",
			X: result.Axis{Label: "other loop devices"}, Y: seconds, Baseline: "losetup",
			Goals: []string{"the library at least 10× faster than losetup (ratio at most 1/10×)", "flat: the same time beside 200 other devices as beside none"},
			Notes: []string{"library: Create + Detach, what losetup --find --show + --detach do; library-remove also deletes the device node each time. On the host.", countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^CreateRemove/existing=(?P<x>\d+)/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	},
	{
		Pkg: "source.plinth.dev/node/kubernetes/csi",
		Result: result.Result{
			Name: "publish-unpublish-block", Title: "Block publish + unpublish against the bare kernel work",
			X: result.Axis{Label: "other published block volumes"}, Y: seconds, Baseline: "floor",
			Goals: []string{"under 5 ms per pair", "flat: the same time beside 200 other publications as beside none"},
			Notes: []string{"floor: open the image, bind a loop device with direct I/O, make the device node, and back; the plugin adds its locks, its checks and the fsync'ed state record a restarted plugin finds its devices by. On the host.", countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^PublishUnpublishBlock/published=(?P<x>\d+)/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	},
	{
		Pkg: "source.plinth.dev/node/kubernetes/csi",
		Result: result.Result{
			Name: "volume-stats", Title: "Volume usage of 100,000 files: quota read against a walk",
			Y: seconds, Baseline: "walk",
			Goals: []string{"the quota read at least 1000× faster than walking the volume (ratio at most 1/1000×)"},
			Notes: []string{"quota: NodeGetVolumeStats, one quotactl; walk: lstat of every entry, as the kubelet's fallback for a volume without stats does.", vmNote, countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^VolumeStats/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	},
	{
		Pkg: "source.plinth.dev/node/core/localstorage",
		Result: result.Result{
			Name: "state-record-write", Title: "A state record's write: atomic (rename, fsync) against a plain write with fsync",
			Y: seconds, Baseline: "fsync",
			Notes: []string{"On the host's filesystem (whatever /tmp is); -nosync variants show what the fsyncs cost.", countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^Write/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	},
	{
		Pkg: "source.plinth.dev/pkg/logtree",
		Result: result.Result{
			Name: "log-line", Title: "A log line, without and with readers streaming",
			Y: seconds, Baseline: "no readers",
			Notes: []string{countedNote},
		},
		Rules: []goRule{
			{Bench: regexp.MustCompile(`^Info$`), Metric: "ns/op", Series: "no readers", Scale: nsPerOp},
			{Bench: regexp.MustCompile(`^InfoWithStreams$`), Metric: "ns/op", Series: "4 streaming readers", Scale: nsPerOp},
		},
	},
	setQuota("xfs"),
	setQuota("ext4"),
	quotaWatch("rewrite", "a busy writer: 4 KiB overwritten in one file per op, whose events the kernel merges into one per batch"),
	quotaWatch("files", "many files: one of 10,000 files truncated, written (4 KiB) and closed per op, in turn, one check per file and batch"),
}

func copies(kind, key, xLabel, goal, what string) goSpec {
	return goSpec{
		Pkg: "source.plinth.dev/node/core/volume",
		Result: result.Result{
			Name: strings.ToLower(kind) + "-copies", Title: kind + " volume snapshot and restore against a full copy",
			X: result.Axis{Label: xLabel}, Y: seconds, Baseline: "cp",
			Goals: []string{goal},
			Notes: []string{what + " On a loop-mounted XFS (reflink=1) on the host; cp is cp --reflink=never followed by a sync. B-used/op is the data filesystem's growth per operation.", countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^` + kind + `Copies/` + key + `=(?P<x>\d+)/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	}
}

func foreignRSS(state, when string) goSpec {
	return goSpec{
		Pkg: "source.plinth.dev/node/kubernetes/provisioner",
		Result: result.Result{
			Name: "foreign-claims-rss-" + state, Title: "Memory per foreign claim, " + when,
			Y: result.Axis{Label: "RSS growth per foreign claim", Unit: "B"}, Baseline: "client-go informer",
			Goals: []string{"plinth-node under 2 KiB per claim of another node", "plinth-node's RSS flat, within 10%, from none to 100,000 claims of other nodes (issue 35): ratio-rss-" + state + "-to-empty at most 1.10"},
			Notes: []string{"100,000 claims of another node, created in two stages (10,000, then 90,000 more); plinth-node's settled RSS growth over its empty start, divided by the claims, beside a process running only a plain client-go informer on the same claims. The MiB-rss figures are plinth-node's settled RSS at each stage."},
		},
		Rules: []goRule{
			{Bench: regexp.MustCompile(`^ForeignClaimsRSS$`), Metric: "informer-B/pvc-" + state, Series: "client-go informer", Scale: 1},
			{Bench: regexp.MustCompile(`^ForeignClaimsRSS$`), Metric: "B/foreign-pvc-" + state, Series: "plinth-node", Scale: 1},
		},
	}
}

func resize(kind, what, where string) goSpec {
	notes := []string{"Claim patch to the new size visible to a process using the volume (" + what + "), 20 resizes per run; each run's figure is the median of its 20. Baseline: the kube-controller-manager's own reaction to the same patches (its ExternalExpanding Event reaching a watcher)."}
	if where != "" {
		notes = append(notes, where)
	}
	return goSpec{
		Pkg: "source.plinth.dev/node/kubernetes/resizer",
		Result: result.Result{
			Name: "resize-" + strings.ToLower(kind), Title: "Resize latency, " + strings.ToLower(kind) + " claim",
			Y: seconds, Baseline: "kube-controller-manager event",
			Goals: []string{"median under 1 s from the patch to the size a process sees"},
			Notes: notes,
		},
		Rules: []goRule{
			{Bench: regexp.MustCompile(`^Resize` + kind + `$`), Metric: "ms-kcm-event-median", Series: "kube-controller-manager event", Scale: msToS},
			{Bench: regexp.MustCompile(`^Resize` + kind + `$`), Metric: "ms-visible-median", Series: "plinth: size visible", Scale: msToS},
		},
	}
}

// quotaWatch is the cost of the quota watch (node/core, issue 37) to a
// writer in a filesystem volume, for one kind of work.
func quotaWatch(work, what string) goSpec {
	return goSpec{
		Pkg: "source.plinth.dev/node/core",
		Result: result.Result{
			Name: "quota-watch-" + work, Title: "A writer in a filesystem volume with and without the quota watch: " + work,
			Y: seconds, Baseline: "unwatched",
			Notes: []string{"The node's root (with its quota watch) against the volume engine alone, on the VM's XFS; " + what + ".", vmNote, countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^QuotaWatchWriteCost/work=` + work + `/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	}
}

func setQuota(fs string) goSpec {
	return goSpec{
		Pkg: "source.plinth.dev/pkg/fsquota",
		Result: result.Result{
			Name: "set-quota-" + fs, Title: "Project quota on a new directory (" + fs + ") against one chmod",
			Y: seconds, Baseline: "chmod",
			Goals: []string{"under 100 µs in the VM"},
			Notes: []string{"SetQuota is two metadata transactions (limit and project ID) plus open and close; chmod is one.", vmNote, countedNote},
		},
		Rules: []goRule{{Bench: regexp.MustCompile(`^SetQuota/fs=` + fs + `/impl=(?P<series>.+)$`), Metric: "ns/op", Scale: nsPerOp}},
	}
}
