package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/procfs"
)

// termOutcome is how the wait after init's SIGTERM to every process
// ended (awaitTerm).
type termOutcome int

const (
	// termAllEnded: no process is left.
	termAllEnded termOutcome = iota
	// termOnlyDeaf: the processes left are all deaf to SIGTERM
	// (deafToTerm), so waiting longer would change nothing.
	termOnlyDeaf
	// termGraceOver: processes that could still act on SIGTERM were
	// left when the grace ended.
	termGraceOver
)

// termWait is what awaitTerm saw: how it ended, and the processes left
// then (none for termAllEnded), with the names of those that could still
// act on SIGTERM (for termGraceOver: what the grace was spent on).
type termWait struct {
	outcome   termOutcome
	left      []int
	listening []string
}

// awaitTerm waits, after init sent SIGTERM to every process, for them to
// end, reaping init's children as they do, for at most grace. It reads
// the processes left from proc (a mount of procfs showing init's PID
// namespace) and ends the wait as soon as none is left that SIGTERM can
// still end: a container's PID 1 without a handler for it never gets the
// signal from outside its namespace (the kernel drops it), so a node
// running pods would otherwise wait the whole grace at every shutdown,
// for nothing. A process that handles SIGTERM keeps the grace.
func awaitTerm(proc string, grace time.Duration) termWait {
	deadline := time.Now().Add(grace)
	for {
		if reapAll() {
			return termWait{outcome: termAllEnded}
		}
		left, listening := liveProcesses(proc)
		switch {
		case len(left) == 0:
			// Only zombies of processes that are not init's children,
			// which their parents' end hands to init.
			if time.Now().After(deadline) {
				return termWait{outcome: termGraceOver}
			}
		case len(listening) == 0:
			return termWait{outcome: termOnlyDeaf, left: left}
		case time.Now().After(deadline):
			return termWait{outcome: termGraceOver, left: left, listening: listening}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reapAll reaps every child of init that has ended, and reports whether
// none is left.
func reapAll() bool {
	for {
		var st unix.WaitStatus
		pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.ECHILD):
			return true
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil || pid <= 0:
			return false
		}
	}
}

// liveProcesses lists the processes of proc other than the caller and
// kernel threads that have not ended (zombies are done), and names those
// of them SIGTERM can still end.
func liveProcesses(proc string) (left []int, listening []string) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, nil
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := readProcStatus(filepath.Join(proc, e.Name()))
		if err != nil || st.kernelThread || st.state == 'Z' || st.state == 'X' {
			continue // ended meanwhile, or never the signal's
		}
		left = append(left, pid)
		if !st.deafToTerm() {
			listening = append(listening, st.name)
		}
	}
	return left, listening
}

// procStatus is what awaitTerm reads of one process.
type procStatus struct {
	// name is the command's name (comm).
	name         string
	state        byte
	kernelThread bool
	// nsInit: the process is PID 1 of its own PID namespace (the last
	// of its NSpid IDs is 1), a container's first process.
	nsInit bool
	// ignored and caught are the process's SigIgn and SigCgt masks.
	ignored, caught uint64
}

// sigTermBit is SIGTERM's bit in /proc's signal masks (signal n is bit
// n-1).
const sigTermBit = 1 << (unix.SIGTERM - 1)

// deafToTerm says whether SIGTERM from init cannot end the process: it
// ignores the signal, or it is PID 1 of a PID namespace below init's
// without a handler for it (the kernel delivers to such a process only
// the signals it catches, and SIGKILL), or it is stopped and cannot act on
// it.
func (s procStatus) deafToTerm() bool {
	switch {
	case s.ignored&sigTermBit != 0:
		return true
	case s.nsInit && s.caught&sigTermBit == 0:
		return true
	case s.state == 'T' || s.state == 't':
		return true
	}
	return false
}

// kernelThreadFlag is PF_KTHREAD in the flags of /proc/PID/stat.
const kernelThreadFlag = 0x00200000

// readProcStatus reads the process whose /proc directory is dir.
func readProcStatus(dir string) (procStatus, error) {
	var s procStatus
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return s, err
	}
	comm, fields, err := procfs.ParseStat(string(stat))
	if err != nil {
		return s, err
	}
	// flags is field 9 of proc(5).
	if len(fields) < 7 {
		return s, errors.New("short stat")
	}
	s.name, s.state = comm, fields[0][0]
	if flags, err := strconv.ParseUint(fields[6], 10, 64); err == nil {
		s.kernelThread = flags&kernelThreadFlag != 0
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "NSpid":
			ids := strings.Fields(value)
			s.nsInit = len(ids) > 1 && ids[len(ids)-1] == "1"
		case "SigIgn":
			s.ignored, _ = strconv.ParseUint(value, 16, 64)
		case "SigCgt":
			s.caught, _ = strconv.ParseUint(value, 16, 64)
		}
	}
	return s, nil
}
