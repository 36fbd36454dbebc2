package main

import (
	"time"

	"source.plinth.dev/bench/fio"
)

// jobs are the fio jobs of every run, in turn: one request at a time, so
// that each completion's latency is the volume's answer to that request
// alone.
var jobs = []fio.Job{
	{Name: "randread-4k-qd1", RW: "randread", BS: "4k", Depth: 1},
	{Name: "randwrite-4k-qd1", RW: "randwrite", BS: "4k", Depth: 1},
}

const (
	fioFile = mountPath + "/fio.dat"
	fioSize = 128 << 20
)

// runArgs are one run: each job for runtime after a second's ramp, one
// after the other.
func runArgs(runtime time.Duration) []string {
	return fio.RunArgs(fioFile, fioSize, time.Second, runtime, jobs)
}
