// Package fio runs the benchmarks' fio jobs and reads their figures: the
// arguments every data-path measurement shares (libaio, direct I/O, one
// target), job times fio reads exactly, and its JSON output as one
// Measure per job. bench/datapath and bench/audit run it, on the node and
// in pods.
package fio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"source.plinth.dev/test/images"
)

// Job is one fio job of a run.
type Job struct {
	// Name is fio's job name, the key of its Measure.
	Name  string
	RW    string // fio's --rw
	BS    string // fio's --bs
	Depth int    // fio's --iodepth
}

// Common are the options of every run on target: libaio and direct I/O,
// so that the page cache is out of every figure, JSON output, and size
// bytes of target.
func Common(target string, size int64) []string {
	return []string{
		"--output-format=json",
		"--ioengine=libaio",
		"--direct=1",
		"--filename=" + target,
		"--size=" + strconv.FormatInt(size, 10),
	}
}

// FillArgs write all of target once: its blocks are then allocated and
// written, so that a run's writes overwrite and its reads read data
// rather than holes.
func FillArgs(target string, size int64) []string {
	return append(Common(target, size), "--name=fill", "--rw=write", "--bs=1m", "--iodepth=4")
}

// RunArgs are the arguments of one run on target: each job in turn
// (stonewall: a job starts once the one before it ended), each for ramp
// (not counted) and then runtime.
func RunArgs(target string, size int64, ramp, runtime time.Duration, jobs []Job) []string {
	args := append(Common(target, size),
		"--time_based",
		"--ramp_time="+Millis(ramp),
		"--runtime="+Millis(runtime),
		"--stonewall",
	)
	for _, j := range jobs {
		args = append(args, "--name="+j.Name, "--rw="+j.RW, "--bs="+j.BS, "--iodepth="+strconv.Itoa(j.Depth))
	}
	return args
}

// Millis is d for fio, in whole milliseconds: fio reads "0.5s" as 0 s
// (the integer before the point), "500ms" exactly.
func Millis(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// Measure is one job's figures in one run.
type Measure struct {
	IOPS           float64
	Bandwidth      float64 // bytes per second
	Mean, P50, P99 float64 // completion latency, seconds
}

// output is the part of fio's JSON output read here.
type output struct {
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
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// Parse reads fio's JSON from out (a pod's log may carry fio's warnings
// before it) into one Measure per job, by job name. Every job of want
// must be there, without error, with I/Os and both percentiles.
func Parse(out []byte, want []Job) (map[string]Measure, error) {
	start := bytes.Index(out, []byte("{\n"))
	if start < 0 {
		return nil, fmt.Errorf("no JSON in fio's output: %q", Tail(out))
	}
	var o output
	if err := json.NewDecoder(bytes.NewReader(out[start:])).Decode(&o); err != nil {
		return nil, fmt.Errorf("decoding fio's output: %w", err)
	}
	got := map[string]Measure{}
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
		got[j.Name] = Measure{IOPS: d.IOPS, Bandwidth: d.BW, Mean: d.Clat.Mean / 1e9, P50: p50 / 1e9, P99: p99 / 1e9}
	}
	for _, j := range want {
		if _, ok := got[j.Name]; !ok {
			return nil, fmt.Errorf("fio's output has no job %s", j.Name)
		}
	}
	return got, nil
}

// Tail is the end of out, for an error message.
func Tail(out []byte) []byte {
	if len(out) > 2000 {
		return out[len(out)-2000:]
	}
	return out
}

// Version is what this host's fio (the one the fio image carries too)
// says it is.
func Version() string {
	out, err := exec.Command(images.DefaultFio, "--version").Output()
	if err != nil {
		return "(version unknown: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// RunHost runs this host's fio with args.
func RunHost(ctx context.Context, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, images.DefaultFio, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("fio: %w\n%s%s", err, Tail(out), stderr.String())
	}
	return out, nil
}
