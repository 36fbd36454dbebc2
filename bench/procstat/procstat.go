// Package procstat reads what a benchmark reports of a process from
// /proc: its resident memory and the CPU time it has used. The footprint
// and fleet benchmarks read the same figures of plinth-node, of its peers
// and of kube-apiserver, so they read them the same way.
package procstat

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"source.plinth.dev/pkg/procfs"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// RSS is process pid's resident set size in bytes (VmRSS).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading RSS: %w", err)
	}
	return parseRSS(string(b))
}

func parseRSS(status string) (int64, error) {
	for _, l := range strings.Split(status, "\n") {
		v, ok := strings.CutPrefix(l, "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing VmRSS %q: %w", v, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS line (a kernel thread or a zombie)")
}

// CPU is the user plus system CPU time process pid has used so far.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time: %w", err)
	}
	return parseCPU(string(b))
}

// statFields is /proc/PID/stat's fields after the command name
// (procfs.ParseStat): fields[0] is the state (field 3 of proc(5)).
func statFields(stat string) ([]string, error) {
	_, fields, err := procfs.ParseStat(stat)
	return fields, err
}

func parseCPU(stat string) (time.Duration, error) {
	f, err := statFields(stat)
	if err != nil {
		return 0, err
	}
	// utime and stime are fields 14 and 15 of proc(5).
	if len(f) < 13 {
		return 0, fmt.Errorf("stat has %d fields after the name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing CPU ticks %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// Child finds the process named name (its comm, as ps shows it) whose
// parent is ppid: how a benchmark finds the kube-apiserver that its
// control plane started.
func Child(ppid int, name string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		comm, parent, err := parseParent(string(b))
		if err == nil && parent == ppid && comm == name {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process %s with parent %d", name, ppid)
}

func parseParent(stat string) (comm string, ppid int, err error) {
	comm, f, err := procfs.ParseStat(stat)
	if err != nil || len(f) < 2 {
		return "", 0, fmt.Errorf("malformed stat %q", stat)
	}
	ppid, err = strconv.Atoi(f[1])
	return comm, ppid, err
}

// Sampler measures a process's CPU use over a window.
type Sampler struct {
	pid   int
	cpu   time.Duration
	since time.Time
}

// StartSampler starts a window on pid now.
func StartSampler(pid int) (*Sampler, error) {
	c, err := CPU(pid)
	if err != nil {
		return nil, err
	}
	return &Sampler{pid: pid, cpu: c, since: time.Now()}, nil
}

// Used is the CPU time used since the window started, and the window's
// length.
func (s *Sampler) Used() (cpu, wall time.Duration, err error) {
	c, err := CPU(s.pid)
	if err != nil {
		return 0, 0, err
	}
	return c - s.cpu, time.Since(s.since), nil
}

// Percent is the CPU used since the window started as a percentage of
// one core.
func (s *Sampler) Percent() (float64, error) {
	cpu, wall, err := s.Used()
	if err != nil {
		return 0, err
	}
	return 100 * cpu.Seconds() / wall.Seconds(), nil
}

// Settled waits until pid's RSS has moved by less than tolerance bytes
// over each of quiet consecutive reads interval apart (the runtime has
// digested the last burst and returned what it freed; one quiet interval
// is not enough, as a garbage collection can be minutes after a big
// list), reading at most tries times, and returns the last RSS read.
func Settled(pid int, interval time.Duration, tolerance int64, quiet, tries int) (int64, error) {
	prev, err := RSS(pid)
	if err != nil {
		return 0, err
	}
	calm := 0
	for range tries {
		time.Sleep(interval)
		cur, err := RSS(pid)
		if err != nil {
			return 0, err
		}
		if d := cur - prev; d < tolerance && d > -tolerance {
			calm++
		} else {
			calm = 0
		}
		prev = cur
		if calm >= quiet {
			return cur, nil
		}
	}
	return prev, nil
}

// The settling rule the benchmarks read resident memory by (Settled's
// arguments): less than 256 KiB of movement in each of 5 consecutive 2 s
// intervals, or 2 minutes at most. A fresh Go process lists what it
// watches; its memory after that is what it holds once the runtime has
// collected the lists. SettleRule says it in words for the results.
const (
	SettleInterval  = 2 * time.Second
	SettleTolerance = 256 << 10
	SettleQuiet     = 5
	SettleTries     = 60
)

// SettleRule describes the settling rule, for a result's notes.
func SettleRule() string {
	return fmt.Sprintf("its RSS (VmRSS of /proc/PID/status) moved by less than %d KiB in each of %d consecutive %s intervals",
		SettleTolerance>>10, SettleQuiet, SettleInterval)
}

// SettledAll is Settled for each of pids at once, so that many processes
// take as long to settle as the slowest of them; it returns their RSS in
// the order of pids.
func SettledAll(pids []int, interval time.Duration, tolerance int64, quiet, tries int) ([]int64, error) {
	rss := make([]int64, len(pids))
	var g errgroup.Group
	for i, pid := range pids {
		g.Go(func() error {
			r, err := Settled(pid, interval, tolerance, quiet, tries)
			if err != nil {
				return fmt.Errorf("process %d: %w", pid, err)
			}
			rss[i] = r
			return nil
		})
	}
	return rss, g.Wait()
}

// Calm waits until the CPU rate of pids together (cores: CPU seconds per
// wall second) has moved by less than tolerance between each of quiet
// consecutive windows of length window, reading at most tries windows,
// and returns the last window's rate and whether it calmed down. A rate
// taken as a baseline before a measurement is only one if the processes
// are not still busy with what came before (their start, the last
// round's work).
func Calm(pids []int, window time.Duration, tolerance float64, quiet, tries int) (float64, bool, error) {
	prev, calm := math.NaN(), 0
	for range tries {
		rate, err := Rate(pids, window)
		if err != nil {
			return 0, false, err
		}
		if math.Abs(rate-prev) < tolerance {
			calm++
		} else {
			calm = 0
		}
		prev = rate
		if calm >= quiet {
			return rate, true, nil
		}
	}
	return prev, false, nil
}

// Rate is the CPU per wall second that pids used together over d.
func Rate(pids []int, d time.Duration) (float64, error) {
	r, err := Rates(d, pids)
	if err != nil {
		return 0, err
	}
	return r[0], nil
}

// Rates is Rate of each group of pids, over one window of length d for
// all: 0 for an empty group.
func Rates(d time.Duration, groups ...[]int) ([]float64, error) {
	ss := make([][]*Sampler, len(groups))
	for g, pids := range groups {
		for _, pid := range pids {
			s, err := StartSampler(pid)
			if err != nil {
				return nil, err
			}
			ss[g] = append(ss[g], s)
		}
	}
	time.Sleep(d)
	rates := make([]float64, len(groups))
	for g := range groups {
		var total, wall time.Duration
		for _, s := range ss[g] {
			c, w, err := s.Used()
			if err != nil {
				return nil, err
			}
			total, wall = total+c, w
		}
		if wall > 0 {
			rates[g] = total.Seconds() / wall.Seconds()
		}
	}
	return rates, nil
}

// Machine is the CPU time of all the machine's cores together since boot:
// busy (user, nice, system, irq, softirq, steal) and total (the same plus
// idle and iowait). Between two reads, total grows by the wall time times
// the cores, so busy's growth over total's is how loaded the machine was,
// whatever ran: processes a benchmark does not name (container shims,
// runc, the pods) count too.
func Machine() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("reading machine CPU time: %w", err)
	}
	return parseMachine(string(b))
}

func parseMachine(stat string) (busy, total time.Duration, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	// "cpu" user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is already in user and nice.
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("malformed /proc/stat first line %q", line)
	}
	var ticks [8]int64
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("parsing /proc/stat field %d %q: %w", i+1, f[i+1], err)
		}
	}
	var all int64
	for _, t := range ticks {
		all += t
	}
	const idle, iowait = 3, 4
	toDur := func(t int64) time.Duration { return time.Duration(t) * time.Second / clockTicks }
	return toDur(all - ticks[idle] - ticks[iowait]), toDur(all), nil
}
