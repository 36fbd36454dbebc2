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

// jobs are the fio jobs of every run, in turn: one request at a time, so
// that each completion's latency is the volume's answer to that request
// alone.
var jobs = []string{"randread-4k-qd1", "randwrite-4k-qd1"}

const (
	fioFile = mountPath + "/fio.dat"
	fioSize = 128 << 20
)

// common are the options of every fio run: libaio and direct I/O, so the
// page cache is out of the figures.
func common() []string {
	return []string{"--output-format=json", "--ioengine=libaio", "--direct=1",
		"--filename=" + fioFile, "--size=" + strconv.Itoa(fioSize)}
}

// fioFillArgs write the file once in full, so that the runs' writes
// overwrite allocated blocks and its reads read data.
func fioFillArgs() []string {
	return append(common(), "--name=fill", "--rw=write", "--bs=1m", "--iodepth=4")
}

// runArgs are one run: each job for runtime after a second's ramp, one
// after the other.
func runArgs(runtime time.Duration) []string {
	args := append(common(), "--time_based", "--ramp_time=1s",
		"--runtime="+strconv.FormatFloat(runtime.Seconds(), 'f', -1, 64)+"s", "--stonewall",
		"--bs=4k", "--iodepth=1")
	for _, j := range jobs {
		rw := "randread"
		if j == jobs[1] {
			rw = "randwrite"
		}
		args = append(args, "--name="+j, "--rw="+rw)
	}
	return args
}

// measure is one job's figures in one run.
type measure struct {
	iops           float64
	mean, p50, p99 float64 // completion latency, seconds
}

// fioOutput is the part of fio's JSON output read here.
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
	IOs  int64   `json:"total_ios"`
	Clat struct {
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// parseRun reads fio's JSON from out (after any warnings fio printed)
// into one measure per job.
func parseRun(out []byte) (map[string]measure, error) {
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
		p50, ok50 := d.Clat.Percentile["50.000000"]
		p99, ok99 := d.Clat.Percentile["99.000000"]
		if j.Error != 0 || d.IOs == 0 || !ok50 || !ok99 {
			return nil, fmt.Errorf("fio job %s: error %d, %d I/Os, percentiles %v", j.Name, j.Error, d.IOs, d.Clat.Percentile)
		}
		got[j.Name] = measure{iops: d.IOPS, mean: d.Clat.Mean / 1e9, p50: p50 / 1e9, p99: p99 / 1e9}
	}
	for _, j := range jobs {
		if _, ok := got[j]; !ok {
			return nil, fmt.Errorf("fio's output has no job %s", j)
		}
	}
	return got, nil
}

// fioVersion is what this host's fio, the pods' fio, says it is.
func fioVersion() string {
	out, err := exec.Command(images.DefaultFio, "--version").Output()
	if err != nil {
		return "version unknown: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}
