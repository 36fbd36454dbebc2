package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"source.plinth.dev/test/images"
)

// workload is one fio job of every round.
type workload struct {
	// name is fio's job name and the workload's label in the notes.
	name  string
	rw    string
	bs    string
	depth int
}

// workloads are issue 40's: 4k random read and write at queue depth 1
// (one request's latency) and 32 (what the device sustains), and 1 MiB
// sequential read and write at depth 4 (bandwidth; the depth of the
// issue's first trial). Writes overwrite blocks the fill already wrote,
// so no allocation is measured.
var workloads = []workload{
	{"randread-4k-qd1", "randread", "4k", 1},
	{"randread-4k-qd32", "randread", "4k", 32},
	{"randwrite-4k-qd1", "randwrite", "4k", 1},
	{"randwrite-4k-qd32", "randwrite", "4k", 32},
	{"read-1m-qd4", "read", "1m", 4},
	{"write-1m-qd4", "write", "1m", 4},
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

// common are the options of every fio run: libaio and direct I/O, so that
// the page cache is out of every figure, on one file or device.
func common(target string, size int64) []string {
	return []string{
		"--output-format=json",
		"--ioengine=libaio",
		"--direct=1",
		"--filename=" + target,
		"--size=" + strconv.FormatInt(size, 10),
	}
}

// roundArgs are the arguments of one round on target: every workload in
// turn (stonewall: a job starts once the one before it ended).
func roundArgs(target string, size int64, t timing) []string {
	args := append(common(target, size),
		"--time_based",
		"--ramp_time="+millis(t.ramp),
		"--runtime="+millis(t.runtime),
		"--stonewall",
	)
	for _, w := range workloads {
		args = append(args, "--name="+w.name, "--rw="+w.rw, "--bs="+w.bs, "--iodepth="+strconv.Itoa(w.depth))
	}
	return args
}

// fillArgs write all of target once before the rounds: every target then
// has its blocks allocated and written, as a block volume's image has once
// its pod wrote it, and reads read data rather than holes.
func fillArgs(target string, size int64) []string {
	return append(common(target, size), "--name=fill", "--rw=write", "--bs=1m", "--iodepth=4")
}

// millis is d for fio, in whole milliseconds: fio reads "0.5s" as 0 s
// (the integer before the point), "500ms" exactly.
func millis(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// measure is one workload's figures in one round.
type measure struct {
	iops      float64
	bandwidth float64 // bytes per second
	p50, p99  float64 // completion latency, seconds
}

// fioOutput is the part of fio's JSON output the benchmark reads.
type fioOutput struct {
	Jobs []struct {
		Name  string    `json:"jobname"`
		Error int       `json:"error"`
		Read  direction `json:"read"`
		Write direction `json:"write"`
	} `json:"jobs"`
}

type direction struct {
	IOPS float64 `json:"iops"`
	BW   float64 `json:"bw_bytes"`
	IOs  int64   `json:"total_ios"`
	Clat struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// parseRound reads fio's JSON from out (a pod's log may carry fio's
// warnings before it) into one measure per workload, by workload name.
func parseRound(out []byte) (map[string]measure, error) {
	start := bytes.Index(out, []byte("{\n"))
	if start < 0 {
		return nil, fmt.Errorf("no JSON in fio's output: %q", tail(out))
	}
	var o fioOutput
	if err := json.NewDecoder(bytes.NewReader(out[start:])).Decode(&o); err != nil {
		return nil, fmt.Errorf("decoding fio's output: %w", err)
	}
	got := map[string]measure{}
	for _, j := range o.Jobs {
		d := j.Read
		if j.Write.IOs > 0 {
			d = j.Write
		}
		if j.Error != 0 || d.IOs == 0 {
			return nil, fmt.Errorf("fio job %s: error %d, %d I/Os", j.Name, j.Error, d.IOs)
		}
		p50, ok50 := d.Clat.Percentile["50.000000"]
		p99, ok99 := d.Clat.Percentile["99.000000"]
		if !ok50 || !ok99 {
			return nil, fmt.Errorf("fio job %s: no 50th or 99th completion-latency percentile", j.Name)
		}
		got[j.Name] = measure{iops: d.IOPS, bandwidth: d.BW, p50: p50 / 1e9, p99: p99 / 1e9}
	}
	for _, w := range workloads {
		if _, ok := got[w.name]; !ok {
			return nil, fmt.Errorf("fio's output has no job %s", w.name)
		}
	}
	return got, nil
}

// tail is the end of out, for an error message.
func tail(out []byte) []byte {
	if len(out) > 2000 {
		return out[len(out)-2000:]
	}
	return out
}

// fioVersion is what the node's fio says it is.
func fioVersion() string {
	out, err := exec.Command(images.DefaultFio, "--version").Output()
	if err != nil {
		return "(version unknown: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}
