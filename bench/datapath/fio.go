package main

import (
	"time"

	"source.plinth.dev/bench/fio"
)

// workloads are issue 40's: 4k random read and write at queue depth 1
// (one request's latency) and 32 (what the device sustains), and 1 MiB
// sequential read and write at depth 4 (bandwidth; the depth of the
// issue's first trial). Writes overwrite blocks the fill already wrote,
// so no allocation is measured.
var workloads = []fio.Job{
	{Name: "randread-4k-qd1", RW: "randread", BS: "4k", Depth: 1},
	{Name: "randread-4k-qd32", RW: "randread", BS: "4k", Depth: 32},
	{Name: "randwrite-4k-qd1", RW: "randwrite", BS: "4k", Depth: 1},
	{Name: "randwrite-4k-qd32", RW: "randwrite", BS: "4k", Depth: 32},
	{Name: "read-1m-qd4", RW: "read", BS: "1m", Depth: 4},
	{Name: "write-1m-qd4", RW: "write", BS: "1m", Depth: 4},
}

// fileSize is how much of each target fio uses: the block claim's size,
// and a file of the same size in a filesystem claim of twice that.
const (
	fileSize  = 1 << 30
	fileName  = "fio.dat"
	blockPath = "/dev/xvda"
)

// timing is how long each job runs: ramp is run first and not counted.
type timing struct {
	ramp, runtime time.Duration
}

// roundArgs are the arguments of one round on target: every workload in
// turn.
func roundArgs(target string, size int64, t timing) []string {
	return fio.RunArgs(target, size, t.ramp, t.runtime, workloads)
}
